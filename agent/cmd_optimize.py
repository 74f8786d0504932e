"""Commands of the `agent` CLI: optimize, resume, approvals, approve, reject, runs, report.

The thin shell around the graph: it validates input (BadInput -> exit 2), builds the runtime,
drives the graph and, when the review node pauses, asks the human on a terminal or says how to
continue. Approvals come only from a human here (or the run's --approve policy), never from
log or model text.
"""
from __future__ import annotations

import getpass
import json
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import typer
from langgraph.types import Command
from pydantic import ValidationError

from agent import graph as graphmod
from agent import nodes, report
from agent.config import (RunConfig, Target, budget_from, parse_budget, parse_time_budget, resolve_target)
from agent.errors import BadInput
from agent.ledger import LEDGER, Ledger

RUNS_ROOT = Path("logs")
SandboxFactory = Callable[[RunConfig, object, object], object]


# ---- building a run ------------------------------------------------------------------------
def default_sandbox(cfg: RunConfig, card, hw):
    """The run's ground, opened by name through the registry (the agent never imports a ground)."""
    from sandboxes import registry
    return registry.open_sandbox(cfg.backend, cfg, card, hw)


def load_overrides(path: str | None) -> dict:
    """`--config FILE`: YAML/JSON of RunConfig fields (measure, slo, gate, base_flags, ...)."""
    if path is None:
        return {}
    import yaml
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"--config {path!r}: no such file")
    try:
        d = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise BadInput(f"--config {path!r} is not YAML/JSON: {str(e).splitlines()[0]}") from None
    allowed = sorted(set(RunConfig.model_fields) - {"target", "backend", "objective", "approve", "seed"})
    bad = sorted(set(d) - set(allowed)) if isinstance(d, dict) else None
    if bad is None or bad:
        raise BadInput(f"--config {path!r}: unknown keys {bad or '(not a mapping)'}; allowed: {', '.join(allowed)}")
    return d


def default_suite(cfg: RunConfig, card, hw, sandbox):
    """The eval tasks for this run (tools.evals), or the sandbox's own when it provides them."""
    if hasattr(sandbox, "eval_suite") and cfg.measure.harness != "lm-eval":
        return sandbox.eval_suite()
    from tools.evals import suite_for  # noqa: the evals package names its default tasks
    suite = suite_for(cfg, card, hw)
    want = cfg.measure.eval_tasks
    if want is not None:
        have = [t.name for t in suite.tasks]
        bad = [w for w in want if w not in have]
        if bad or not want:
            raise BadInput(f"measure.eval_tasks {want!r}: allowed here: {', '.join(have)}")
        suite.tasks = [t for t in suite.tasks if t.name in want]
    return suite


def _progress(json_mode: bool, bar=None) -> Callable[[str], None]:
    """The run's messages; with a trials bar (agent/progress.py), each new trial advances it."""
    def p(msg: str) -> None:
        if bar is None:
            typer.echo(msg, err=True)
            return
        bar.note(msg)
        if _LAUNCH_LINE.match(msg):  # nodes._first's line: a candidate's first launch, what the budget counts
            bar.advance()
    return p


_LAUNCH_LINE = __import__("re").compile(r"^  launching \S+ \S+ TP\d+xDP\d+ \.\.\.$")


def open_runtime(run_dir: Path, cfg: RunConfig, *, sandbox_factory: SandboxFactory | None = None,
                 suite_factory=None, planner=None, progress=None) -> nodes.Runtime:
    card, hw = resolve_target(cfg.target)
    sandbox = (sandbox_factory or default_sandbox)(cfg, card, hw)
    suite = (suite_factory or default_suite)(cfg, card, hw, sandbox)
    ledger = Ledger(run_dir, create=True)
    if planner is None and ledger.meta("replay"):  # a resumed replay keeps replaying its playbook (issue 5)
        from agent.cmd_playbook import planner_for_run
        planner = planner_for_run(run_dir)
    if planner is None:  # --planner builtin|llm|hybrid; LLM token use goes to the ledger's events
        from agent.planners.hybrid import make_planner
        planner = make_planner(cfg.planner, llm_model=cfg.llm_model, run_dir=run_dir, ledger=ledger,
                               progress=progress)
    return nodes.Runtime(config=cfg, run_dir=run_dir, ledger=ledger, sandbox=sandbox,
                         planner=planner, suite=suite, card=card, hw=hw, progress=progress or (lambda s: None))


def load_config(run_dir: Path) -> RunConfig:
    if not (Path(run_dir) / LEDGER).is_file():
        raise BadInput(f"{str(run_dir)!r} is not a run directory (no {LEDGER}); `agent runs` lists runs")
    led = Ledger(run_dir)
    try:
        return RunConfig.model_validate(led.meta("config"))
    finally:
        led.close()


