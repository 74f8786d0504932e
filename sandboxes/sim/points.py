"""A published benchmark point (../shared/data/public-benchmarks/points.json) as a simulator case:
model card, weights, hardware, framework (and older release), the launch's own flags parsed by
the framework adapter, and the benchmark client's workload. Derived from the point's fields by
rule, never by a per-point table, so a point not seen before maps the same way.

A point maps, or it is `out of scope` with the reason (a multi-node / disaggregated run, a GPU
count or hardware the source does not state). A flag the adapter rejects is a *refusal*: the
configuration really ran, so the case is still simulated without that flag and the refusal is
listed (the flag tables in tools/frameworks are being regenerated from the real parsers).
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from sandboxes.sim import frameworks as simfw
from sandboxes.sim.perf import SimConfig
from tools import frameworks
from tools.candidate import Candidate
from tools.frameworks.base import FlagError
from tools.hardware import get_hardware
from tools.models import get_model

_MODELS = (("glm-5", "glm-5.2"), ("deepseek-r1", "deepseek-v3"), ("deepseek-v3.2", "deepseek-v3.2"),
           ("kimi-k2", "kimi-k2"), ("qwen3.5-397b", "qwen3.5-397b-a17b"), ("gpt-oss-120b", "gpt-oss-120b"),
           ("llama-3.3-70b", "llama-3.3-70b"), ("llama-3.1-405b", "llama-3.1-405b"))
_HW = {"MI300X": "mi300x", "MI325X": "mi325x", "MI355X": "mi355x", "B200": "b200", "H200": "h200", "B300": "b300"}
_ENTRY = {"sglang": "sglang.launch_server", "atom": "atom.entrypoints.openai_server", "vllm": "serve"}
_MODEL_FLAGS = {"sglang": ("--model-path", "--model"), "atom": ("--model",), "vllm": ("--model",)}
_MANAGED = ("--port", "--host", "--server-port")  # where the server listens: not a performance knob


@dataclass
class Case:
    id: str
    source: str
    model: str
    weights: str
    hw: str
    framework: str
    version: str | None
    gpus: int
    tail: list[str]  # the launch's flags as the adapter accepted them
    isl: int
    osl: int
    range_ratio: float
    concurrency: int
    num_prompts: int
    random_tokens: bool
    measured: dict  # output_tok_s (per server), ttft_s, tpot_s where the source gives them
    refused: list[str] = field(default_factory=list)  # adapter errors on flags of a run that happened
    release: str | None = None  # the framework release the source names (its CLI parses the launch)
    story: bool = False

    @property
    def group(self) -> str:
        return f"{self.framework}/{get_hardware(self.hw).vendor}" + (f"/{self.version}" if self.version else "")

    @property
    def load(self) -> str:
        c = self.concurrency
        return "c=1" if c <= 1 else "c2-16" if c <= 16 else "c17-64" if c <= 64 else "c65+"


class OutOfScope(ValueError):
    pass


def _framework(p: dict) -> tuple[str, str | None]:
    fw = p["framework"].lower()
    if any(k in fw for k in ("pd", "disagg", "dynamo", "mori-sglang")) or "PD" in (p.get("parallelism") or ""):
        raise OutOfScope("prefill/decode disaggregated or multi-node serving is not modelled")
    if fw.startswith("atom"):
        return "atom", None
    if "vllm + atom" in fw:
        return "vllm", None
    for name in ("sglang", "vllm"):
        if name in fw:
            m = re.search(r"v?0\.5\.(\d+)", fw) if name == "sglang" else None
            # sglang up to 0.5.8 predates the aiter MoE / MLA kernels the later images ship.
            return name, ("0.5.8" if m and int(m.group(1)) <= 8 else None)
    raise OutOfScope(f"framework {p['framework']!r} is not simulated")


def _weights(p: dict, hw_vendor: str) -> str:
    w = (p.get("weights_precision") or "").upper()
    if "/" in w and "FP4" in w and "FP8" in w:
        raise OutOfScope("weights ambiguous (FP8/FP4 variants)")
    if "NVFP4" in w or ("FP4" in w and hw_vendor == "nvidia"):
        return "nvfp4"
    if "FP4" in w:
        return "mxfp4"
    return "fp8" if "FP8" in w else "bf16"


def _subst(text: str, p: dict, tp: int) -> str:
    env = {"ISL": p["isl"], "OSL": p["osl"], "CONC": p.get("concurrency") or 1, "TP": tp}
    text = re.sub(r"\$\(\(([^)]*)\)\)", lambda m: str(eval(re.sub(r"\b[A-Z]+\b", lambda v: str(env.get(v.group(0), 0)),
                                                                m.group(1)), {"__builtins__": {}})), text)
    return re.sub(r"\$(\w+)", lambda m: str(env.get(m.group(1), m.group(0))), text)


def _tp_from(p: dict) -> int:
    m = re.search(r"(?:-tp|--tp-size|--tensor-parallel-size)[ =](\d+)|TP(\d+)", p.get("parallelism") or "")
    return int(next(g for g in m.groups() if g)) if m else int(p.get("gpu_count") or 1)


def _tail(p: dict, fw: str, tp: int) -> list[str]:
    launch = p.get("launch") or ""
    entry = _ENTRY[fw]
    if entry in launch and "..." not in launch.split(entry, 1)[1][:5]:
        # Parenthesized remarks of the source ("(env ...)", "(+VAR=1)") are not part of the command.
        text = re.sub(r"\([^()]*\)", " ", _subst(launch, p, tp))
        try:
            toks = shlex.split(text)
        except ValueError:
            toks = text.split()
        toks = toks[toks.index(next(t for t in toks if t.endswith(entry))) + 1:]
        if fw == "vllm" and toks and not toks[0].startswith("-"):
            toks = toks[1:]  # `vllm serve MODEL`
    else:  # no published command: the parallelism and speculative settings as the source states them
        toks = ["--tp-size" if fw == "sglang" else "--tensor-parallel-size", str(tp)]
        spec = p.get("spec_decoding") or ""
        if (m := re.search(r"steps (\d+), topk (\d+), draft tokens (\d+)", spec)) and fw == "sglang":
            toks += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", m.group(1),
                     "--speculative-eagle-topk", m.group(2), "--speculative-num-draft-tokens", m.group(3)]
        elif spec.startswith("--") and fw != "sglang":  # the source quotes the speculative flags themselves
            toks += shlex.split(spec)
        # The KV dtype the source states (the KV pool's size, so how many requests fit at once).
        kv = (p.get("kv_cache_dtype") or "").split(" ")[0]
        if kv.startswith("fp8"):
            toks += ["--kv_cache_dtype" if fw == "atom" else "--kv-cache-dtype", "fp8" if fw == "atom" else kv]
    out, i = [], 0
    skip = _MODEL_FLAGS[fw] + _MANAGED
    while i < len(toks):
        t = toks[i]
        name = t.split("=", 1)[0]
        if name in skip:
            i += 1 if "=" in t else 2
            continue
        out.append(t)
        i += 1
    return out


def _release(p: dict) -> str | None:
    m = re.search(r"v?(\d+\.\d+\.\d+)", p.get("framework") or "")
    return m.group(1) if m else None


def parse_tail(fw_name: str, tail: list[str], release: str | None = None) -> tuple[dict, list[str], list[str]]:
    """(flags, accepted tail, refusals): the launch parsed by the CLI of the release it ran on
    (the nearest shipped schema); flags it rejects are dropped one by one and listed, so a
    configuration that ran is still simulated."""
    fw = frameworks.get(fw_name, release)
    refused: list[str] = []
    tail = list(tail)
    for _ in range(40):
        try:
            return fw.parse_flags(tail), tail, refused
        except FlagError as e:
            what = "unrecognized" if str(e).startswith("unrecognized") else f"{e.value!r} not accepted"
            refused.append(f"{e.flag} ({what})")
            bad = e.flag if isinstance(e.value, list) or e.value is None else e.flag
            idx = next((k for k, t in enumerate(tail) if t.split("=", 1)[0] == bad
                        or (fw.lookup(t.split("=", 1)[0])[0] or None) and fw.lookup(t.split("=", 1)[0])[0].name == bad), None)
            if idx is None:
                raise OutOfScope(f"cannot parse the launch: {e}") from None
            takes_value = "=" not in tail[idx] and idx + 1 < len(tail) and not tail[idx + 1].startswith("--")
            del tail[idx: idx + (2 if takes_value else 1)]
    raise OutOfScope("too many rejected flags")


def _measured(p: dict) -> dict:
    scope = (p.get("output_tok_s_scope") or "").lower()
    if p.get("output_tok_s") is None or "per gpu" in scope or "tok/s/gpu" in scope:
        raise OutOfScope("no per-server output tok/s")
    out = {"output_tok_s": float(p["output_tok_s"])}
    for k in ("ttft", "tpot"):
        v = p.get(f"{k}_median_ms") if p.get(f"{k}_median_ms") is not None else p.get(f"{k}_mean_ms")
        if v is not None:
            out[f"{k}_s"] = float(v) / 1000
    return out


def cases(points: list[dict]) -> tuple[list[Case], dict[str, str]]:
    """All points that map, and why each other one does not. A source document names its
    benchmark client once: every point of that document shares it."""
    doc = lambda p: (str((p.get("source") or {}).get("repo")), str((p.get("source") or {}).get("path")))  # noqa: E731
    sglang_client = {doc(p) for p in points if "sglang.bench_serving" in str(p.get("notes"))}
    out, skipped = [], {}
    for p in points:
        try:
            out.append(to_case(p, text_prompts=doc(p) in sglang_client))
        except OutOfScope as e:
            skipped[p["id"]] = str(e)
    return out, skipped


def to_case(p: dict, *, text_prompts: bool = False) -> Case:
    fw, version = _framework(p)
    hw = next((v for k, v in _HW.items() if k in (p.get("hardware") or "")), None)
    if hw is None:
        raise OutOfScope(f"hardware not stated ({p.get('hardware')!r})")
    if not p.get("gpu_count"):
        raise OutOfScope("GPU count not stated")
    name = p["model"].lower()
    model = next((card for key, card in sorted(_MODELS, key=lambda kv: -len(kv[0])) if key in name), None)
    if model is None:
        raise OutOfScope(f"no model card for {p['model']!r}")
    weights = _weights(p, get_hardware(hw).vendor)
    tp = _tp_from(p)
    flags, tail, refused = parse_tail(fw, _tail(p, fw, tp), _release(p))
    conc = int(p.get("concurrency") or 1)
    return Case(id=p["id"], source=str((p.get("source") or {}).get("repo") or (p.get("source") or {}).get("page") or "?"),
                model=model, weights=weights, hw=hw, framework=fw, version=version, gpus=int(p["gpu_count"]),
                tail=tail, isl=int(p["isl"]), osl=int(p["osl"]), range_ratio=float(p.get("random_range_ratio") or 1.0),
                concurrency=conc, num_prompts=int(p.get("num_prompts") or 10 * conc),
                # sglang's bench_serving builds its `random` prompts from ShareGPT text; the vLLM /
                # ATOM / InferenceX clients draw random token ids.
                random_tokens=not text_prompts, measured=_measured(p), refused=refused, release=_release(p))


def sim_config(case: Case) -> SimConfig:
    """The case's launch as the simulated framework reads it (tuned MoE kernels: published
    benchmarks run with the vendor's tuned tables)."""
    flags, _, _ = parse_tail(case.framework, case.tail, case.release)
    c = Candidate(framework=case.framework, weights=case.weights, flags={})
    cfg = simfw.to_config(case.framework, flags, c, get_model(case.model), get_hardware(case.hw)).cfg
    cfg.moe_tuned, cfg.version = True, case.version
    return cfg
