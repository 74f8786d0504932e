"""Recording a playbook from a finished run's ledger: the baseline, then one step per kept trial,
each written against the model card (templates), with the conditions it needs and its evidence.

Run-specific things never enter a playbook: tuned-config paths (the MoE step re-tunes), patch ids,
secrets in env. Patches become fix-catalogue references so a replay re-renders them.
"""
from __future__ import annotations

import re
from pathlib import Path
from statistics import median

from agent.playbooks.outcomes import outcomes
from agent.playbooks.schema import DIAGNOSIS_KINDS, SECRET, SECRET_VALUE, Step, compact, parse

MTP_ALGOS = ("NEXTN", "EAGLE", "EAGLE3", "MTP")
ROCM_WORDS = re.compile(r"aiter|rocm|hip|hipblas|ck_", re.I)
STRIP = re.compile(r"^\[playbook s\d+\]\s*")


def _objective(led, tid: int, objective: str) -> float | None:
    from agent.decide import objective_value
    ms = [m["data"] for m in led.measurements(tid, "candidate")]
    return max((objective_value(m, objective) for m in ms), default=None)


def _parallel_t(par: dict, hw) -> dict:
    n = int(getattr(hw, "gpus_per_node", 0) or 0)
    tp, dp = int(par["tp"]), int(par.get("dp", 1))
    if n and tp * dp == n:  # filled the node: keep the data-parallel count, fill the next node too
        tp_t = "{gpus_per_node}" if dp == 1 else f"{{gpus_per_node//{dp}}}"
        return {"tp": tp_t, "dp": dp, "ep": bool(par.get("ep"))}
    return {"tp": tp, "dp": dp, "ep": bool(par.get("ep"))}


def _is_mtp_spec(flags: dict) -> bool:
    if str(flags.get("--speculative-algorithm") or "").upper() in MTP_ALGOS:
        return True
    cfg = flags.get("--speculative-config")
    if isinstance(cfg, dict) and str(cfg.get("method", "")).lower() in ("mtp", "deepseek_mtp", "eagle"):
        return True
    return str(flags.get("--method") or "").lower() == "mtp"


def _patch_t(row: dict, card) -> dict:
    out = _patch_body(row, card)
    kind = (row.get("diagnosis") or {}).get("kind")
    if kind in DIAGNOSIS_KINDS:
        out.setdefault("when", {})["after_diagnosis"] = kind
    return out


def _patch_body(row: dict, card) -> dict:
    fix, diff = row["fix"], row["diff"]
    det = (row.get("diagnosis") or {}).get("details") or {}
    layer = int(getattr(card, "num_hidden_layers", -1) or -1)
    if fix == "mtp_prefix_alias":
        m = re.search(r'^\+\s*"model\.layers\.(\d+)\.eh_proj"', diff, re.M)
        n = int(m.group(1)) if m else layer
        return {"framework": row["framework"], "fix": fix, "files": row["files"], "when": {"has_mtp": True},
                "params": {"layer": "{num_hidden_layers}" if n == layer else n}}
    if fix == "rocm_include_guard":
        m = re.search(r"^-\s*#\s*include\s*[<\"]([^>\"]+)[>\"]", diff, re.M)
        header = Path(det.get("missing_header") or (m.group(1) if m else "cuda_runtime.h")).name
        file = det.get("file") or (row["files"][0] if row["files"] else "")
        return {"framework": row["framework"], "fix": fix, "files": row["files"], "when": {"vendor": ["amd"]},
                "params": {"file": file, "header": header}}
    return {"framework": row["framework"], "fix": "literal", "files": row["files"], "diff": diff}


def _when(step: dict, card, hw, diag_kind: str | None, all_flags: dict) -> dict:
    from tools.models import PRECISIONS
    w: dict = {}
    flags = step.get("flags") or {}
    fixes = {p["fix"] for p in step.get("patches", [])}
    spec_keys = any("specul" in k or k in ("--method",) for k in flags)
    if (spec_keys and _is_mtp_spec(all_flags)) or fixes == {"mtp_prefix_alias"}:
        w["has_mtp"] = True
    words = " ".join([*flags, *map(str, flags.values()), *(step.get("env") or {})])
    if fixes == {"rocm_include_guard"} or ROCM_WORDS.search(words):
        w["vendor"] = ["amd"]
    if step["kind"] == "weights" and PRECISIONS[step["weights"]].compute in ("fp8", "fp4"):
        w["hw_compute"] = PRECISIONS[step["weights"]].compute
    if step["kind"] == "moe_tune" or (step.get("parallel") or {}).get("ep"):
        w["is_moe"] = True
    if step["kind"] == "moe_tune":
        w["after_diagnosis"] = "moe_default_config"
    elif step["kind"] == "patch" and diag_kind in DIAGNOSIS_KINDS:
        w["after_diagnosis"] = diag_kind
    return w