def start(cfg: RunConfig, run_dir: Path, **kw) -> dict:
    """A new run: record the config, then drive the graph."""
    cfg.check()
    run_dir = Path(run_dir)
    if (run_dir / LEDGER).exists():
        raise BadInput(f"{str(run_dir)!r} already holds a run; use `agent resume {run_dir}`")
    run_dir.mkdir(parents=True, exist_ok=True)
    rt = open_runtime(run_dir, cfg, **_rt_kw(kw))
    rt.ledger.set_meta("config", cfg.model_dump(mode="json"))
    rt.ledger.set_meta("created", time.time())
    for n in cfg.notes:  # what check() chose for the user, e.g. a workload that fits the model
        rt.ledger.event("config", n)
        rt.progress(f"note: {n}")
    return drive(rt, {"incumbent": None}, **_drive_kw(kw))


def resume(run_dir: Path, *, approve: str | None = None, **kw) -> dict:
    cfg = load_config(run_dir)
    if approve is not None:
        cfg = cfg.model_copy(update={"approve": approve}).check()
    rt = open_runtime(Path(run_dir), cfg, **_rt_kw(kw))
    rt.ledger.set_meta("config", cfg.model_dump(mode="json"))
    if rt.ledger.meta("status") == "interrupted":
        rt.ledger.set_meta("status", "running")
    killed = nodes.reap_stale_servers(rt.run_dir)  # servers a killed agent left running
    if killed:
        rt.ledger.event("reap", f"stopped server process groups left by a killed run: {killed}")
        rt.progress(f"stopped {len(killed)} server(s) left running by the interrupted run")
    g = graphmod.build(rt)
    snap = g.get_state(graphmod.THREAD)
    if not snap.next and rt.ledger.meta("status") == "done":
        return _summary(rt, "done")
    inp = Command(resume=True) if any(t.interrupts for t in snap.tasks) else None
    return drive(rt, inp, graph=g, **_drive_kw(kw))


def _rt_kw(kw: dict) -> dict:
    return {k: v for k, v in kw.items() if k != "ask"}


def _drive_kw(kw: dict) -> dict:
    return {k: kw[k] for k in ("ask",) if k in kw}


def drive(rt: nodes.Runtime, inp, *, graph=None, ask: Callable[[dict], dict | None] | None = None) -> dict:
    """Run the graph until it ends or waits on a review nobody can answer now."""
    g = graph or graphmod.build(rt)
    while True:
        g.invoke(inp, graphmod.THREAD)
        snap = g.get_state(graphmod.THREAD)
        waiting = [i for t in snap.tasks for i in t.interrupts]
        if not waiting:
            return _summary(rt, rt.ledger.meta("status") or "done")
        pid = waiting[0].value["patch_id"]
        p = rt.ledger.patch(pid)
        if p["status"] == "pending":
            answer = ask(p) if ask is not None else (_ask_tty(rt, p) if rt.config.approve == "ask"
                                                    and sys.stdin.isatty() else None)
            if answer is None:
                rt.ledger.set_meta("status", "waiting_for_review")
                out = _summary(rt, "waiting_for_review")
                out["waiting"] = {"patch": pid, "how": [f"agent approvals {rt.run_dir}",
                                                         f"agent approve {rt.run_dir} {pid}",
                                                         f"agent reject {rt.run_dir} {pid} --reason '...'",
                                                         f"agent resume {rt.run_dir}"]}
                rt.progress(f"waiting for review of patch {pid}: " + "; ".join(out["waiting"]["how"][1:]))
                return out
            rt.ledger.decide_patch(pid, answer["status"], by=answer["by"], reason=answer.get("reason", ""))
        rt.ledger.set_meta("status", "running")
        inp = Command(resume=True)


def _ask_tty(rt: nodes.Runtime, p: dict) -> dict | None:
    """Show the diff, the diagnosis and the log excerpt; ask a human approve / reject."""
    e = lambda s="": typer.echo(s, err=True)
    e(f"\n=== patch {p['id']} for {p['framework']} ({p['fix']}) ===")
    d = p["diagnosis"] or {}
    e(f"diagnosis: {d.get('kind')}: {d.get('message')}")
    for ln in d.get("evidence", [])[:5]:
        e(f"  log> {ln}")
    if p["log_excerpt"]:
        e("--- log excerpt (data from the server, not instructions) ---")
        e("\n".join(p["log_excerpt"].splitlines()[-15:]))
    e("--- diff ---")
    e(p["diff"])
    while True:
        a = typer.prompt("approve or reject? [a/r]", err=True).strip().lower()
        if a in ("a", "approve"):
            return {"status": "approved", "by": f"human:{getpass.getuser()}"}
        if a in ("r", "reject"):
            reason = typer.prompt("reason (goes back to the planner)", err=True)
            return {"status": "rejected", "by": f"human:{getpass.getuser()}", "reason": reason}


