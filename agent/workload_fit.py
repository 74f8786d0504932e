"""Can the target serve the workload at all? Checked before anything is launched.

A workload the model cannot take (prompt + output beyond its context window, or beyond the
`--max-model-len` the user pinned in base_flags; one request's KV cache larger than the node's
memory after the weights) would only produce minutes of refused requests on a real node. A
workload the user gave is refused here with the numbers (exit 2); the default one (the story's
20k/1k, right for the story's model, not for every model) is shrunk to fit, and the run says so.
"""
from __future__ import annotations

from tools.bench.workload import Workload, window
from agent.errors import BadInput
from tools.models import KV_DTYPE_BYTES, PRECISIONS


def _kv_fits(card, hw, tokens: int) -> tuple[bool, float, float]:
    """One request's KV against the node's memory left after the weights, in GB, both at the most
    compact precision known: refuse only what no quantization the loop may try could make fit."""
    try:
        kv = card.kv_bytes_per_token(min(KV_DTYPE_BYTES, key=KV_DTYPE_BYTES.get)) * tokens / 1e9
        weights = min(card.weight_bytes(p) for p in PRECISIONS) / 1e9
        free = float(hw.hbm_gb) * int(getattr(hw, "gpus_per_node", 1) or 1) - weights
    except Exception:  # noqa: BLE001  a card or profile without the numbers: nothing to check
        return True, 0.0, 0.0
    return kv <= free, kv, free


def _shrink(w: Workload, limit: int) -> Workload:
    """The largest power-of-two prompt (keeping the output an eighth of it, at most the default's)
    that leaves the output room inside `limit`."""
    out = min(w.output_len, max(16, limit // 8))
    inp = 1
    while inp * 2 + out <= limit and inp * 2 <= w.input_len:
        inp *= 2
    return w.model_copy(update={"input_len": inp, "output_len": out})


# The defaults are sized for a GPU node (the story's 20k/1k workload, 2-minute load levels, 200
# items per eval task). A CPU node serves a small model at tens of tokens per second: the same
# settings would take hours per trial. These are what one trial on a 2-core host can measure in a
# few minutes; each applies only where the user set nothing.
CPU_MEASURE = {"workload": Workload(input_len=512, output_len=64, prefix_hit=0.5),
               "single_stream": Workload(input_len=256, output_len=64, prefix_hit=0.0),
               "duration_s": 10.0, "requests_per_point": 12, "max_points": 6, "bisect_steps": 1,
               "single_stream_requests": 2, "eval_items": 10, "start_from_warmup": True}


# A shared CPU host's runs of one configuration spread by up to 30% (TESTBED.md): a single-shot
# keep needs more than the GPU default's 2% noise floor, and a third repeat of each side (minutes
# each here) rarely turns a gap inside that noise into a verdict.
CPU_GATE = {"noise_floor": 0.15, "max_repeats": 2}


def _cpu_defaults(measure, gate, hw) -> list[str]:
    if getattr(hw, "vendor", "") != "cpu":
        return []
    changed: dict = {k: v for k, v in CPU_MEASURE.items() if k not in measure.model_fields_set}
    for k, v in changed.items():
        setattr(measure, k, v)
    for k, v in CPU_GATE.items():
        if k not in gate.model_fields_set:
            setattr(gate, k, v)
            changed[f"gate {k}"] = v
    if not changed:
        return []
    shown = ", ".join(f"{k} {v.input_len}/{v.output_len}" if isinstance(v, Workload) else
                      "sweep from the warmup's rate" if k == "start_from_warmup" else f"{k} {v:g}"
                      for k, v in changed.items())
    return [f"measure on a CPU node: {shown} (the defaults are sized for GPU nodes); "
            "set them in --config to choose others"]


def fit(measure, gate, card, hw, base_flags: dict, model: str) -> list[str]:
    """Check (and, for defaulted workloads, shrink in place) measure.workload and
    measure.single_stream, and size the defaults for a CPU node; returns the notes saying what
    was changed and why."""
    limit, src = window(card, base_flags)
    notes: list[str] = _cpu_defaults(measure, gate, hw)
    for field in ("workload", "single_stream"):
        w: Workload = getattr(measure, field)
        need = w.input_len + w.output_len
        if limit and need > limit:
            if field in measure.model_fields_set:
                raise BadInput(f"measure.{field}: {w.input_len} input + {w.output_len} output = {need} tokens "
                               f"exceeds the {limit}-token context of {model} ({src}); give input_len + "
                               f"output_len <= {limit} in --config")
            new = _shrink(w, limit)
            setattr(measure, field, new)
            notes.append(f"{field}: the default {w.input_len}/{w.output_len} tokens does not fit {model}'s "
                         f"{limit}-token context ({src}); using {new.input_len} in / {new.output_len} out "
                         f"(prefix hit {new.prefix_hit:g}). Set measure.{field} in --config to choose another")
        w = getattr(measure, field)
        ok, kv, free = _kv_fits(card, hw, w.input_len + w.output_len)
        if not ok:
            raise BadInput(f"measure.{field}: one request of {w.input_len + w.output_len} tokens needs "
                           f"{kv:.1f} GB of KV cache, more than the {free:.1f} GB {hw.name} has after the "
                           f"model's weights; use a shorter workload or a larger node")
    return notes
