"""The built-in planner: walks the phases framework -> precision -> speculative decoding ->
flags -> parallelism -> MoE kernels without knowing the answer.

Candidates come from the frameworks' flag schemas (FlagSpec.search) and the model card (MTP
layers -> the framework's speculative flags; MoE -> expert parallelism and kernel tuning); numeric
flags are searched with Optuna TPE; a failed launch's Diagnosis is answered from the fix
catalogue before the phase moves on. A fix a human rejected is never proposed again.
"""
from __future__ import annotations

from typing import Iterator

from agent.planners import search
from agent.planners.base import PHASES, PatchProposal, PlanContext, Proposal, in_order
from agent.planners.fixes import fixes_for
from agent.planners.spec_flags import SPEC_WORDS, spec_flag_sets
from tools import moe
from tools.candidate import Candidate, Parallel
from tools.errors import BadInput, unknown
from tools.models import PRECISIONS


class BuiltinPlanner:
    name = "builtin"

    def __init__(self, *, search_trials: int = 6, patience: int = 3, screen_choices: int = 3, fixes=None,
                 phases: tuple[str, ...] | None = None, gpus: int | None = None,
                 weights: tuple[str, ...] | None = None):
        self.search_trials, self.patience = search_trials, patience
        self.screen_choices = screen_choices
        # The phases this ground can vary (a one-GPU, one-checkpoint ground has no precision,
        # parallelism or MoE-tuning phase) and the GPUs the baseline may use (None: the node's).
        if phases is not None:
            bad = [ph for ph in phases if ph not in PHASES]
            if bad or not phases:
                raise unknown("planner phase", bad[0] if bad else tuple(phases), PHASES)
        if gpus is not None and gpus < 1:
            raise BadInput(f"the planner's gpus must be >= 1, got {gpus}")
        self.phases = tuple(ph for ph in PHASES if ph in (phases or PHASES))
        self.gpus = gpus
        # The weight precisions the ground has checkpoints of (the first is the baseline's; None:
        # every one, as on the sim): a real node serves the checkpoint it was given.
        bad = [w for w in weights or () if w not in PRECISIONS]
        if bad:
            raise unknown("weight precision", bad[0], PRECISIONS)
        self.weights = tuple(weights) if weights else None
        # The fix catalogue (fixes.fixes_for's signature); injectable so a run or a test can use a
        # smaller or larger catalogue without patching the module.
        self.fixes = fixes or fixes_for

    # ---- entry point ---------------------------------------------------------------------
    def propose(self, ctx: PlanContext) -> Proposal:
        if not ctx.trials:
            return self._baseline(ctx)
        phase = ctx.phase
        tried = ctx.tried_keys()
        fix = self._answer_failures(ctx, phase, tried)
        if fix is not None:
            return fix
        for ph in PHASES[PHASES.index(phase):]:
            for p in self.candidates(ctx, ph):
                if p.kind == "moe_tune" or p.candidate.key() not in tried:
                    return p
        return Proposal(kind="stop", phase=phase, description="every phase is exhausted",
                        rationale="no untried candidate is left in any phase")

    def candidates(self, ctx: PlanContext, phase: str) -> Iterator[Proposal]:
        """The phase's proposals in order; none for a phase this planner does not walk."""
        return getattr(self, f"_{phase}")(ctx) if phase in self.phases else iter(())

    def _baseline(self, ctx: PlanContext) -> Proposal:
        fw = ctx.frameworks[0]
        w = self.weights[0] if self.weights else "bf16"
        c = Candidate(framework=fw, weights=w, parallel=Parallel(tp=self._full_tp(ctx)),
                      flags=ctx.start_flags(fw), env=ctx.start_env(fw))
        what = "default flags" + (f" + {c.flags}" if c.flags else "")
        return Proposal(kind="config", phase="framework", description=f"baseline: {fw}, {w}, {what}",
                        rationale="measure the starting point with the framework's defaults",
                        candidate=c)

    def _full_tp(self, ctx: PlanContext) -> int:
        n = self.gpus or max(ctx.hw.gpus_per_node, 1)
        heads = ctx.card.num_attention_heads
        while n > 1 and heads % n:
            n //= 2
        return n

    # ---- failures -> fixes ---------------------------------------------------------------
    def _answer_failures(self, ctx: PlanContext, phase: str, tried: set[str]) -> Proposal | None:
        for t in ctx.unanswered_failures():
            cand = Candidate.model_validate(t["candidate"])
            fw = ctx.framework(cand.framework)
            try:
                tree = ctx.source_tree(cand.framework)
            except Exception:  # a sandbox without a source tree: flag/env fixes only
                tree = None
            notes = []
            for fx in self.fixes(t["diagnoses"], cand, card=ctx.card, hw=ctx.hw, tree=tree, framework=fw):
                if fx.name in ctx.rejected or fx.key in ctx.rejected:
                    notes.append(f"{fx.name} was rejected before ({ctx.rejected.get(fx.key) or ctx.rejected.get(fx.name)})")
                    continue
                why = f"trial {t['id']} failed: {fx.why}"
                if fx.kind == "patch":
                    pid = ctx.approved.get(fx.key)
                    if pid is not None and pid in cand.patches:
                        notes.append(f"{fx.name} ({pid}) was applied and the failure remains")
                        continue
                    if pid is not None:  # approved earlier for an identical failure: reuse, no new review
                        new = cand.model_copy(update={"patches": [*cand.patches, pid]})
                        if new.key() not in tried:
                            return Proposal(kind="config", phase=phase, fixes_trial=t["id"],
                                            description=f"retry with approved patch {pid} ({fx.name})",
                                            rationale=why, candidate=new)
                        continue
                    return Proposal(kind="patch", phase=phase, fixes_trial=t["id"], rationale=why,
                                    description=f"patch {cand.framework}: {fx.title}",
                                    candidate=cand,
                                    patch=PatchProposal(fix=fx.name, key=fx.key, framework=cand.framework,
                                                        diff=fx.diff, files=fx.files, title=fx.title, why=fx.why))
                flags = {k: v for k, v in {**cand.flags, **fx.flags}.items() if v is not None}
                new = cand.model_copy(update={"flags": flags, "env": {**cand.env, **fx.env}})
                if new.key() not in tried:
                    return Proposal(kind="config", phase=phase, fixes_trial=t["id"], rationale=why,
                                    description=f"retry with {fx.name}: {fx.flags or fx.env}",
                                    candidate=new)
        return None

    # ---- phases --------------------------------------------------------------------------
    def _framework(self, ctx: PlanContext) -> Iterator[Proposal]:
        base = Candidate.model_validate(ctx.trials[0]["candidate"])
        for fw in ctx.frameworks:
            if fw != base.framework:
                c = Candidate(framework=fw, weights=base.weights, parallel=base.parallel, flags=ctx.start_flags(fw),
                              env=ctx.start_env(fw))
                yield _p("framework", f"framework {fw} with default flags", c,
                         "compare serving frameworks on the same weights and parallelism")

    def _precision(self, ctx: PlanContext) -> Iterator[Proposal]:
        inc = ctx.incumbent_candidate()
        if inc is None:
            return
        tf = ctx.hw.tflops
        here = PRECISIONS[inc.weights].bytes_per_weight
        start = PRECISIONS[ctx.trials[0]["candidate"]["weights"]].bytes_per_weight
        for p in sorted(PRECISIONS.values(), key=lambda p: p.bytes_per_weight):
            if p.bytes_per_weight >= start or p.bytes_per_weight > here or p.compute not in tf \
                    or (self.weights is not None and p.name not in self.weights):
                continue
            if p.bytes_per_weight < here:
                yield _p("precision", f"{p.name} weights on {inc.framework}",
                         inc.model_copy(update={"weights": p.name}),
                         f"{ctx.hw.name} runs {p.compute} natively; fewer weight bytes per token")
            # Quantized kernels and checkpoint loaders differ per framework, so the full-precision
            # ranking says little about this one (and the incumbent's framework may not load it at
            # all): try it on every other framework that served this model and was not turned down
            # for accuracy.
            failed = any(t["phase"] == "precision" and t["verdict"] == "failed" and t["candidate"]["weights"] == p.name
                         and t["candidate"]["framework"] == inc.framework for t in ctx.trials)
            for fw, best in _viable_frameworks(ctx).items():
                if fw != inc.framework:
                    yield _p("precision", f"{p.name} weights on {fw}" + (f" ({inc.framework} could not load them)"
                                                                          if failed else ""),
                             best.model_copy(update={"weights": p.name}),
                             f"{fw} served this model at {best.weights}; its {p.name} path may rank differently")


    def _speculative(self, ctx: PlanContext) -> Iterator[Proposal]:
        inc = ctx.incumbent_candidate()
        if inc is None:
            return
        fw = ctx.framework(inc.framework)
        patches = list(inc.patches)
        for t in ctx.trials:  # fixes approved in this phase stay with speculative candidates
            pid = t.get("patch_id")
            if t["phase"] == "speculative" and pid and pid in ctx.approved.values() and pid not in patches \
                    and t["candidate"]["framework"] == inc.framework:
                patches.append(pid)
        mtp = ctx.card.mtp_layers > 0
        measured = [t["candidate"]["flags"] for t in ctx.trials if t["phase"] == "speculative"
                    and t["verdict"] in ("kept", "reverted") and t["candidate"]["framework"] == inc.framework]
        for flags, what in spec_flag_sets(fw, mtp):
            if any(all(f.get(k) == v for k, v in flags.items()) for f in measured):
                continue  # this drafting setting was measured already
            c = inc.model_copy(update={"flags": {**inc.flags, **flags}, "patches": patches})
            yield _p("speculative", what, c, "the model has MTP layers: draft with them" if mtp
                     else "no MTP layers: try n-gram drafting")

    def _flags(self, ctx: PlanContext) -> Iterator[Proposal]:
        inc = ctx.incumbent_candidate()
        if inc is None:
            return
        fw = ctx.framework(inc.framework)
        vendor = ctx.hw.vendor
        tunable = {n: s for n, s in fw.flags.items() if s.search and not any(w in n for w in SPEC_WORDS)
                   and n not in fw.parallel_flag_names() and (not s.vendors or vendor in s.vendors)}
        runs = [t for t in ctx.trials if t["phase"] == "flags"]
        for name, s in tunable.items():  # screen: one categorical / switch flag at a time
            if "choices" not in s.search:
                continue
            # At most screen_choices settings of one flag unless one of them won: a switch that keeps
            # losing is not worth the rest of its list.
            tries = [t for t in ctx.trials if t["phase"] == "flags" and t["proposal"].get("screen") == name]
            if len(tries) >= self.screen_choices and not any(t["verdict"] == "kept" for t in tries):
                continue
            cur = inc.flags.get(name, s.default)
            # Not worth a launch: the current setting; settings measured already (those screened and
            # those they were measured against, so a kept switch is not screened back to the value it
            # beat); "off" where unset already means off; a value that defeats what the workload uses.
            skip = {repr(cur)} | {repr(f.get(name, s.default)) for t in runs if not t["proposal"].get("params")
                                  for f in (t["candidate"]["flags"], _flags_of(ctx, t["incumbent_id"]))}
            if cur is None and not s.negatable:
                skip.add(repr(False))
            if s.defeats and s.defeats[1] in _workload_features(ctx):
                skip.add(repr(s.defeats[0]))
            for choice in [c for c in s.search["choices"] if repr(c) not in skip][:self.screen_choices]:
                c = _set_flag(inc, name, choice, s.default, negatable=s.negatable)
                p = _p("flags", f"{name} {choice}", c, f"screen {name} (schema choices {s.search['choices']})")
                p.screen = name
                yield p
        numeric = {n: s for n, s in tunable.items() if "choices" not in s.search}
        dists = search.distributions(numeric)
        found = [t for t in runs if t["proposal"].get("params")]
        # points still being measured (several trials at once) are pending, not failures
        open_ = [t.get("status") in ("proposed", "running") for t in found]
        pending = [t["proposal"]["params"] for t, o in zip(found, open_) if o]
        hist = [(t["proposal"]["params"], _objective(ctx, t)) for t, o in zip(found, open_) if not o]
        # A search that has not beaten the incumbent in `patience` launches in a row has stalled:
        # the launches are worth more in the next phase (the hybrid planner asks the LLM here).
        # (a point decided against an incumbent kept while it ran, not the one it was built on, was
        # outrun, not beaten: it does not count; one trial at a time has none)
        against = {z["id"]: prev for z, prev in in_order(ctx.trials)}
        counted = [t for t, o in zip(found, open_) if o or t["verdict"] == "kept" or t["incumbent_id"] == against[t["id"]]]
        since = len(counted) - max((i + 1 for i, t in enumerate(counted) if t["verdict"] == "kept"), default=0)
        if not dists or len(found) >= self.search_trials or since >= self.patience:
            return
        tried = {search.key(p) for p in [*(p for p, _ in hist), *pending]}
        params = search.ask(dists, hist, seed=ctx.config.seed, tried=tried, pending=pending)
        if params is None:
            return
        c = inc
        for k, v in params.items():
            c = _set_flag(c, k, v, numeric[k].default)
        p = _p("flags", "TPE: " + ", ".join(f"{k} {v}" for k, v in params.items()), c,
               f"Optuna TPE over {', '.join(dists)} ({len(hist)} points so far)")
        p.params = params
        yield p

    def _parallel(self, ctx: PlanContext) -> Iterator[Proposal]:
        inc = ctx.incumbent_candidate()
        if inc is None:
            return
        n = max(ctx.hw.gpus_per_node, 1)
        heads = ctx.card.num_attention_heads
        is_moe = ctx.card.is_moe
        oom = [(t["candidate"]["parallel"]["tp"], t["candidate"]["parallel"].get("ep", False))
               for t in ctx.trials if t["phase"] == "parallel" and t["verdict"] == "failed"
               and any(d["kind"] == "oom" for d in t["diagnoses"])]
        tps = [t for t in (n >> i for i in range(8)) if t >= 1 and n % t == 0 and heads % t == 0]
        # With trials side by side (--workers), an MoE model whose incumbent runs fallback kernels has
        # each layout tuned as it is measured, its own layout too: the tuner adds its time to each
        # trial, but the nodes run them at once, and the layouts are ranked on the kernels they will
        # run (tuning changes which one wins), so the moe phase's tune-then-retune rounds are not
        # needed. One trial at a time that would be a tuner run per layout, one after another: there
        # the moe phase tunes the winner, then the runners-up that lost on the fallback kernels.
        tune = ctx.config.workers > 1 and is_moe and (bool(inc.moe_configs) or _falls_back(ctx.incumbent))
        layouts = [inc.parallel] if tune and not inc.moe_configs else []
        fw = ctx.framework(inc.framework)
        for tp in sorted(set(tps), reverse=True):
            for ep in ([False, True] if is_moe and tp > 1 else [False]):
                par = Parallel(tp=tp, dp=n // tp, ep=ep)
                if par != inc.parallel and not any(tp < t and ep == e for t, e in oom):
                    layouts.append(par)
        for par in layouts:
            why = ("the current layout" if par == inc.parallel else "trade tensor parallelism for data-parallel replicas"
                   + (" with expert parallelism" if par.ep else ""))
            if not tune:
                yield _p("parallel", par.label, inc.model_copy(update={"parallel": par}), why)
            elif not _tuned_on(ctx, inc.framework, par):  # a tune's candidate changes once tuned: not in `tried`
                yield Proposal(kind="moe_tune", phase="parallel", candidate=moe.on_layout(inc, par, fw),
                               description=f"{par.label} with MoE kernels tuned for it",
                               rationale=f"{why}; ranked on its own tuned kernels, the layouts side by side")

    def _moe(self, ctx: PlanContext) -> Iterator[Proposal]:
        inc, t = ctx.incumbent_candidate(), ctx.incumbent
        if inc is None or not ctx.card.is_moe:
            return
        warn = [d for d in t["diagnoses"] if d["kind"] == "moe_default_config"]
        if warn and not _tuned_on(ctx, inc.framework, inc.parallel) and not inc.moe_configs:
            yield Proposal(kind="moe_tune", phase="moe", candidate=inc,
                           description=f"tune MoE kernels for {ctx.card.name} on {inc.parallel.tp}-way shards",
                           rationale=f"the incumbent's log warns: {warn[0]['evidence'][0] if warn[0]['evidence'] else warn[0]['message']}")
        # Kernel tuning changes which layout wins: retune the layouts that launched but lost while
        # their kernels were on the fallback path, best first. Once a tune is kept; or, with trials
        # running side by side (agent/parallel.py), while the first tune is still out: the retunes
        # are the same candidates either way (the incumbent's configuration on the lost layout),
        # decided after it in proposal order, so they take nodes that would otherwise wait a round.
        tuned = [x for x in ctx.trials if x["kind"] == "moe_tune"]
        if not any(x["verdict"] == "kept" or x["status"] != "done" for x in tuned):
            return
        fw = ctx.framework(inc.framework)
        lost = [x for x in ctx.trials if x["phase"] == "parallel" and x["verdict"] == "reverted" and _falls_back(x)]
        lost.sort(key=lambda x: -(_objective(ctx, x) or 0.0))
        for x in lost:
            par = Parallel.model_validate(x["candidate"]["parallel"])
            if any(y["candidate"]["parallel"] == par.model_dump() for y in tuned) or par == inc.parallel:
                continue
            yield Proposal(kind="moe_tune", phase="moe", candidate=moe.on_layout(inc, par, fw),
                           description=f"tune MoE kernels for {par.label}",
                           rationale=f"trial {x['id']} lost on the fallback MoE path; tuned kernels may change the ranking")


def _set_flag(c: Candidate, name: str, value, default, negatable: bool = False) -> Candidate:
    flags = dict(c.flags)  # False is only worth writing where it turns a default-on switch off
    if value == default or (value is False and not negatable) or value is None:
        flags.pop(name, None)
    else:
        flags[name] = value
    return c.model_copy(update={"flags": flags})


def _falls_back(t: dict) -> bool:
    """The trial's log says its MoE layers ran the default (untuned) kernel config."""
    return any(d["kind"] == "moe_default_config" for d in t["diagnoses"])


def _tuned_on(ctx: PlanContext, framework: str, par: Parallel) -> bool:
    return any(x["kind"] == "moe_tune" and x["candidate"]["framework"] == framework
               and x["candidate"]["parallel"] == par.model_dump() for x in ctx.trials)


def _p(phase: str, what: str, c: Candidate, why: str) -> Proposal:
    return Proposal(kind="config", phase=phase, description=what, rationale=why, candidate=c)


def _workload_features(ctx: PlanContext) -> set[str]:
    """What the benchmark workload relies on that a flag could switch off (FlagSpec.defeats)."""
    return {"prefix_reuse"} if ctx.config.measure.workload.prefix_hit > 0 else set()


def _flags_of(ctx: PlanContext, trial_id: int | None) -> dict:
    t = next((t for t in ctx.trials if t["id"] == trial_id), None)
    return t["candidate"]["flags"] if t else {}


def _objective(ctx: PlanContext, t: dict) -> float | None:
    from agent.decide import objective_value
    if t["verdict"] == "failed":
        return None
    ms = [m["data"] for m in ctx.measurements(t["id"]) if m["role"] == "candidate"]
    if not ms:
        return None
    return max(objective_value(m, ctx.config.objective) for m in ms)


def _viable_frameworks(ctx: PlanContext) -> dict[str, Candidate]:
    """Frameworks that launched this model and were not reverted for an eval regression:
    framework -> its last launched candidate. A framework whose own trial is still out counts until
    it is back: only a parallel run asks this before the framework phase is measured (its idle nodes
    take the precision phase, agent/speculate.py), and it then sends the candidates in the order one
    trial at a time proposes them, not only the incumbent framework's."""
    out: dict[str, Candidate] = {}
    bad = {t["candidate"]["framework"] for t in ctx.trials if t["reason_code"] == "eval_regression"
           and t["phase"] == "framework"}
    for t in ctx.trials:
        fw = t["candidate"]["framework"]
        out_now = t["phase"] == "framework" and t["status"] != "done"  # (a failed launch ends its trial)
        if (t["outcome"] == "launched" or out_now) and fw not in bad:
            out[fw] = Candidate.model_validate(t["candidate"])
    return out
