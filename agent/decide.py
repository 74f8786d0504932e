"""The keep/revert rule, pure: measurements in, a verdict with its numbers and reason out.

A measurement is plain JSON (what the trial node records):
    {"knee_tok_s": float|None, "knee_rps": float|None, "single_stream_tok_s": float|None,
     "gpus": int, "usd_per_gpu_h": float, "tdp_w": float, "evals": {task: [0|1, ...]} | None}

Decisions: keep | revert | repeat (gap within noise: measure both sides again, interleaved) |
evaluate (performance passes; run the eval gate before deciding). Each verdict carries a reason
code (agent.records.Code) and its numbers; the prose reason is rendered from them for people.
A throughput objective that holds within noise while single stream rises clearly is kept as
"pareto" (codes pareto / pareto_evals_pass; pareto_repeat while a small drop is measured again),
through the same single-stream guard and eval gate. The guard reverts a throughput gain whose
single stream fell beyond gate.tolerance, once the fall is beyond the single stream's own noise
(single_stream_repeat while it is not yet).
"""
from __future__ import annotations

import math
from statistics import median

from agent.config import Gate
from agent.records import Code, Decision, Verdict

KEEP, REVERT, REPEAT, EVALUATE = "keep", "revert", "repeat", "evaluate"
OBJECTIVE_LABEL = {"knee": "knee tok/s/node", "single_stream": "single-stream tok/s",
                   "per_dollar": "tokens per $", "per_watt": "tok/s per W"}


def objective_value(m: dict, objective: str) -> float:
    """The number the run maximizes; 0 when nothing met the SLO (a real, comparable zero)."""
    knee = m.get("knee_tok_s") or 0.0
    if objective == "knee":
        return float(knee)
    if objective == "single_stream":
        return float(m.get("single_stream_tok_s") or 0.0)
    gpus = max(int(m.get("gpus") or 1), 1)
    if objective == "per_dollar":
        price = float(m.get("usd_per_gpu_h") or 0.0)
        return float(knee) * 3600.0 / (gpus * price) if price > 0 else 0.0
    if objective == "per_watt":
        tdp = float(m.get("tdp_w") or 0.0)
        return float(knee) / (gpus * tdp) if tdp > 0 else 0.0
    raise ValueError(f"unknown objective {objective!r}")


def spread(xs: list[float]) -> float:
    """Relative range of repeats: (max - min) / median; 0 for fewer than two."""
    if len(xs) < 2:
        return 0.0
    mid = median(xs)
    return (max(xs) - min(xs)) / mid if mid > 0 else 0.0


def paired_gap(inc: list[int | float], cand: list[int | float]) -> tuple[float, float]:
    """Mean of candidate - incumbent over the same items, and its standard error."""
    if len(inc) != len(cand) or not inc:
        raise ValueError(f"paired eval needs the same items on both sides ({len(inc)} vs {len(cand)})")
    d = [float(c) - float(i) for i, c in zip(inc, cand)]
    n = len(d)
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n)


def eval_gate(inc: dict[str, list], cand: dict[str, list], gate: Gate) -> tuple[bool, dict, list[str]]:
    """Non-inferiority per task: regressed when the paired gap falls below -margin, where
    margin = max(margin_points, margin_se x SE of the gap). Tasks missing on the candidate fail."""
    ok, numbers, notes = True, {}, []
    for task in sorted(inc):
        if task not in cand:
            ok = False
            notes.append(f"{task}: not evaluated on the candidate")
            continue
        gap, se = paired_gap(inc[task], cand[task])
        margin = max(gate.margin_points / 100.0, gate.margin_se * se)
        acc_i = sum(inc[task]) / len(inc[task])
        acc_c = sum(cand[task]) / len(cand[task])
        passed = gap >= -margin
        numbers[task] = {"incumbent": acc_i, "candidate": acc_c, "gap": gap, "se": se,
                         "margin": margin, "n": len(inc[task]), "non_inferior": passed}
        word = "non-inferior" if passed else "REGRESSED"
        notes.append(f"{task} {acc_i:.3f}->{acc_c:.3f} ({gap * 100:+.1f} pts, SE {se * 100:.1f}, "
                     f"margin {margin * 100:.1f}) {word}")
        ok = ok and passed
    return ok, numbers, notes


def _first_evals(ms: list[dict]) -> dict | None:
    return next((m["evals"] for m in ms if m.get("evals")), None)


