"""How far to trust a simulated prediction: the calibration's residual spread in the nearest
calibrated group (framework x hardware), with the number of public points behind it. The spread
is the larger of the group's in the fit and where its points were held out of the fit (their
source, or their model, left out: calibrate's cross-validation), since a configuration a user asks
about is one the fit did not see.

The spread is the root-mean-square of log(predicted / measured) over the group's points, so
`x exp(+-sd)` is a one-sigma band; a group reached only by extrapolation (same framework on other
hardware of the vendor, or another framework on this hardware) gets a wider band and says so,
and a configuration near no calibrated group says that instead of a number.
"""
from __future__ import annotations

import math
from collections import Counter

from sandboxes.sim import table
from tools.hardware import get_hardware, native_bf16

EXTRAPOLATION_WIDENING = 1.5  # a neighbouring group's spread, widened: its errors are not this group's
MIN_POINTS = 3  # fewer points say little about a spread: the pooled spread of all points stands in


def _vendor(hw: str) -> str:
    try:
        return get_hardware(hw).vendor
    except Exception:  # noqa: BLE001 - an unknown name is simply far from every group
        return "?"


def nearest_group(framework: str, hw: str, groups: dict) -> tuple[str | None, str]:
    """(group key, how it was reached): exact, same framework on the vendor's other hardware,
    another framework on this hardware, or none."""
    groups = {k: v for k, v in groups.items() if k != "all"}
    key = f"{framework}/{hw}"
    if key in groups:
        return key, "calibrated"
    vendor = _vendor(hw)
    best = lambda ks: max(ks, key=lambda k: groups[k]["n"]) if ks else None  # noqa: E731
    same_fw = [k for k in groups if k.startswith(f"{framework}/") and _vendor(k.split("/", 1)[1]) == vendor]
    if (k := best(same_fw)) is not None:
        return k, f"extrapolated from {k} (same framework, other {vendor} hardware)"
    same_hw = [k for k in groups if k.endswith(f"/{hw}")]
    if (k := best(same_hw)) is not None:
        return k, f"extrapolated from {k} (other framework, same hardware)"
    return None, "far from any calibrated group"


def uncertainty(framework: str, hw: str, tbl: dict | None = None) -> dict:
    """The band to print beside a prediction: {group, basis, n, tok_s_sd, tok_s_factor, ...}."""
    tbl = tbl or table.load()
    if _vendor(hw) == "cpu":
        fit = tbl.get("cpu_fit") or {}
        return _cpu(framework, fit.get("judged"), fit.get("checks", []), native_bf16())
    groups = tbl.get("groups", {})
    key, basis = nearest_group(framework, hw, groups)
    if key is None:
        return {"group": None, "basis": basis, "n": 0,
                "message": f"{framework} on {hw}: {basis}; no public measurement backs this prediction"}
    g = groups[key]
    widen = 1.0 if basis == "calibrated" else EXTRAPOLATION_WIDENING
    out = {"group": key, "basis": basis, "n": g["n"]}
    held = tbl.get("groups_held_out", {})
    for metric, name, label in (("output_tok_s", "tok_s", "tok/s"), ("tpot_s", "tpot", "TPOT"), ("ttft_s", "ttft", "TTFT")):
        if metric in g:
            few = g[metric]["n"] < MIN_POINTS
            if few:
                out["basis"] = basis = f"{basis}; only {g[metric]['n']} {label} point(s): the spread of all points is used"
            fit, held_out = _spread(groups, key, metric, few), _spread(held, key, metric, few)
            sd = max(fit, held_out or 0.0) * widen
            out[f"{name}_sd"] = round(sd, 4)
            out[f"{name}_factor"] = round(math.exp(sd), 3)  # one-sigma band: x/ this factor
            out[f"{name}_n"] = g[metric]["n"]
            out[f"{name}_sd_fit"] = fit
            out[f"{name}_sd_held_out"] = held_out
    held_tok, fit_tok = out.get("tok_s_sd_held_out"), out.get("tok_s_sd_fit")
    wider = held_tok is not None and fit_tok is not None and held_tok > fit_tok
    out["message"] = (f"+-{(out.get('tok_s_factor', 1) - 1) * 100:.0f}% tok/s (one sigma, {basis}: "
                      f"{g['n']} public points in {key}"
                      + (f", as they came out predicted with their source or model held out of the fit; "
                         f"+-{math.expm1(fit_tok) * 100:.0f}% in it" if wider else "") + ")")
    return out


