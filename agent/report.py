"""The run's outputs, rebuilt from the ledger alone: result.json, report.md + report.html (with
matplotlib plots), launch.sh, playbook.yaml and patches/*.diff. `agent report RUN` calls `write`."""
from __future__ import annotations

import base64
import json
import math
import shlex
from pathlib import Path


from agent.decide import OBJECTIVE_LABEL, objective_value
from agent.ledger import Ledger
from tools import frameworks
from tools.candidate import Candidate
from tools.protocols import INFO_KINDS
from tools.inert import inert, inert_line

def _ms(led: Ledger, tid: int) -> list[dict]:
    return [m["data"] for m in led.measurements(tid, "candidate")]


def _summary(led: Ledger, t: dict, objective: str) -> dict:
    ms = _ms(led, t["id"])
    c = t["candidate"]
    out = {"trial": t["id"], "framework": c["framework"], "weights": c["weights"], "parallel": c["parallel"],
           "flags": c["flags"], "env": c["env"], "patches": c["patches"], "moe_configs": c["moe_configs"]}
    if ms:
        best = max(ms, key=lambda m: objective_value(m, objective))
        ev = next((m["evals"] for m in ms if m.get("evals")), None) or {}
        out.update({"knee_rps": best.get("knee_rps"), "knee_tok_s": best.get("knee_tok_s"),
                    "single_stream_tok_s": best.get("single_stream_tok_s"),
                    "objective": objective_value(best, objective),
                    "evals": {k: _acc(v) for k, v in ev.items()}})
    return out


def _acc(xs: list) -> dict:
    n = len(xs)
    p = sum(xs) / n if n else 0.0
    return {"accuracy": p, "se": math.sqrt(p * (1 - p) / n) if n else None, "n": n}


def result(led: Ledger, run_dir: Path) -> dict:
    cfg = led.meta("config") or {}
    objective = cfg.get("objective", "knee")
    trials = led.trials()
    inc = led.incumbent()
    kept = [t for t in trials if t["verdict"] == "kept"]
    rows = []
    for t in trials:
        ms = _ms(led, t["id"])
        rows.append({"id": t["id"], "phase": t["phase"], "kind": t["kind"], "description": t["description"],
                     "candidate": t["candidate"], "outcome": t["outcome"], "verdict": t["verdict"],
                     "reason": t["reason"], "numbers": t["numbers"], "patch": t["patch_id"],
                     "diagnoses": [d["kind"] for d in t["diagnoses"]],
                     "objective": max((objective_value(m, objective) for m in ms), default=None),
                     "wall_s": t["wall_s"], "ground_s": t["ground_s"]})
    return {"model": cfg.get("target", {}).get("model"), "hw": cfg.get("target", {}).get("hw"),
            "backend": cfg.get("backend"), "objective": objective, "status": led.meta("status"),
            "stop_reason": led.meta("stop_reason"),
            "baseline": _summary(led, kept[0], objective) if kept else None,
            "best": _summary(led, led.trial(inc), objective) if inc else None,
            "patches": [{k: p[k] for k in ("id", "fix", "framework", "status", "decided_by", "reason", "files")}
                        for p in led.patches()],
            "llm": _llm_use(led), "trials": rows}


def _llm_use(led: Ledger) -> dict | None:
    """What the LLM planner spent (None: it was never called)."""
    from agent.planners.llm import usage
    u = usage(led.events())
    return u if u["decisions"] else None


def served_checkpoint(target: dict, weights: str, model: str) -> str:
    """What launch.sh serves: the checkpoint of the best's weights where the run had one per precision
    (--model-path PRECISION=DIR; a plain --model-path DIR beside them holds the other), else the
    run's --model-path, else the model's name."""
    return (target.get("checkpoints") or {}).get(weights) or target.get("model_path") or model


