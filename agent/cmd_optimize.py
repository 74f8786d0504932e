"""Commands of the `agent` CLI: optimize, resume, approvals, approve, reject, runs, report.

A thin shell: it parses and validates input (BadInput -> exit 2), hands the run to the library
(agent/run.py: open the runtime, drive the graph, ask a human at a review) and prints the outcome.
Approvals come only from a human (here, or on the terminal during a run) or the run's --approve
policy, never from log or model text.
"""
from __future__ import annotations

import getpass
import json
import os
import time
from pathlib import Path
from typing import List, Optional

import typer
from pydantic import ValidationError

from agent.cmd_common import (RUNS_ROOT, emit, first_error, interrupted, load_overrides, parse_model_paths,
                               parse_pythons, progress, run_dir_arg, run_row)
from agent.config import RunConfig, Target, budget_from, parse_budget, parse_time_budget, resolve_target
from agent.errors import BadInput
from tools import cli_values
from agent.ledger import LEDGER, Ledger
from tools.inert import inert, inert_line


def _runlib():
    # The run library pulls in langgraph (~1.5 s): imported only by the commands that run the
    # graph, so `agent runs`, `--help` and a refused value answer at once.
    from agent import run
    return run


def register(app: typer.Typer) -> None:
    @app.command()
    def optimize(model: Optional[str] = typer.Option(None, help="model name (agent estimate lists them) or a HF "
                                                     "checkpoint dir (default: --model-path)"),
                 hw: str = typer.Option(..., help="hardware profile: mi355x, b200, ..., cpu"),
                 backend: str = typer.Option("sim", help="sim | local | docker"),
                 framework: Optional[str] = typer.Option(None, help="serve with this framework only; with "
                                                         "--backend local, transformers is transformers serve on "
                                                         "this host's GPU"),
                 model_path: Optional[list[str]] = typer.Option(None, help="local checkpoint dir (real backends); "
                                                                "one per weight precision: PRECISION=DIR, "
                                                                "repeatable (e.g. bf16=DIR fp8=DIR2)"),
                 budget: Optional[str] = typer.Option(None, help="trials to launch (default 40)"),
                 time_budget: Optional[str] = typer.Option(None, help="ground time: 3600, 90m, 2h"),
                 objective: str = typer.Option("knee", help="knee | single_stream | per_dollar | per_watt"),
                 approve: Optional[str] = typer.Option(None, help="patches: ask (default on a TTY) | auto | never"),
                 run_dir: Optional[str] = typer.Option(None, help="where the run lives (default logs/<model>-<hw>-<time>)"),
                 planner: str = typer.Option("builtin", help="builtin | llm | hybrid (LLM: OPENAI_BASE_URL, "
                                             "OPENAI_API_KEY; hybrid asks it only for unknown failures and stalls)"),
                 llm_model: Optional[str] = typer.Option(None, help="model name for --planner llm|hybrid"),
                 image: Optional[List[str]] = typer.Option(None, "--image", help="--backend docker: FRAMEWORK=IMAGE, "
                                                           "repeatable (e.g. vllm=rocm/vllm:latest); the image must "
                                                           "be in the engine already"),
                 python: Optional[List[str]] = typer.Option(None, help="--backend local: the interpreter that has "
                                                            "the framework installed (default: this one); "
                                                            "repeatable FRAMEWORK=PATH gives one framework its own"),
                 config: Optional[str] = typer.Option(None, help="YAML/JSON file of run settings: measure "
                                                      "(workload, duration_s, eval_items, ...), slo, gate, "
                                                      "base_flags (flags every candidate starts from)"),
                 workers: int = typer.Option(1, help="trials at once: on the --ray cluster's nodes, else on a "
                                             "local Ray instance of this many sim nodes (pip install "
                                             "'inferloop[cluster]')"),
                 ray: Optional[str] = typer.Option(None, "--ray", help="Ray cluster address (default: "
                                                   "RAY_ADDRESS when --workers > 1)"),
                 seed: int = typer.Option(0), as_json: bool = typer.Option(False, "--json")) -> None:
        """Find a faster, verified deployment: framework, precision, spec decoding, flags, parallelism, MoE."""
        default_ckpt, checkpoints = parse_model_paths(model_path)
        if model is None:  # a checkpoint directory names its own model (its config.json)
            model = default_ckpt or next(iter(checkpoints.values()), None)
            if model is None:
                raise BadInput("give --model NAME, or --model-path DIR to optimize that checkpoint")
        trials = parse_budget(budget)
        secs = parse_time_budget(time_budget)
        b = budget_from(trials, secs)
        extra = load_overrides(config)
        if trials or secs or "budget" not in extra:  # the command line wins over the file
            extra["budget"] = b.model_dump()
        if not 1 <= workers <= 1024:
            raise BadInput(f"--workers {workers}: allowed: 1 to 1024 (trials at once)")
        cluster = ray or (os.environ.get("RAY_ADDRESS") or None if workers > 1 else None)
        fields = {"planner": planner, "llm_model": llm_model, "workers": workers, "cluster": cluster, **extra}
        try:
            default_py, pythons = parse_pythons(python)
            cfg = RunConfig(target=Target(model=model, hw=hw, model_path=default_ckpt, checkpoints=checkpoints,
                                          python=default_py, pythons=pythons, images=cli_values.images(image)),
                            backend=backend, framework=framework, objective=objective, approve=approve or "ask", seed=seed,
                            **fields).check()
        except ValidationError as e:
            raise BadInput(f"--config {config!r}: {first_error(e)}") from None
        rd = Path(run_dir) if run_dir else RUNS_ROOT / f"{model.replace('/', '_')}-{hw}-{time.strftime('%Y%m%d-%H%M%S')}"
        from agent.progress import rich_wanted, task
        try:
            if rich_wanted():  # a terminal: a bar over the trial budget with ETA; plain lines otherwise
                with task("trials", cfg.budget.trials, "trials") as bar:
                    out = _runlib().start(cfg, rd, progress=progress(as_json, bar))
            else:
                out = _runlib().start(cfg, rd, progress=progress(as_json))
        except KeyboardInterrupt as e:
            interrupted(rd, e)
        emit(out, as_json)

    @app.command("resume")
    def resume_cmd(run: str, approve: Optional[str] = typer.Option(None, help="change the patch policy"),
                   ray: Optional[str] = typer.Option(None, "--ray", help="a run of several workers: join this "
                                                     "Ray cluster instead of the one it started on (its head moved)"),
                   as_json: bool = typer.Option(False, "--json")) -> None:
        """Continue a run from its last checkpoint (after a crash, or after `agent approve/reject`)."""
        rd = run_dir_arg(run)
        try:
            out = _runlib().resume(rd, approve=approve, cluster=ray, progress=progress(as_json))
        except KeyboardInterrupt as e:
            interrupted(rd, e)
        emit(out, as_json)

    @app.command()
    def approvals(run: str, as_json: bool = typer.Option(False, "--json")) -> None:
        """Patches of a run and their review status."""
        led = Ledger(run_dir_arg(run))
        rows = [{k: p[k] for k in ("id", "fix", "framework", "status", "decided_by", "reason", "files")}
                for p in led.patches()]
        if as_json:
            typer.echo(json.dumps(rows))
            return
        for p in rows:  # diffs, file names, reasons and diagnoses are data: shown inert
            typer.echo(inert_line(f"{p['id']}  {p['status']:<9} {p['fix']} ({', '.join(p['files'])})"
                                  + (f"  by {p['decided_by']}: {p['reason'] or ''}" if p["decided_by"] else "")))
        for p in led.patches("pending"):
            msg = inert_line((p['diagnosis'] or {}).get('message', ''))
            typer.echo(f"\n--- {inert_line(p['id'])}: {msg}\n{inert(p['diff'])}")

    def _decide(run: str, patch: str, status: str, reason: str) -> None:
        led = Ledger(run_dir_arg(run))
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
        if not Path(root).is_dir():
            raise BadInput(f"--root {root!r} is not a directory")
        out = [run_row(d.parent) for d in sorted(Path(root).glob(f"*/{LEDGER}"))]
        typer.echo(json.dumps(out) if as_json else "\n".join(
            f"{r['run']}  {r['model']} / {r['hw']}  {r['status']}  {r['trials']} trials" for r in out) or "no runs")

    @app.command("report")
    def report_cmd(run: str) -> None:
        """Rebuild report.md/html, result.json, launch.sh and playbook.yaml from the ledger."""
        rd = run_dir_arg(run)
        cfg = _runlib().load_config(rd)
        _, hwp = resolve_target(cfg.target)
        from agent import report
        report.write(rd, hwp)
        typer.echo(str(rd / "report.md"))
