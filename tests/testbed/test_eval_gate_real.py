"""The loop's eval gate on the real testbed: a change that makes the server faster but breaks its
answers is reverted, and the verdict names the eval and the drop (issue 11).

Both cases are steps of one playbook replayed with `agent replay --backend local`, as a user replays
a playbook recorded on another machine: the baseline runs with `--max-num-seqs 1` (one sequence at a
time, so its knee is low), and each step lifts that limit (2-3x the throughput at this load,
tests/testbed/test_flag_difference_real.py) together with a setting that breaks accuracy. The
speed gain passes the performance check by far, so only the eval gate can stop the step:
- any CPU: `--max-model-len` just long enough for the benchmark's requests: the long-context
  eval's prompts (the workload's length plus a question) no longer fit, and vLLM refuses them;
- a CPU where vLLM-CPU's eager bf16 answers the smoke prompt wrong (sandboxes/testbed/mode.py found
  it and chose another mode): the step switches back to eager bf16, and the gate judges it by the
  evals, not by that one answer. Measured on such a CPU (an AMX Xeon, 2026-12-01): eager bf16
  answered 20 QA items exactly as eager fp32 did and one more long-context item, and of six chat
  prompts fp32 got "the capital of Italy" wrong where bf16 was right: SmolLM2-135M's greedy
  answers flip with bf16 vs fp32 rounding, either way. The gate kept the step, rightly.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests import agent_process

pytestmark = [pytest.mark.testbed, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
IN, OUT = 96, 16  # the benchmark's requests: 112 tokens; the long-context prompts are ~96 + a question
SETTINGS = {
    "measure": {"workload": {"input_len": IN, "output_len": OUT, "prefix_hit": 0.0},
                "single_stream": {"input_len": IN, "output_len": OUT, "prefix_hit": 0.0},
                # 1, 2, 4, 8, 16 req/s: one sequence at a time saturates near 4, sixteen far above
                "duration_s": 6, "requests_per_point": 8, "start_rps": 1.0, "max_points": 5,
                "bisect_steps": 0, "single_stream_requests": 2, "warmup": 4, "eval_items": 20,
                "eval_tasks": ["longctx", "qa"]},
    # tolerance 1.0: the single-stream guard cannot revert (no fall exceeds 100%), so a verdict that
    # gets past the speed check is the eval gate's; the guard has its own tests (tests/agent/
    # test_decide.py). On CI's AMX Xeon (stop 23) the bf16 step ended with no evals in its numbers
    # after 380 s (the other case: 250 s): two more launches, most likely the guard's repeat and revert.
    "gate": {"noise_floor": 0.15, "max_repeats": 2, "tolerance": 1.0},
    # 5 s, the CPU default: at 1 s an AVX-512 Xeon without AMX (eager fp32, 2026-12-02) met it only
    # below 0.2 req/s on either side (knee 2.6 -> 1.6 tok/s), so the step failed the speed check first.
    "slo": {"ttft_p95_s": 5.0},
}


TRUNCATE = ("s02", {"--max-model-len": IN + OUT},
            "lift the sequence limit, with a context just long enough for the benchmark")
BF16 = ("s03", {"--enforce-eager": True, "--dtype": "bfloat16"}, "lift the sequence limit, in the faster eager bf16 mode")


def _tried(testbed) -> dict:
    """The serving modes the build's smoke test tried here -> whether each answered right."""
    return {m["mode"]: m["right"] for m in testbed.mode.get("tried", [])}


def _bf16_failed_smoke(testbed) -> bool:
    return _tried(testbed).get("eager-bf16") is False


def _playbook(steps: list[tuple]) -> dict:
    """One baseline, then each step measured against it: a step the gate reverts leaves the
    baseline the incumbent, so the next is judged against the same numbers (one launch, sweep and
    eval of the baseline instead of one per case)."""
    return {"version": 1, "name": "eval-gate", "steps": [
        {"id": "s01", "kind": "framework", "phase": "framework", "baseline": True, "framework": "vllm",
         "weights": "bf16", "description": "baseline: one sequence at a time", "flags": {"--max-num-seqs": 1}},
        *({"id": sid, "kind": "flags", "phase": "flags", "description": why,
           "flags": {"--max-num-seqs": 16, **flags}} for sid, flags, why in steps)]}