def launch_sh(best: dict, model: str, hw) -> str:
    c = Candidate.model_validate({k: best[k] for k in ("framework", "weights", "parallel", "flags", "env",
                                                        "patches", "moe_configs")})
    argv = frameworks.get(c.framework).argv(c, model=model, port=8000, host="0.0.0.0")
    # Comments carry model/planner text: inert_line, so a newline cannot end the comment and start a
    # command. A value that holds control or invisible characters is not written as shell at all
    # (quoted, it would still act on the terminal of whoever reads the file).
    lines = ["#!/bin/sh", f"# best configuration found by inferloop ({c.framework}, {inert_line(c.weights)} weights)",
             "set -e"]
    lines += [f"# apply patches/{inert_line(p)}.diff to the {c.framework} source tree first" for p in c.patches]
    lines += [f"# tuned MoE config: {inert_line(p)} (mount it at the same path)" for p in c.moe_configs]
    for k, v in sorted(c.env.items()):
        lines.append(f"export {k}={shlex.quote(v)}" if inert_line(v) == v else
                     f"# NOT WRITTEN: {k} holds control or invisible characters: {inert_line(v)}")
    bad = [a for a in argv if inert_line(a) != a]
    if bad:
        lines.append(f"# NOT WRITTEN: the command line holds control or invisible characters: {inert_line(bad[0])}")
        lines.append("exit 1")
    else:
        lines.append("exec " + " ".join(shlex.quote(a) for a in argv))
    return "\n".join(lines) + "\n"


def playbook(led: Ledger, objective: str) -> dict:
    steps, prev = [], None
    for t in led.trials(verdict="kept"):
        c = t["candidate"]
        change = {k: c[k] for k in ("framework", "weights", "parallel", "flags", "env", "patches", "moe_configs")
                  if prev is None or c[k] != prev[k]}
        steps.append({"phase": t["phase"], "kind": t["kind"], "description": t["description"], "change": change,
                      "patches": [{"id": p, "fix": led.patch(p)["fix"], "file": f"patches/{p}.diff"}
                                  for p in c["patches"] if prev is None or p not in prev["patches"]],
                      "evidence": {"trial": t["id"], "reason": t["reason"],
                                   "objective": objective, "numbers": t["numbers"]}})
        prev = c
    return {"version": 1, "objective": objective, "steps": steps}


def _plots(led: Ledger, res: dict, out: Path, roof=None) -> list[str]:
    from agent.plots import write_plots  # the drawing lives in agent/plots.py, its data in agent/plot_data.py
    cfg = led.meta("config") or {}
    return write_plots(led, res, out, slo_s=float((cfg.get("slo") or {}).get("ttft_p95_s", 5.0)),
                       objective_label=OBJECTIVE_LABEL[res["objective"]], roof=roof)


def roofline(led: Ledger, res: dict, hw):
    """The best configuration's share of the roofline, on real hardware only: on the sim it would
    only restate the performance model's own assumptions."""
    cfg = led.meta("config") or {}
    if hw is None or cfg.get("backend", "sim") == "sim" or not res.get("best"):
        return None
    from agent.config import Target, resolve_target
    from tools.roofline import share
    try:
        card, _ = resolve_target(Target.model_validate(cfg["target"]))
    except Exception as e:  # a report must not fail because a card cannot be read back
        led.event("report", f"no roofline: {e}")
        return None
    ms = _ms(led, res["best"]["trial"])
    if not ms:
        return None
    wl = (cfg.get("measure") or {}).get("workload") or {}
    return share(card, hw, res["best"], ms[0].get("sweep") or [], wl, ms[0].get("knee_rps"))