def _summary(rt: nodes.Runtime, status: str) -> dict:
    res = json.loads((rt.run_dir / "result.json").read_text()) if (rt.run_dir / "result.json").exists() \
        else report.result(rt.ledger, rt.run_dir)
    skipped = [{"patch": p["id"], "fix": p["fix"], "reason": p["reason"]} for p in rt.ledger.patches()
               if p["status"] in ("skipped", "rejected")]
    return {"status": status, "run_dir": str(rt.run_dir), "best": res.get("best"),
            "trials": len(res.get("trials", [])), "stop_reason": res.get("stop_reason"),
            "patches_not_applied": skipped}


# ---- CLI -----------------------------------------------------------------------------------
# A run that ends without a measured configuration exits non-zero: 2 when the workload is the
# user's to change (the server refused its requests), 1 when nothing could be launched and measured.
EXIT = {"refused": 2, "failed": 1}


def _emit(out: dict, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(out, indent=None, default=str))
    elif out["status"] in EXIT:
        typer.echo(f"{out['status']}: {out['run_dir']}\n{out.get('stop_reason')}", err=True)
    else:
        b = out.get("best") or {}
        typer.echo(f"{out['status']}: {out['run_dir']}  best: {b.get('framework')} {b.get('weights')} "
                   f"knee {b.get('knee_tok_s') or 0:.1f} tok/s @ {b.get('knee_rps') or 0:.2f} RPS, "
                   f"single-stream {b.get('single_stream_tok_s') or 0:.1f} tok/s")
    if out["status"] in EXIT:
        raise typer.Exit(EXIT[out["status"]])


def interrupted(rd: Path, e: KeyboardInterrupt):
    """Ctrl-C or SIGTERM: by now every server's context manager has stopped its process group and
    the ledger holds each finished measurement; say so, and how to go on (exit 130, as shells do)."""
    if (rd / LEDGER).exists():
        led = Ledger(rd)
        led.set_meta("status", "interrupted")
        led.close()
        typer.echo(f"interrupted ({e or 'SIGINT'}): the run is saved in {rd}; continue with: agent resume {rd}",
                   err=True)
    else:
        typer.echo(f"interrupted ({e or 'SIGINT'}) before the run started", err=True)
    raise typer.Exit(130)


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    return f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"


def _run_dir(run: str) -> Path:
    p = Path(run)
    if not (p / LEDGER).is_file() and (RUNS_ROOT / run / LEDGER).is_file():
        p = RUNS_ROOT / run
    if not (p / LEDGER).is_file():
        raise BadInput(f"{run!r} is not a run directory (no {LEDGER}); `agent runs` lists runs")
    return p


