"""What one `agent optimize` run is asked to do, validated at the boundary.

Everything here is plain pydantic so it round-trips through the ledger as JSON: a resumed run
reads its config back from the ledger instead of trusting new command-line flags.
"""
from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agent.errors import BadInput, unknown
from tools.bounds import SEED_MAX, TTFT_MAX_S, build, validation_message  # noqa: F401  re-exported
from tools.bench.workload import Workload

BACKENDS = ("sim", "local", "docker")
OBJECTIVES = ("knee", "single_stream", "per_dollar", "per_watt")
APPROVE = ("ask", "auto", "never")
PLANNERS = ("builtin", "llm", "hybrid")  # agent/planners/hybrid.py:make_planner builds them
# The story's throughput workload (20k in / 1k out, 60% prefix hit) and its single-stream one.
THROUGHPUT = Workload(input_len=20000, output_len=1000, prefix_hit=0.6)
SINGLE_STREAM = Workload(input_len=10000, output_len=1500, prefix_hit=0.0)


class Strict(BaseModel):
    """Every settings model: unknown keys refused (a typo in --config is not silently ignored),
    NaN and infinity refused (`duration_s: .inf` would run forever), and each number has an upper
    bound as well as a lower one, so an absurd value is named at the boundary, not found later
    as a run where every trial failed."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


DAY, YEAR = 86400.0, 366 * 86400.0
TRIALS_MAX = 100_000


class Target(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    hw: str
    model_path: str | None = None  # a local checkpoint directory (real backends)
    checkpoints: dict[str, str] = {}  # weight precision -> its checkpoint (--model-path PRECISION=DIR)
    python: str | None = None  # the interpreter that has the framework installed (local backend)
    images: dict[str, str] = {}  # framework -> docker image (docker backend: --image FRAMEWORK=IMAGE)
    pythons: dict[str, str] = {}  # framework -> its own interpreter (local backend; --python FW=PATH)


class Slo(Strict):
    ttft_p95_s: float = Field(5.0, gt=0, le=TTFT_MAX_S)  # the knee is the highest rate that meets this


class Budget(Strict):
    trials: int | None = Field(40, ge=1, le=TRIALS_MAX)  # new candidates launched (repeats do not count)
    time_s: float | None = Field(None, gt=0, le=YEAR)  # ground time (simulated seconds on the sim)


class Gate(Strict):
    """The keep/revert rule's knobs (agent/decide.py reads them)."""
    noise_floor: float = Field(0.02, ge=0, le=1)  # relative noise assumed before repeats measure it
    clear_mult: float = Field(3.0, ge=1, le=1000)  # a single-shot gain this many noise bands wide needs no repeat
    max_repeats: int = Field(3, ge=1, le=100)  # measurements per side before a within-noise gap is called
    margin_points: float = Field(2.0, ge=0, le=100)  # eval non-inferiority margin, in accuracy points
    margin_se: float = Field(1.0, ge=0, le=100)  # ... or this many standard errors of the paired gap, if larger
    tolerance: float = Field(0.25, ge=0, le=1)  # how much a guarded secondary metric may fall (relative)


class Measure(Strict):
    """How one candidate is measured (the bench and eval sizes)."""
    workload: Workload = THROUGHPUT
    single_stream: Workload = SINGLE_STREAM
    # Requests per rate: rate x duration_s, at least requests_per_point. A knee needs steady state:
    # a short burst drains before its queue builds, so TTFT looks fine far past what the server sustains.
    duration_s: float = Field(120.0, gt=0, le=DAY)
    requests_per_point: int = Field(48, ge=4, le=100_000)
    start_rps: float = Field(0.25, gt=0, le=1e6)
    # Start the knee search at the highest rate of its grid the warmup already carried (agent/measure.py
    # first_rate). Off by default: the sim's recorded figures (story, benchmarks) were measured from
    # start_rps; a CPU node turns it on (agent/workload_fit.py), where the low levels are minutes of a trial.
    start_from_warmup: bool = False
    growth: float = Field(2.0, gt=1, le=100)  # rate multiplier while the SLO holds
    max_points: int = Field(12, ge=2, le=1000)
    bisect_steps: int = Field(4, ge=0, le=100)
    warmup: int = Field(4, ge=0, le=10_000)  # requests before measuring: a server's first run compiles shapes, fills caches
    single_stream_requests: int = Field(3, ge=1, le=10_000)
    eval_items: int = Field(200, ge=10, le=100_000)  # per task; a paired test needs both sides on the same items
    eval_tasks: list[str] | None = None  # a subset of the default suite's tasks (None: all of them)
    # Who scores the gate's tasks: the project's own evals, or lm-evaluation-harness (tools/evals/lm_eval.py;
    # eval_tasks are then lm-eval task names, gsm8k from local files), against the server over HTTP.
    harness: str = "inferloop"