def write(run_dir: Path, hw=None) -> dict:
    run_dir = Path(run_dir)
    led = Ledger(run_dir)
    try:
        res = result(led, run_dir)
        roof = roofline(led, res, hw)
        res["roofline"] = roof.model_dump() if roof else None
        cfg = led.meta("config") or {}
        (run_dir / "result.json").write_text(json.dumps(res, indent=2))
        (run_dir / "patches").mkdir(exist_ok=True)
        for p in led.patches():
            (run_dir / "patches" / f"{p['id']}.diff").write_text(p["diff"])
        from agent.playbooks import schema as pbm  # the replayable playbook (issue 5): agent/playbooks/
        from agent.playbooks.record import carried_markdown, from_run
        try:
            (run_dir / "playbook.yaml").write_text(pbm.dumps(from_run(led, run_dir)))
            pb_note = ""
        except ValueError as e:  # BadInput too: a playbook that cannot be recorded must not cost the other outputs
            (run_dir / "playbook.yaml").unlink(missing_ok=True)
            pb_note = f"\n**playbook.yaml was not written**: {e}\n"
            led.event("playbook", f"not written: {e}")
        if res["best"]:
            model = served_checkpoint(cfg.get("target", {}), res["best"]["weights"], res["model"])
            (run_dir / "launch.sh").write_text(launch_sh(res["best"], model, hw))
        imgs = _plots(led, res, run_dir, roof) if res["best"] else []
        # a replay: step by step what carried over; all of it quotes ledger text, so inert
        md = inert(markdown(res, hw, imgs) + carried_markdown(led) + pb_note)
        (run_dir / "report.md").write_text(md)
        (run_dir / "report.html").write_text(html(md, run_dir, imgs))
        return res
    finally:
        led.close()


def _cost(s: dict, hw) -> str:
    if not s or not s.get("knee_tok_s") or hw is None:
        return "n/a"
    gpus = s["parallel"]["tp"] * s["parallel"]["dp"]
    per_usd = s["knee_tok_s"] * 3600 / (gpus * hw.usd_per_gpu_h) if hw.usd_per_gpu_h else 0
    per_w = s["knee_tok_s"] / (gpus * hw.tdp_w) if hw.tdp_w else 0
    return f"{per_usd:,.0f} tokens/$ · {per_w:.3f} tok/s/W"


def markdown(res: dict, hw, imgs: list[str]) -> str:
    b, s = res["baseline"], res["best"]
    L = [f"# inferloop: {res['model']} on {res['hw']} ({res['backend']})", "",
         f"Objective: {OBJECTIVE_LABEL[res['objective']]}. Stopped: {res['stop_reason']}.", ""]
    if s:
        L += ["| | framework | weights | knee RPS | knee tok/s | single-stream tok/s | cost |", "|" + "---|" * 7]
        for name, x in (("baseline", b), ("best", s)):
            L.append(f"| {name} | {x['framework']} | {x['weights']} | {x.get('knee_rps') or 0:.2f} | "
                     f"{x.get('knee_tok_s') or 0:.1f} | {x.get('single_stream_tok_s') or 0:.1f} | {_cost(x, hw)} |")
        L += ["", f"Best flags: `{json.dumps(s['flags'])}` env: `{json.dumps(s['env'])}` patches: {s['patches']}", ""]
        L += ["## Evals (accuracy ± SE)", "", "| task | baseline | best |", "|---|---|---|"]
        for task in sorted((s.get("evals") or {})):
            e0, e1 = (b.get("evals") or {}).get(task), s["evals"][task]
            f = lambda e: f"{e['accuracy']:.3f} ± {e['se']:.3f} (n={e['n']})" if e else "n/a"
            L.append(f"| {task} | {f(e0)} | {f(e1)} |")
        L.append("")
    for name, x in ((res.get("roofline") or {}).items()):
        if x:
            L.append(f"Roofline, {name}: {x['share']:.1%} ({x['detail']})  ")
    L += [f"![{i}]({i})" for i in imgs] + ["", "## Trials", "", "| # | phase | what | verdict | reason |",
                                            "|---|---|---|---|---|"]
    for r in res["trials"]:
        L.append(f"| {r['id']} | {r['phase']} | {_cell(r['description'])} | {r['verdict']} | "
                 f"{_cell(r['reason'])} |")
    if res.get("llm"):
        u = res["llm"]
        cost = f"${u['cost_usd']:.4f}" if u["cost_usd"] is not None else "cost unknown (set INFERLOOP_LLM_PRICE)"
        L += ["", f"LLM planner: {u['decisions']} decisions, {u['prompt_tokens']:,} prompt + "
                  f"{u['completion_tokens']:,} completion tokens, {cost}, {u['fallbacks']} fell back to the built-in planner."]
    L += ["", "## Patches", ""] + [f"- {_cell(p['id'])} ({_cell(p['fix'])}): {p['status']} by {_cell(p['decided_by'])}"
                                   + (f" — {_cell(p['reason'])}" if p["reason"] else "") for p in res["patches"]]
    return inert("\n".join(L) + "\n")  # everything else quoted here (flags, env) is data too