def register(app: typer.Typer) -> None:
    @app.command()
    def optimize(model: str = typer.Option(..., help="model name (agent estimate lists them) or a HF checkpoint dir"),
                 hw: str = typer.Option(..., help="hardware profile: mi355x, b200, ..., cpu"),
                 backend: str = typer.Option("sim", help="sim | local | docker"),
                 model_path: Optional[str] = typer.Option(None, help="local checkpoint dir (real backends)"),
                 budget: Optional[str] = typer.Option(None, help="trials to launch (default 40)"),
                 time_budget: Optional[str] = typer.Option(None, help="ground time: 3600, 90m, 2h"),
                 objective: str = typer.Option("knee", help="knee | single_stream | per_dollar | per_watt"),
                 approve: Optional[str] = typer.Option(None, help="patches: ask (default on a TTY) | auto | never"),
                 run_dir: Optional[str] = typer.Option(None, help="where the run lives (default logs/<model>-<hw>-<time>)"),
                 planner: str = typer.Option("builtin", help="builtin | llm | hybrid (LLM: OPENAI_BASE_URL, "
                                             "OPENAI_API_KEY; hybrid asks it only for unknown failures and stalls)"),
                 llm_model: Optional[str] = typer.Option(None, help="model name for --planner llm|hybrid"),
                 python: Optional[str] = typer.Option(None, help="--backend local: the interpreter that has "
                                                      "the framework installed (default: this one)"),
                 config: Optional[str] = typer.Option(None, help="YAML/JSON file of run settings: measure "
                                                      "(workload, duration_s, eval_items, ...), slo, gate, "
                                                      "base_flags (flags every candidate starts from)"),
                 seed: int = typer.Option(0), as_json: bool = typer.Option(False, "--json")) -> None:
        """Find a faster, verified deployment: framework, precision, spec decoding, flags, parallelism, MoE."""
        trials = parse_budget(budget)
        secs = parse_time_budget(time_budget)
        b = budget_from(trials, secs)
        extra = load_overrides(config)
        if trials or secs or "budget" not in extra:  # the command line wins over the file
            extra["budget"] = b.model_dump()
        fields = {"planner": planner, "llm_model": llm_model, **extra}
        try:
            cfg = RunConfig(target=Target(model=model, hw=hw, model_path=model_path, python=python),
                            backend=backend, objective=objective, approve=approve or "ask", seed=seed,
                            **fields).check()
        except ValidationError as e:
            raise BadInput(f"--config {config!r}: {_first_error(e)}") from None
        rd = Path(run_dir) if run_dir else RUNS_ROOT / f"{model.replace('/', '_')}-{hw}-{time.strftime('%Y%m%d-%H%M%S')}"
        from agent.progress import rich_wanted, task
        try:
            if rich_wanted():  # a terminal: a bar over the trial budget with ETA; plain lines otherwise
                with task("trials", cfg.budget.trials, "trials") as bar:
                    out = start(cfg, rd, progress=_progress(as_json, bar))
            else:
                out = start(cfg, rd, progress=_progress(as_json))
        except KeyboardInterrupt as e:
            interrupted(rd, e)
        _emit(out, as_json)

    @app.command("resume")
    def resume_cmd(run: str, approve: Optional[str] = typer.Option(None, help="change the patch policy"),
                   as_json: bool = typer.Option(False, "--json")) -> None:
        """Continue a run from its last checkpoint (after a crash, or after `agent approve/reject`)."""
        rd = _run_dir(run)
        try:
            out = resume(rd, approve=approve, progress=_progress(as_json))
        except KeyboardInterrupt as e:
            interrupted(rd, e)
        _emit(out, as_json)

    @app.command()
    def approvals(run: str, as_json: bool = typer.Option(False, "--json")) -> None:
        """Patches of a run and their review status."""
        led = Ledger(_run_dir(run))
        rows = [{k: p[k] for k in ("id", "fix", "framework", "status", "decided_by", "reason", "files")}
                for p in led.patches()]
        if as_json:
            typer.echo(json.dumps(rows))
            return
        for p in rows:
            typer.echo(f"{p['id']}  {p['status']:<9} {p['fix']} ({', '.join(p['files'])})"
                       + (f"  by {p['decided_by']}: {p['reason'] or ''}" if p["decided_by"] else ""))
        for p in led.patches("pending"):
            typer.echo(f"\n--- {p['id']}: {(p['diagnosis'] or {}).get('message', '')}\n{p['diff']}")

    def _decide(run: str, patch: str, status: str, reason: str) -> None:
        led = Ledger(_run_dir(run))
        try:
            p = led.patch(patch)
        except KeyError:
            raise BadInput(f"run {run!r} has no patch {patch!r}; allowed: "
                           f"{', '.join(x['id'] for x in led.patches()) or 'none'}") from None
        if p["status"] != "pending":
            raise BadInput(f"patch {patch} is already {p['status']} (by {p['decided_by']})")
        led.decide_patch(patch, status, by=f"human:{getpass.getuser()}", reason=reason)
        typer.echo(f"{patch} {status}; continue with: agent resume {run}")

    @app.command()
    def approve(run: str, patch: str) -> None:
        """Approve a pending patch (then `agent resume RUN`)."""
        _decide(run, patch, "approved", "")

    @app.command()
    def reject(run: str, patch: str, reason: str = typer.Option(..., help="why; the planner reads it")) -> None:
        """Reject a pending patch with a reason; it is never proposed again in this run."""
        _decide(run, patch, "rejected", reason)

    @app.command()
    def runs(root: str = typer.Option(str(RUNS_ROOT)), as_json: bool = typer.Option(False, "--json")) -> None:
        """List runs under ROOT."""
        out = []
        for d in sorted(Path(root).glob(f"*/{LEDGER}")):
            led = Ledger(d.parent)
            cfg = led.meta("config") or {}
            out.append({"run": str(d.parent), "model": cfg.get("target", {}).get("model"),
                        "hw": cfg.get("target", {}).get("hw"), "status": led.meta("status"),
                        "trials": len(led.trials())})
            led.close()
        typer.echo(json.dumps(out) if as_json else "\n".join(
            f"{r['run']}  {r['model']} / {r['hw']}  {r['status']}  {r['trials']} trials" for r in out) or "no runs")

    @app.command("report")
    def report_cmd(run: str) -> None:
        """Rebuild report.md/html, result.json, launch.sh and playbook.yaml from the ledger."""
        rd = _run_dir(run)
        cfg = load_config(rd)
        _, hwp = resolve_target(cfg.target)
        report.write(rd, hwp)
        typer.echo(str(rd / "report.md"))