def _moe_t(card, c: dict) -> dict:
    from tools import moe
    from tools.candidate import Candidate
    try:
        s = moe.shard_shape(card, Candidate.model_validate(c))
    except Exception:  # noqa: BLE001  a non-MoE card: nothing to describe
        return {"shape": {}}
    tp = c["parallel"]["tp"]
    known = {"E": [("n_routed_experts", card.n_routed_experts)], "K": [("hidden_size", card.hidden_size)],
             "topk": [("num_experts_per_tok", card.num_experts_per_tok)],
             "N": [("moe_intermediate_size", card.moe_intermediate_size)]}
    out = {}
    for k, v in s.model_dump().items():
        t = v
        for name, x in known.get(k, []):
            if x == v:
                t = f"{{{name}}}"
            elif tp > 1 and x // tp == v:
                t = f"{{{name}//{tp}}}"
        out[k] = t
    return {"shape": out}


def _evidence(led, t: dict, objective: str, before: float | None) -> dict:
    nums = t["numbers"] or {}
    after = nums.get("candidate_median")
    if after is None:
        after = median(nums["candidate"]) if nums.get("candidate") else _objective(led, t["id"], objective)
    evals = {k: {x: v.get(x) for x in ("incumbent", "candidate", "gap", "se", "margin", "non_inferior")}
             for k, v in (nums.get("evals") or {}).items() if isinstance(v, dict)}
    return {"trial": t["id"], "verdict": t["verdict"] or "", "reason": t["reason"] or "", "objective": objective,
            "before": nums.get("incumbent_median", before), "after": after, "evals": evals,
            "numbers": {k: nums[k] for k in ("gain", "noise") if k in nums}}


def _kind(t: dict, ch: dict) -> str:
    if ch.get("patches"):
        return "patch"
    if t["kind"] == "moe_tune":
        return "moe_tune"
    for k in ("framework", "weights", "parallel", "flags", "env"):
        if ch.get(k):
            return "framework" if k == "framework" and not ch.get("weights") else \
                ("weights" if k == "framework" else k)
    return "flags" if t["phase"] in ("speculative", "flags") else {"framework": "framework", "precision": "weights",
                                                                   "parallel": "parallel", "moe": "moe_tune"}[t["phase"]]


CHANGE_KEYS = ("framework", "weights", "parallel", "flags", "env", "patches", "moe")


def _supersedes(new: dict, old: dict) -> bool:
    """The new step overrides everything the previous one set (e.g. TP8+EP, then TP4 x DP2): the
    recording showed the later setting wins, so a replay need not walk through the earlier one."""
    if new["kind"] != old["kind"] or new["phase"] != old["phase"] or new["kind"] in ("patch", "moe_tune"):
        return False
    keys = lambda st: {k for k in CHANGE_KEYS if st.get(k)}
    if keys(old) != keys(new) - {"env"} and keys(old) != keys(new):
        return False
    return set(old.get("flags") or {}) <= set(new.get("flags") or {}) and \
        set(old.get("env") or {}) <= set(new.get("env") or {})


def _merge(old: dict, new: dict) -> dict:
    ev = dict(new["evidence"])
    ev["before"] = old["evidence"].get("before")
    ev["supersedes"] = [*old["evidence"].get("supersedes", []), old["evidence"]["trial"]]
    return {**new, "id": old["id"], "evidence": ev}


def _unrecordable(step: dict, ch: dict) -> str | None:
    """Why a kept trial cannot become a step (no change left once run-specific values are
    dropped, or a change the schema refuses, e.g. a literal diff that leaves the tree)."""
    from pydantic import ValidationError
    if not ch and step["kind"] != "moe_tune":
        return "no change a replay can repeat (only run-specific values changed)"
    try:
        Step.model_validate(step)
    except ValidationError as e:
        return e.errors()[0]["msg"].removeprefix("Value error, ")
    return None


