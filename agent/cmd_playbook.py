"""Commands of the `agent` CLI: `replay` and `playbook show|validate|diff`.

A thin shell: a playbook is refused (exit 2, the offending field named) before anything runs;
the replay itself is the library's (agent/replay.py: an ordinary run of the loop with the replay
planner); show and diff render a playbook's steps.
"""
from __future__ import annotations

import difflib
import json
import time
from pathlib import Path
from typing import Optional

import typer
from pydantic import ValidationError

from agent.playbooks import schema as pbm
from agent.playbooks.adapt import adapt
from agent.cmd_common import RUNS_ROOT, emit, first_error, interrupted, load_overrides, parse_model_paths, progress
from agent.config import RunConfig, Target, budget_from, parse_budget, parse_time_budget, resolve_target
from agent.errors import BadInput
from tools import cli_values
from tools.inert import inert

# ---- show / diff ---------------------------------------------------------------------------
def _change(s: pbm.Step) -> str:
    parts = []
    if s.framework:
        parts.append(s.framework)
    if s.weights:
        parts.append(f"weights {s.weights}")
    if s.parallel:
        parts.append(f"tp {s.parallel.tp} dp {s.parallel.dp}" + (" ep" if s.parallel.ep else ""))
    parts += [f"{k} {json.dumps(v)}" for k, v in sorted(s.flags.items())]
    parts += [f"{k}={v}" for k, v in sorted(s.env.items())]
    parts += [f"patch {p.fix}({', '.join(f'{k}={v}' for k, v in sorted(p.params.items()))})" for p in s.patches]
    if s.moe:
        parts.append("tune MoE " + ", ".join(f"{k}={s.moe.shape[k]}" for k in ("E", "N", "K", "topk") if k in s.moe.shape))
    return "; ".join(parts)


def _when(s: pbm.Step) -> str:
    return ", ".join(f"{k}={v}" for k, v in s.when.model_dump(exclude_none=True).items()) or "always"


def show_rows(pb: pbm.Playbook, model: str | None = None, hw: str | None = None) -> list[dict]:
    rows = []
    card = hwp = None
    if model or hw:
        if not (model and hw):
            raise BadInput("give both --model and --hw to see a playbook adapted to a target")
        card, hwp = resolve_target(Target(model=model, hw=hw))
    for s in pb.steps:
        r = {"id": s.id, "kind": s.kind, "phase": s.phase, "description": s.description, "change": _change(s),
             "when": _when(s), "evidence": s.evidence.reason}
        if card is not None:
            a = adapt(s, card, hwp)
            r["adapted"] = {"skip": a.skip, "notes": a.notes, "flags": a.flags,
                            "parallel": a.parallel.model_dump() if a.parallel else None,
                            "patches": [{"fix": p["fix"], "params": p["params"]} for p in a.patches]}
        rows.append(r)
    return rows