@pytest.fixture(scope="module")
def replayed(testbed, tmp_path_factory):
    """`agent replay --backend local` of the baseline and its steps; the bf16 step only where eager
    bf16 failed the smoke prompt (elsewhere the testbed serves bf16 already)."""
    from sandboxes.testbed.serve import vllm_env
    from agent.ledger import Ledger

    steps = [TRUNCATE, *([BF16] if _bf16_failed_smoke(testbed) else [])]
    tmp = tmp_path_factory.mktemp("eval-gate")
    pb, cfg, d = tmp / "pb.yaml", tmp / "run.yaml", tmp / "run"
    pb.write_text(yaml.safe_dump(_playbook(steps)))
    cfg.write_text(yaml.safe_dump({**SETTINGS, "base_flags": {"--max-model-len": 4096, **testbed.serving_flags}}))
    argv = agent_process.agent("replay", str(pb),
            "--model", testbed.model_name, "--hw", "cpu", "--backend", "local", "--model-path", str(testbed.model_dir),
            "--python", str(testbed.python), "--config", str(cfg), "--budget", str(1 + len(steps)),
            "--approve", "never", "--run-dir", str(d), "--json")
    r = agent_process.run(argv, 600 * len(steps) + 600, cwd=REPO, env=vllm_env())
    assert r.returncode == 0, r.stderr[-4000:]
    led = Ledger(d)
    by_step = {sid: [t for t in led.trials() if f"[playbook {sid}]" in (t["description"] or "")]
               for sid, _, _ in steps}
    assert all(len(ts) == 1 for ts in by_step.values()), [t["description"] for t in led.trials()]
    return json.loads(r.stdout), {sid: ts[0] for sid, ts in by_step.items()}, led


def _assert_rejected_by_evals(out: dict, t: dict, led, task: str):
    n = t["numbers"]
    # The speed part passed, by far: it is the eval gate that said no.
    assert n["gain"] > n["noise"] and min(n["candidate"]) > max(n["incumbent"]), t["reason"]
    assert t["verdict"] == "reverted" and t["reason"].startswith("eval regression"), t["reason"]
    ev = n["evals"][task]
    assert not ev["non_inferior"] and ev["gap"] < -ev["margin"], ev
    # ... and the verdict names the eval and the drop, in the numbers it was decided on.
    assert f"{task} {ev['incumbent']:.3f}->{ev['candidate']:.3f}" in t["reason"], t["reason"]
    assert f"{ev['gap'] * 100:+.1f} pts" in t["reason"], t["reason"]


def test_truncating_max_model_len_is_rejected_by_the_eval_gate(replayed):
    out, steps, led = replayed
    t = steps["s02"]
    _assert_rejected_by_evals(out, t, led, "longctx")
    assert t["numbers"]["evals"]["longctx"]["candidate"] == 0.0  # every long prompt refused
    assert led.trial(t["incumbent_id"])["candidate"]["flags"]["--max-num-seqs"] == 1  # judged against the baseline


def test_the_baseline_stays_deployed_unless_a_step_passed_the_gate(replayed):
    out, steps, led = replayed
    best = led.trial(led.incumbent())["candidate"]
    kept = [t for t in steps.values() if t["verdict"] == "kept"]
    if kept:
        assert best["flags"] == kept[-1]["candidate"]["flags"]
    else:
        assert best["flags"]["--max-num-seqs"] == 1
    assert out["best"]["flags"] == best["flags"]  # what the run reports is what it would deploy


def test_eager_bf16_where_it_fails_the_smoke_prompt_is_judged_by_the_evals(testbed, replayed):
    if not _bf16_failed_smoke(testbed):
        pytest.skip(f"eager bf16 did not fail the smoke prompt on this CPU (modes tried: {', '.join(_tried(testbed))}) "
                    f"({testbed.mode.get('cpu', {}).get('model_name', '?')}, serving mode {testbed.mode['mode']})")
    out, steps, led = replayed
    t = steps["s03"]
    n = t["numbers"]
    assert n["gain"] > n["noise"] and min(n["candidate"]) > max(n["incumbent"]), t["reason"]  # speed passed
    assert "evals" in n, (t["verdict"], t["reason"])  # decided by the evals, not before them
    evals = n["evals"]
    assert set(evals) == {"longctx", "qa"}, evals  # both tasks were run on both sides, item for item
    regressed = sorted(task for task, e in evals.items() if not e["non_inferior"])
    if regressed:  # answers that break on the evals: reverted, naming them
        assert t["verdict"] == "reverted" and t["reason"].startswith("eval regression"), t["reason"]
        assert all(f"{task} " in t["reason"] for task in regressed)
    else:  # answers the evals cannot tell from the incumbent's: kept
        assert t["verdict"] == "kept" and "non-inferior" in t["reason"], t["reason"]
    print(f"eager bf16 here: {t['verdict']}: {t['reason']}")