def _cell(text) -> str:
    """One table cell / list item: one line, inert, no column breaks."""
    return inert_line(text or "").replace("|", "/")


def html(md: str, run_dir: Path, imgs: list[str]) -> str:
    import html as h
    body = h.escape(md)
    for i in imgs:
        data = base64.b64encode((run_dir / i).read_bytes()).decode()
        body = body.replace(h.escape(f"![{i}]({i})"), f'<img src="data:image/png;base64,{data}" alt="{i}">')
    return f"<!doctype html><meta charset=utf-8><title>inferloop report</title><pre>{body}</pre>\n"


def record_node(rt, state: dict) -> dict:
    """The end of a run. A run that measured no configuration has failed, whatever stopped it:
    its stop reason says why, with the baseline's diagnosis and log lines (never `best: None`)."""
    reason, inc = state.get("stop_reason"), rt.ledger.incumbent()
    status = "done"
    if state.get("failed") == "workload":
        status = "refused"
    elif inc is None:
        status = "failed"
        reason = f"{reason}; no configuration could be measured. {baseline_failure(rt.ledger)}"
    rt.ledger.set_meta("stop_reason", reason)
    rt.ledger.set_status(status)
    write(rt.run_dir, rt.hw)
    rt.progress(f"{status}: {reason}; report in {rt.run_dir / 'report.md'}")
    return {"route": "end"}


def baseline_failure(led: Ledger) -> str:
    """The first trial's verdict, its root-cause diagnosis and the last lines of its log."""
    t = next(iter(led.trials()), None)
    if t is None:
        return "No trial ran."
    # the root cause of a failed launch; else what the log warned of (a server that started but
    # measured nothing: e.g. vLLM-CPU on its slow GEMM fallback)
    d = next((d for d in t["diagnoses"] if d.get("fatal", True)), None) \
        or next((d for d in t["diagnoses"] if d["kind"] not in INFO_KINDS), None)
    tail = "\n".join((t["log_excerpt"] or "").splitlines()[-8:])
    return (f"Baseline trial {t['id']}: {t['reason'] or t['verdict']}"
            + (f"\ndiagnosis {d['kind']}: {d['message']}" if d else "")
            + (f"\nlog:\n{tail}" if tail else ""))


def run_summary(rt, status: str) -> dict:
    """What `agent optimize --json` prints for a run in `status` (rt: agent.nodes.Runtime)."""
    try:  # result.json is an output, rebuilt from the ledger when it is missing or damaged
        res = json.loads((rt.run_dir / "result.json").read_text())
    except (OSError, ValueError):
        res = result(rt.ledger, rt.run_dir)
    skipped = [{"patch": p["id"], "fix": p["fix"], "reason": p["reason"]} for p in rt.ledger.patches()
               if p["status"] in ("skipped", "rejected")]
    return {"status": status, "run_dir": str(rt.run_dir), "best": res.get("best"),
            "trials": len(res.get("trials", [])), "stop_reason": res.get("stop_reason"),
            "patches_not_applied": skipped}