class LLMBounds(Strict):
    """How long the LLM planner may wait on its API (agent/planners/llm_bounds.py): a hung server
    costs at most breaker_after x decision_timeout_s in a whole run, then the built-in planner decides."""
    connect_timeout_s: float = Field(10.0, gt=0, le=600)
    timeout_s: float = Field(60.0, gt=0, le=3600)  # read timeout of one call
    decision_timeout_s: float = Field(120.0, gt=0, le=DAY)  # all calls and retries of one decision
    retries: int = Field(3, ge=0, le=20)  # of a transient error (429, 5xx, timeout), within the deadline
    breaker_after: int = Field(2, ge=1, le=1000)  # consecutive decisions the API could not answer
    breaker_cooldown_s: float | None = Field(None, gt=0, le=YEAR)  # None: stop calling it for the rest of the run


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    target: Target
    backend: str = "sim"
    framework: str | None = None  # serve with this framework only (the ground that serves it, e.g. transformers)
    objective: str = "knee"
    approve: str = "ask"
    budget: Budget = Budget()
    slo: Slo = Slo()
    gate: Gate = Gate()
    measure: Measure = Measure()
    # Flags every candidate starts from (a deployment's constraints, e.g. --max-model-len); frameworks
    # that do not know a flag start without it.
    base_flags: dict = {}
    seed: int = Field(0, ge=0, le=SEED_MAX)
    planner: str = "builtin"
    llm_model: str | None = None  # the model OPENAI_BASE_URL serves (--planner llm|hybrid); never a key
    llm: LLMBounds = LLMBounds()
    # Trials at once (agent/parallel.py): above 1, or with a cluster address, the run's trials are Ray
    # tasks, one per node of that cluster (None: a local Ray instance of `workers` sim nodes).
    workers: int = Field(1, ge=1, le=1024)
    cluster: str | None = None
    notes: list[str] = []  # what check() chose for the user (e.g. a default workload shrunk to fit), and why

    def _check_checkpoints(self) -> None:
        """Several checkpoints, one per weight precision: each is the precision it is named (where its
        config.json says), a plain --model-path DIR beside them says its own, and no precision has two."""
        from tools.models import PRECISIONS, checkpoint_precision
        t = self.target
        if t.checkpoints and self.backend == "sim":
            raise BadInput("--model-path PRECISION=DIR is for real backends (local, docker): the sim serves "
                           "every precision without a checkpoint")
        for w, d in t.checkpoints.items():
            if w not in PRECISIONS:
                raise unknown("--model-path precision", w, PRECISIONS)
            if not Path(d).is_dir():
                raise BadInput(f"--model-path {w}={d!r} is not a directory")
            if (got := checkpoint_precision(d)) not in (None, w):
                raise BadInput(f"--model-path {w}={d!r}: its config.json holds {got} weights, not {w}")
        if t.checkpoints and t.model_path is not None:
            got = checkpoint_precision(t.model_path)
            if got is None:
                raise BadInput(f"--model-path {t.model_path!r}: its weight precision is not known from its "
                               f"config.json; name it beside the others: --model-path PRECISION=DIR")
            if got in t.checkpoints:
                raise BadInput(f"--model-path {t.model_path!r} and --model-path {got}={t.checkpoints[got]!r} "
                               f"are both {got} checkpoints: give one")

    def check(self) -> "RunConfig":
        """Raise BadInput naming the bad value and what is allowed (the CLI exits 2)."""
        if self.backend not in BACKENDS:
            raise unknown("backend", self.backend, BACKENDS)
        if self.framework is not None:
            from tools.frameworks import EXTRA, NAMES
            if self.framework not in NAMES + EXTRA:
                raise unknown("framework", self.framework, NAMES + EXTRA)
        if self.objective not in OBJECTIVES:
            raise unknown("objective", self.objective, OBJECTIVES)
        if self.approve not in APPROVE:
            raise unknown("approval policy", self.approve, APPROVE)
        if (self.workers > 1 or self.cluster) and importlib.util.find_spec("ray") is None:
            raise BadInput(f"--workers {self.workers}" + (f" --ray {self.cluster}" if self.cluster else "")
                           + " runs trials on Ray, which is not installed here: pip install 'inferloop[cluster]'")
        if self.planner not in PLANNERS:
            raise unknown("planner", self.planner, PLANNERS)
        if self.planner != "builtin" and not self.llm_model:
            raise BadInput(f"--planner {self.planner} needs --llm-model NAME (the model OPENAI_BASE_URL serves)")
        from tools.evals import HARNESSES, TASKS
        if self.measure.harness not in HARNESSES:
            raise unknown("measure.harness", self.measure.harness, HARNESSES)
        if self.measure.harness == "lm-eval" and self.backend == "sim":
            raise BadInput("measure.harness lm-eval scores a real server over HTTP; the sim has none "
                           "(use --backend local or docker)")
        own = self.measure.eval_tasks if self.measure.harness == "inferloop" else None  # lm-eval checks its own
        for t in own or []:
            if t not in TASKS or t == "parity":  # parity needs a reference server: not a gate task
                raise unknown("eval task", t, [x for x in TASKS if x != "parity"])
        if self.measure.eval_tasks == []:
            raise BadInput("measure.eval_tasks is empty: name at least one task, or leave it out for all")
        if self.budget.trials is None and self.budget.time_s is None:
            raise BadInput("a run needs a budget: --budget TRIALS or --time-budget SECONDS")
        if self.target.model_path is not None and not Path(self.target.model_path).is_dir():
            raise BadInput(f"--model-path {self.target.model_path!r} is not a directory")
        self._check_checkpoints()
        py = self.target.python
        if py is not None and not (Path(py).is_file() and os.access(py, os.X_OK)):
            raise BadInput(f"--python {py!r} is not an executable file (give the interpreter that has the framework)")
        if self.target.images and self.backend != "docker":
            raise BadInput(f"--image is for --backend docker (this run's backend is {self.backend})")
        for fw, fpy in self.target.pythons.items():
            if not (Path(fpy).is_file() and os.access(fpy, os.X_OK)):
                raise BadInput(f"--python {fw}={fpy!r}: not an executable file (give the interpreter that has {fw})")
        if self.target.pythons and self.backend != "local":
            raise BadInput(f"--python FRAMEWORK=PATH is for --backend local, not {self.backend}")
        card, hw = resolve_target(self.target)
        gpus_per_trial(self, hw)  # more trials at once than this host has devices for: refused here
        from agent.base_flags import check_base_flags
        check_base_flags(self.base_flags, hw)
        from agent.workload_fit import fit
        self.notes = [*self.notes, *(n for n in fit(self.measure, self.gate, card, hw, self.base_flags, self.target.model)
                                     if n not in self.notes)]
        return self


