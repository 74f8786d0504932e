"""A playbook replayed as a run of the loop (the library behind `agent replay`): the same graph,
keep/revert rule, approvals and outputs as any run (agent/run.py), with the replay planner, plus
a step-by-step account of what carried over. A playbook is refused (BadInput naming the field)
before any run directory exists.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from agent.playbooks import schema as pbm
from agent import run as runlib
from agent import run_lock
from agent.config import RunConfig, resolve_target
from agent.errors import BadInput
from agent.ledger import LEDGER, Ledger
from agent.playbooks.outcomes import ledger_note, outcomes
from agent.playbooks.replay import ReplayPlanner

SOURCE_COPY = "playbook.source.yaml"


def precheck(pb: pbm.Playbook, cfg: RunConfig, sandbox) -> None:
    """Literal diffs checked against a fresh copy of this backend's source tree (symlinks that
    lead out of it), before a run directory exists."""
    from tools import patch as patchtool
    lit = [(s, p) for s in pb.steps for p in s.patches if p.diff]
    if not lit or not hasattr(sandbox, "source_tree"):
        return
    with tempfile.TemporaryDirectory(prefix="inferloop-precheck-") as tmp:
        for s, p in lit:
            try:
                tree = sandbox.source_tree(p.framework, Path(tmp))
            except Exception:  # noqa: BLE001  no tree for this framework here: the step will fail, not escape
                continue
            try:
                patchtool.check_diff(p.diff, tree)
            except patchtool.PatchRefused as e:
                i = pb.steps.index(s)
                raise pbm.PlaybookError(f"steps[{i}].patches.diff: {e}") from None


@run_lock.locked(2)
def replay(playbook: pbm.Playbook | str | Path, cfg: RunConfig, run_dir: Path, *, sandbox_factory=None,
           suite_factory=None, ask=None, progress=None, fallback=None) -> dict:
    """Replay a playbook as a run of the loop; resumes when run_dir already holds this replay."""
    pb = playbook if isinstance(playbook, pbm.Playbook) else pbm.load(playbook)
    run_dir = Path(run_dir)
    planner = ReplayPlanner(pb, fallback=fallback)
    kw = {k: v for k, v in {"suite_factory": suite_factory, "progress": progress}.items() if v is not None}
    if (run_dir / LEDGER).exists():
        led = Ledger(run_dir)
        rep = led.meta("replay")
        led.close()
        if not rep:
            raise BadInput(f"{str(run_dir)!r} holds a run that is not a replay; use `agent resume {run_dir}`")
        if rep["playbook"] != pb.model_dump(mode="json"):
            raise BadInput(f"{str(run_dir)!r} replays another playbook ({rep.get('name')}); pick a new --run-dir")
        planner.note = ledger_note(Ledger(run_dir))
        if sandbox_factory is not None:
            kw["sandbox_factory"] = sandbox_factory
        out = runlib.resume(run_dir, planner=planner, ask=ask, **kw)
    else:
        cfg.check()
        card, hw = resolve_target(cfg.target)
        sandbox = (sandbox_factory or runlib.default_sandbox)(cfg, card, hw)
        precheck(pb, cfg, sandbox)
        from agent.safe_input import prepare_run_dir
        prepare_run_dir(run_dir)
        rt = runlib.open_runtime(run_dir, cfg, sandbox_factory=lambda *a: sandbox, planner=planner, **kw)
        planner.note = ledger_note(rt.ledger)
        runlib.record_start(rt)
        rt.ledger.set_meta("replay", {"name": pb.name, "playbook": pb.model_dump(mode="json"),
                                      "frameworks": list(rt.frameworks())})
        (run_dir / SOURCE_COPY).write_text(pbm.dumps(pb))
        out = runlib.drive(rt, {"trial": None}, ask=ask)
    led = Ledger(run_dir)
    try:
        card, hw = resolve_target(cfg.target)
        out["replayed_from"] = pb.name
        out["steps"] = outcomes(pb, led.trials(), card, hw, (led.meta("replay") or {}).get("frameworks"),
                                led.events())
        out["launched"] = led.launched_count()
        out["playbook"] = str(run_dir / "playbook.yaml")
        if out.get("waiting"):  # continue a replay with the replay planner, not the built-in one
            src = playbook if not isinstance(playbook, pbm.Playbook) else run_dir / SOURCE_COPY
            out["waiting"]["how"][-1] = (f"agent replay {src} --model {cfg.target.model} --hw {cfg.target.hw} "
                                         f"--run-dir {run_dir}")
    finally:
        led.close()
    return out