def decide(incumbent: list[dict], candidate: list[dict], objective: str, gate: Gate) -> Verdict:
    """Verdict for a candidate against the incumbent, both given as their repeats so far."""
    if not candidate:
        raise ValueError("decide needs at least one candidate measurement")
    label = OBJECTIVE_LABEL[objective]
    cc = [objective_value(m, objective) for m in candidate]
    if not incumbent:  # the baseline: keep whatever measured, once its evals exist
        nums = {"objective": objective, "candidate": cc}
        if max(cc) <= 0:
            return _v(REVERT, "baseline_no_slo", f"baseline measured no {label} (nothing met the SLO)", nums)
        if _first_evals(candidate) is None:
            return _v(EVALUATE, "baseline_needs_evals", "baseline needs its evals", nums)
        return _v(KEEP, "baseline", f"baseline: {label} {median(cc):.1f}", nums)
    ci = [objective_value(m, objective) for m in incumbent]
    mi, mc = median(ci), median(cc)
    noise = max(gate.noise_floor, spread(ci), spread(cc))
    gain = (mc - mi) / mi if mi > 0 else (math.inf if mc > 0 else 0.0)
    nums = {"objective": objective, "incumbent": ci, "candidate": cc, "incumbent_median": mi,
            "candidate_median": mc, "gain": gain if math.isfinite(gain) else None, "noise": noise}
    what = f"{label} {mi:.1f} -> {mc:.1f} ({_pct(gain)}, noise band {noise * 100:.1f}%)"
    n = min(len(ci), len(cc))
    state, ss = _pareto(incumbent, candidate, objective, gain, noise, gate)
    pareto = state == "held"
    if pareto:  # the objective held within noise and latency-bound speed clearly rose
        nums.update(rule="pareto", **{k: v for k, v in ss.items() if k != "text"})
        what = f"pareto: {what}; {ss['text']}"
    elif state == "unclear" and n < gate.max_repeats:  # a drop not clearly beyond noise: measure again
        return _v(REPEAT, "pareto_repeat", f"knee drop not clearly beyond noise while {ss['text']}, "
                                           f"repeating both sides: {what}", nums)
    elif gain <= 0:
        return _v(REVERT, "no_gain", f"no gain: {what}", nums)
    clear = gain > gate.clear_mult * noise
    separated = min(cc) > max(ci)
    if not pareto and not (gain > noise and separated and (clear or n >= 2)):
        if n < gate.max_repeats:
            return _v(REPEAT, "within_noise", f"gain within noise, repeating both sides: {what}", nums)
        return _v(REVERT, "not_beyond_noise", f"gain not beyond noise after {n} repeats each: {what}", nums)
    if objective != "single_stream":  # guard single-stream latency while chasing throughput
        si = [m["single_stream_tok_s"] for m in incumbent if m.get("single_stream_tok_s")]
        sc = [m["single_stream_tok_s"] for m in candidate if m.get("single_stream_tok_s")]
        if si and sc:
            drop = (median(sc) - median(si)) / median(si)
            nums["single_stream_change"] = drop
            if drop < -gate.tolerance:
                # The guard weighs the single stream's own noise as the objective's rule weighs the
                # objective's: a drop beyond tolerance by less than clear_mult noise bands is measured
                # again (a few requests over a second or two, as on the H200 ground, wander by 10-20%).
                band = max(gate.noise_floor, spread(si), spread(sc))
                nums["single_stream_noise"] = band
                fell = (f"single-stream tok/s fell {_pct(drop)} (tolerance {gate.tolerance * 100:.0f}%, "
                        f"noise band {band * 100:.1f}%)")
                if drop >= -(gate.tolerance + gate.clear_mult * band) and n < gate.max_repeats:
                    return _v(REPEAT, "single_stream_repeat", f"{fell}, not clearly beyond its noise, "
                                      f"repeating both sides: {what}", nums)
                return _v(REVERT, "single_stream_drop", f"{fell} although {what}", nums)
    ev_i, ev_c = _first_evals(incumbent), _first_evals(candidate)
    if ev_i:
        if ev_c is None:
            return _v(EVALUATE, "needs_evals", f"performance passes ({what}); eval gate next", nums)
        ok, enums, notes = eval_gate(ev_i, ev_c, gate)
        nums["evals"] = enums
        if not ok:
            bad = [n for task, n in zip(sorted(ev_i), notes)  # one note per task, in that order
                   if not enums.get(task, {}).get("non_inferior", False)]
            return _v(REVERT, "eval_regression", f"eval regression: {'; '.join(bad)}"
                              f" (although {what})", nums)
        return _v(KEEP, "pareto_evals_pass" if pareto else "gain_evals_pass", f"{what}; evals: {'; '.join(notes)}", nums)
    return _v(KEEP, "pareto" if pareto else "gain", what, nums)


def _pareto(incumbent: list[dict], candidate: list[dict], objective: str, gain: float, noise: float,
            gate: Gate) -> tuple[str | None, dict]:
    """The "pareto" keep: a throughput objective held within its noise band (a small drop
    included) while single-stream tok/s rose clearly beyond its own noise. An engineer keeps
    such a change (the story's MTP: the knee was set by prefill, single stream rose almost 3x);
    single stream is what the loop measures on every trial, on the latency-bound workload.
    ("held", numbers) | ("unclear", numbers): the drop is beyond the band but within clear_mult
    of it, so repeats decide | (None, {})."""
    if objective == "single_stream" or gain > noise or gain < -gate.clear_mult * noise:
        return None, {}
    si = [m["single_stream_tok_s"] for m in incumbent if m.get("single_stream_tok_s")]
    sc = [m["single_stream_tok_s"] for m in candidate if m.get("single_stream_tok_s")]
    if not (si and sc) or median(si) <= 0:
        return None, {}
    up = (median(sc) - median(si)) / median(si)
    band = max(gate.noise_floor, spread(si), spread(sc))
    if not (up > gate.clear_mult * band and min(sc) > max(si)):
        return None, {}
    text = (f"single-stream tok/s {median(si):.1f} -> {median(sc):.1f} ({_pct(up)}, "
            f"noise band {band * 100:.1f}%)")
    return ("held" if gain >= -noise else "unclear"), {"single_stream_change": up, "single_stream_noise": band,
                                                         "text": text}


def _pct(x: float) -> str:
    return "+inf%" if not math.isfinite(x) else f"{x * 100:+.1f}%"


def _v(decision: Decision, code: Code, reason: str, numbers: dict) -> Verdict:
    return Verdict(decision=decision, code=code, reason=reason, numbers=numbers)