def gpus_per_trial(cfg: RunConfig, hw) -> int:
    """The accelerators each of `workers` trials at once gets when they share this one host (a local
    Ray instance driving real servers): the ground's own per-trial count (its planner scope's
    `gpus`), else the node's devices split that many ways. 0: nothing to split (one trial at a time,
    a cluster whose every node runs one trial on all of its devices, the sim and other grounds
    without devices, a CPU host)."""
    if cfg.workers <= 1 or cfg.cluster or os.environ.get("RAY_ADDRESS") or cfg.backend not in ("local", "docker"):
        return 0
    from sandboxes import registry
    scope_gpus = (registry.get(cfg.backend, cfg.framework).planner_scope or {}).get("gpus")
    node = int(getattr(hw, "gpus_per_node", 0) or 0)
    if hw.vendor == "cpu" or node < 1:
        return 0
    per = scope_gpus or node // cfg.workers
    if per < 1:
        raise BadInput(f"--workers {cfg.workers} on one {hw.name} host of {node} GPUs: each trial needs devices of "
                       f"its own; use --workers {node} or fewer, or put the trials on a cluster (--ray ADDRESS)")
    return per


def resolve_target(t: Target):
    """The model card and hardware profile, or BadInput naming what is known."""
    from tools import hardware, models
    try:
        card = models.get_model(t.model)
    except BadInput:
        raise
    except LookupError:
        raise unknown("model", t.model, getattr(models, "MODELS", {}).keys()) from None
    try:
        hw = hardware.get_hardware(t.hw)
    except BadInput:
        raise
    except LookupError:
        raise unknown("hardware", t.hw, getattr(hardware, "HARDWARE", {}).keys()) from None
    return card, hw


def parse_budget(value: str | int | None) -> int | None:
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise BadInput(f"--budget must be a whole number of trials >= 1, got {value!r}") from None
    hi = TRIALS_MAX
    if not 1 <= n <= hi:
        raise BadInput(f"--budget must be >= 1 trial and <= {hi}, got {n}")
    return n


def budget_from(trials: int | None, secs: float | None) -> "Budget":
    """The command line's budget (parse_budget, parse_time_budget): a time budget given alone
    drops the default trial cap; neither given keeps the defaults."""
    if not (trials or secs):
        return Budget()
    return Budget(trials=trials if trials or secs is None else None, time_s=secs)


def parse_time_budget(value: str | None) -> float | None:
    """'90m', '2h', '3600s' or plain seconds."""
    if value is None:
        return None
    s = str(value).strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}.get(s[-1:], None)
    num = s[:-1] if mult else s
    try:
        secs = float(num) * (mult or 1)
    except ValueError:
        raise BadInput(f"--time-budget must look like 3600, 90m or 2h, got {value!r}") from None
    if not (math.isfinite(secs) and 0 < secs <= YEAR):  # nan compares false with everything: test it
        raise BadInput(f"--time-budget must be > 0 and at most a year ({YEAR:.0f} s), got {value!r}")
    return secs