def diff_rows(a: pbm.Playbook, b: pbm.Playbook) -> list[dict]:
    sig = lambda s: (s.kind, s.phase, _change(s))
    sa, sb = [sig(s) for s in a.steps], [sig(s) for s in b.steps]
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=sa, b=sb, autojunk=False).get_opcodes():
        if op == "equal":
            out += [{"op": "same", "a": a.steps[i].id, "b": b.steps[j].id, "change": sa[i][2]}
                    for i, j in zip(range(i1, i2), range(j1, j2))]
            continue
        out += [{"op": "removed", "a": a.steps[i].id, "kind": sa[i][0], "change": sa[i][2]} for i in range(i1, i2)]
        out += [{"op": "added", "b": b.steps[j].id, "kind": sb[j][0], "change": sb[j][2]} for j in range(j1, j2)]
    return out


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Inspect playbooks: show, validate, diff.", no_args_is_help=True)
    app.add_typer(group, name="playbook")

    @app.command("replay")
    def replay_cmd(playbook: str = typer.Argument(..., help="playbook YAML (e.g. playbooks/glm-5.2-mi355x.yaml)"),
                   model: str = typer.Option(..., help="model to replay it on (built-in name or HF checkpoint dir)"),
                   hw: str = typer.Option(..., help="hardware profile: mi355x, b200, ..."),
                   backend: str = typer.Option("sim", help="sim | local | docker"),
                   model_path: Optional[list[str]] = typer.Option(None, help="local checkpoint dir (real backends); "
                                                                  "one per weight precision: PRECISION=DIR, "
                                                                  "repeatable"),
                   image: Optional[list[str]] = typer.Option(None, "--image", help="--backend docker: "
                                                             "FRAMEWORK=IMAGE, repeatable"),
                   python: Optional[str] = typer.Option(None, help="--backend local: the interpreter that has "
                                                        "the framework installed (default: this one)"),
                   config: Optional[str] = typer.Option(None, help="YAML/JSON file of run settings, as for "
                                                        "`agent optimize --config` (measure, slo, gate, base_flags)"),
                   budget: Optional[str] = typer.Option(None, help="trials to launch at most (default 40)"),
                   time_budget: Optional[str] = typer.Option(None, help="ground time: 3600, 90m, 2h"),
                   approve: Optional[str] = typer.Option(None, help="patches: ask (default on a TTY) | auto | never"),
                   run_dir: Optional[str] = typer.Option(None, help="run directory (an existing replay resumes)"),
                   seed: int = typer.Option(0), as_json: bool = typer.Option(False, "--json")) -> None:
        """Replay a playbook on a model and node: each step adapted to the model card and hardware,
        re-verified with the keep/revert rule; steps that do not apply are skipped with the reason;
        a failing step hands its phase to the built-in planner. Ends with a new playbook and report."""
        pb = pbm.load(playbook)
        trials, secs = parse_budget(budget), parse_time_budget(time_budget)
        extra = load_overrides(config)
        if trials or secs or "budget" not in extra:  # the command line wins over the file
            extra["budget"] = budget_from(trials, secs).model_dump()
        try:  # the playbook's objective is what its evidence measured
            default_ckpt, checkpoints = parse_model_paths(model_path)
            cfg = RunConfig(target=Target(model=model, hw=hw, model_path=default_ckpt, checkpoints=checkpoints,
                                          python=python, images=cli_values.images(image)), backend=backend,
                            objective=pb.objective, approve=approve or "ask", seed=seed, **extra)
        except ValidationError as e:
            raise BadInput(f"--config {config!r}: {first_error(e)}") from None
        rd = Path(run_dir) if run_dir else RUNS_ROOT / f"replay-{model.replace('/', '_')}-{hw}-{time.strftime('%Y%m%d-%H%M%S')}"
        try:
            from agent.replay import replay  # langgraph: only when a replay runs
            out = replay(pb, cfg, rd, progress=progress(as_json))
        except KeyboardInterrupt as e:
            interrupted(rd, e)
        if as_json:
            typer.echo(json.dumps(out, default=str))
            return
        emit(out, False)
        for o in out["steps"]:
            typer.echo(inert(f"  {o['step']}  {o['outcome']:<9} {o['reason']}"))
        typer.echo(f"{out['launched']} trials launched; new playbook: {out['playbook']}")

    @group.command("show")
    def show(playbook: str, model: Optional[str] = typer.Option(None, help="adapt to this model"),
             hw: Optional[str] = typer.Option(None, help="... and this hardware"),
             as_json: bool = typer.Option(False, "--json")) -> None:
        """The steps, their conditions and evidence; with --model/--hw, how each adapts (or why it is skipped)."""
        pb = pbm.load(playbook)
        rows = show_rows(pb, model, hw)
        if as_json:
            typer.echo(json.dumps({"name": pb.name, "version": pb.version, "source": pb.source.model_dump(),
                                   "steps": rows}))
            return
        say = lambda text: typer.echo(inert(text))  # noqa: E731  a playbook is data from elsewhere: shown inert
        say(f"{pb.name} (v{pb.version}, objective {pb.objective}; recorded on {pb.source.model}/"
                   f"{pb.source.hw} in {pb.source.trials} trials)")
        for r in rows:
            say(f"{r['id']} [{r['phase']}/{r['kind']}] {r['description']}\n    change: {r['change']}\n"
                       f"    when: {r['when']}\n    evidence: {r['evidence']}")
            if "adapted" in r:
                ad = r["adapted"]
                say(f"    here: {'SKIP: ' + ad['skip'] if ad['skip'] else 'applies'}"
                           + (f" ({'; '.join(ad['notes'])})" if ad["notes"] else ""))

    @group.command("validate")
    def validate(playbook: str, as_json: bool = typer.Option(False, "--json")) -> None:
        """Check a playbook against the schema and the safety rules (exit 2 naming the bad field)."""
        pb = pbm.load(playbook)
        out = {"ok": True, "name": pb.name, "steps": len(pb.steps)}
        typer.echo(json.dumps(out) if as_json else f"ok: {playbook} ({len(pb.steps)} steps)")

    @group.command("diff")
    def diff(a: str, b: str, as_json: bool = typer.Option(False, "--json")) -> None:
        """Step-by-step difference between two playbooks (e.g. a recording and its replay)."""
        rows = diff_rows(pbm.load(a), pbm.load(b))
        if as_json:
            typer.echo(json.dumps(rows))
            return
        mark = {"same": " ", "removed": "-", "added": "+"}
        for r in rows:
            ids = "/".join(x for x in (r.get("a"), r.get("b")) if x)
            typer.echo(inert(f"{mark[r['op']]} {ids:<8} {r['change']}"))

    @group.command("schema")
    def schema(out: Optional[str] = typer.Option(None, help="write to this file instead of stdout")) -> None:
        """The playbook JSON Schema (playbooks/playbook.schema.json is this output)."""
        text = json.dumps(pbm.json_schema(), indent=2) + "\n"
        if out:
            Path(out).write_text(text)
        else:
            typer.echo(text, nl=False)
