"""One sim run of the real loop in a process of its own, for the fault tests to kill -9.
usage: python -m tests.faults.runner start|resume RUN_DIR VARIANT
VARIANT picks the budget: `trials` (8 trials) or `time` (a ground-time budget, so a resume that
reset the sim's clock would run more trials than an uninterrupted run)."""
import sys
from pathlib import Path

from agent.run import resume, start
from tests.agent.conftest import small_config

VARIANTS = {"trials": {"trials": 8}, "time": {"trials": None, "time_s": 2500.0}, "one": {"trials": 1}}


def config(variant: str):
    # 50 eval items: enough for the gate to see ATOM's long-context drop (the story's), so the run goes
    # on with sglang and meets its MTP failure and patch; with 20 ATOM passes and no patch is proposed.
    m = small_config().measure.model_copy(update={"eval_items": 50})
    return small_config(budget=VARIANTS[variant], approve="auto", measure=m)


def main() -> None:
    what, run_dir, variant = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    out = start(config(variant), run_dir) if what == "start" else resume(run_dir)
    print(out["status"], flush=True)


if __name__ == "__main__":
    main()