def _spread(groups: dict, key: str, metric: str, few: bool) -> float | None:
    """A group's spread of `metric` (None where not recorded); where the group has few points the
    spread of all points stands in if larger."""
    sds = [x[metric]["sd"] for x in (groups.get(key), groups.get("all") if few else None) if x and metric in x]
    return max(sds) if sds else None


def _cpu(framework: str, judged: dict | None, checks: list[dict] = (), native: bool = True) -> dict:
    """A CPU has no public points: its row is fitted to the live testbed (tests/perf/cpu_profile.py),
    and the band is the larger of the spread on the load levels the fit did not see and the spread
    on machines it was not fitted to (`checks`: each machine of a several-machine fit judged by a fit
    to the others, or one checked later), since a user's CPU is rarely one it was fitted on. Every
    fitted machine had a bf16 instruction; on one without (`native` False) the band says so."""
    if not judged:
        return {"group": None, "basis": "far from any calibrated group", "n": 0,
                "message": f"{framework} on cpu: no live testbed fit recorded"}
    exact = framework == judged["framework"]
    basis = ("calibrated on the live testbed" if exact else
             f"extrapolated from {judged['framework']} on the live testbed (other framework)")
    n = len(judged["levels"])
    out: dict = {"group": f"{judged['framework']}/cpu", "basis": basis, "n": n}
    for name in ("tok_s", "tpot", "ttft"):
        sds = [x[f"{name}_sd"] for x in (judged, *checks) if x.get(f"{name}_sd") is not None]
        if sds:
            sd = max(sds) * (1.0 if exact else EXTRAPOLATION_WIDENING)
            out.update({f"{name}_sd": round(sd, 4), f"{name}_factor": round(math.exp(sd), 3), f"{name}_n": n})
    held = Counter(f"{c['machine']} {c['serving_mode']}" for c in checks if c.get("held_out"))
    if held:  # a fit to several machines, each judged by a fit to the others (cpu_profile.py --fit --from ...)
        where = f"{sum(held.values())} machines, each also judged by a fit to the others: " + ", ".join(
            m + (f" x{k}" if k > 1 else "") for m, k in held.items())
    else:
        where = f"{judged['machine']}, {judged['serving_mode']}"
    where += "".join(f", checked on {c['machine']}, {c['serving_mode']}" for c in checks if not c.get("held_out"))
    out["message"] = (f"+-{(out.get('tok_s_factor', 1) - 1) * 100:.0f}% tok/s (one sigma, {basis}: {n} load levels of "
                      f"{judged['model']} on {where}; other models are extrapolated)")
    if not native:  # tests/perf/results/cpu_profile_icelake.json: eager bf16, TTFT 2.18 s measured, 0.40 predicted
        out["basis"] = f"{basis}; far from any calibrated group (no bf16 instruction)"
        out["message"] += ("; this CPU has no bf16 instruction (AVX512-BF16 or AMX) and every fitted machine had one: "
                           "on such a CPU bf16 took 5.5x the predicted time to the first token (--dtype float32 is "
                           "faster there)")
    return out


def band(value: float | None, u: dict) -> tuple[float, float] | None:
    f = u.get("tok_s_factor")
    return None if value is None or f is None else (value / f, value * f)


def for_estimate(framework: str, hw: str, out: dict, tbl: dict | None = None) -> dict:
    """The band `agent estimate` prints and puts in --json, applied to its knee and single stream."""
    u = uncertainty(framework, hw, tbl)
    for name, v in (("knee_tok_s", (out.get("knee") or {}).get("tok_s")), ("single_stream_tok_s", out.get("single_stream_tok_s"))):
        if (b := band(v, u)) is not None:
            u[f"{name}_band"] = [round(b[0], 1), round(b[1], 1)]
    return u