def from_run(led, run_dir: Path | None = None, *, card=None, hw=None) -> dict:
    """The run's playbook as plain data (validated against the schema before it is returned)."""
    from agent.config import Target, resolve_target
    from tools import frameworks, moe
    cfg = led.meta("config") or {}
    objective = cfg.get("objective", "knee")
    tgt = cfg.get("target") or {}
    if card is None or hw is None:
        try:
            card, hw = resolve_target(Target.model_validate(tgt))
        except Exception:  # noqa: BLE001  no card: parameters stay literal, the run's outputs still get written
            card, hw = None, None
    trials = led.trials()
    steps: list[dict] = []
    notes: list[str] = []
    if trials:
        b = trials[0]
        c = b["candidate"]
        steps.append({"id": "s01", "kind": "framework", "phase": "framework", "baseline": True,
                      "description": STRIP.sub("", b["description"]), "framework": c["framework"],
                      "weights": c["weights"], "parallel": _parallel_t(c["parallel"], hw),
                      "flags": dict(c["flags"]), "env": {}, "when": {},
                      "evidence": _evidence(led, b, objective, None)})
        prev, prev_obj = c, _objective(led, b["id"], objective)
    for t in trials[1:]:
        if t["verdict"] != "kept":
            continue
        c = t["candidate"]
        fw = frameworks.get(c["framework"])
        ch: dict = {}
        if c["framework"] != prev["framework"]:
            ch["framework"] = c["framework"]
        if c["weights"] != prev["weights"]:
            ch["weights"] = c["weights"]
        if c["parallel"] != prev["parallel"]:
            ch["parallel"] = _parallel_t(c["parallel"], hw)
        flags = {k: v for k, v in c["flags"].items() if prev["flags"].get(k) != v}
        flags.update({k: None for k in prev["flags"] if k not in c["flags"]})
        if flags:
            ch["flags"] = flags
        run = str(Path(run_dir).resolve()) if run_dir else "\0"
        env = {k: v for k, v in c["env"].items() if prev["env"].get(k) != v and k not in moe.env_vars(fw)
               and run not in v and "moe_configs" not in v}
        for k in [k for k, v in env.items() if SECRET.search(k) or SECRET_VALUE.match(v)]:
            notes.append(f"trial {t['id']}: env {k} left out (looks like a secret; secrets never enter a playbook)")
            env.pop(k)
        if env:
            ch["env"] = env
        new = [p for p in c["patches"] if p not in prev["patches"]]
        rows = [led.patch(p) for p in new]
        if rows:
            ch["patches"] = [_patch_t(r, card) for r in rows]
        kind = _kind(t, ch)
        step = {"id": f"s{len(steps) + 1:02d}", "kind": kind, "phase": t["phase"],
                "description": STRIP.sub("", t["description"]), **ch}
        if kind == "moe_tune":
            step["moe"] = _moe_t(card, c)
        diag = (rows[0].get("diagnosis") or {}).get("kind") if rows else None
        step["when"] = _when(step, card, hw, diag, c["flags"])
        step["evidence"] = _evidence(led, t, objective, prev_obj)
        why = _unrecordable(step, ch)
        if why:  # kept, but nothing a replay could repeat: say so rather than break the run's outputs
            notes.append(f"trial {t['id']} ({step['description']}) not recorded: {why}")
        else:
            if len(steps) > 1 and _supersedes(step, steps[-1]):
                step = _merge(steps.pop(), step)
            steps.append(step)
        prev, prev_obj = c, _objective(led, t["id"], objective)
    inc = led.incumbent()
    data = {"version": 1, "name": f"{tgt.get('model')}-{tgt.get('hw')}", "objective": objective,
            "source": {"model": tgt.get("model"), "hw": tgt.get("hw"),
                       "run": Path(run_dir).name if run_dir else None, "trials": led.launched_count(),
                       "best_objective": _objective(led, inc, objective) if inc else None},
            "steps": steps, "notes": notes}
    rep = led.meta("replay")
    if rep:
        src = parse(rep["playbook"], "replayed playbook")
        data["replayed_from"] = rep.get("name") or src.name
        data["carried"] = outcomes(src, led.trials(), card, hw, rep.get("frameworks"), led.events())
    return compact(parse(data, "recorded playbook"))


def carried_markdown(led) -> str:
    """The report's account of a replay, step by step ("" for a run that replayed nothing)."""
    rep = led.meta("replay")
    if not rep:
        return ""
    from agent.config import Target, resolve_target
    src = parse(rep["playbook"], "replayed playbook")
    card, hw = resolve_target(Target.model_validate((led.meta("config") or {}).get("target")))
    kinds = {s.id: (s.kind, s.description) for s in src.steps}
    rows = outcomes(src, led.trials(), card, hw, rep.get("frameworks"), led.events())
    n = {k: sum(r["outcome"] == k for r in rows) for k in ("carried", "reverted", "failed", "skipped", "pending")}
    L = ["", f"## Playbook replay: {rep.get('name') or 'playbook'} (recorded on {src.source.model} / {src.source.hw}, "
         f"{src.source.trials} trials)", "",
         f"{n['carried']} carried over, {n['reverted']} reverted, {n['failed']} failed (handed to the built-in "
         f"planner), {n['skipped']} skipped, {n['pending']} not reached; {led.launched_count()} trials launched.", "",
         "| step | kind | what | outcome | trials | reason |", "|---|---|---|---|---|---|"]
    for r in rows:
        k, d = kinds[r["step"]]
        L.append(f"| {r['step']} | {k} | {d.replace('|', '/')} | {r['outcome']} | "
                 f"{', '.join(map(str, r['trials']))} | {r['reason'].replace('|', '/')} |")
    return "\n".join(L) + "\n"
