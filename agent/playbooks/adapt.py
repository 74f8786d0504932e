"""Adapting a playbook step to a new model card and hardware: check its conditions, render its
templates. Pure functions; the replay planner (agent/playbooks/replay.py) calls them."""
from __future__ import annotations

from dataclasses import dataclass, field

from agent.playbooks.schema import CARD_VARS, TEMPLATE
from tools import frameworks as fwmod
from tools.candidate import Candidate, Parallel


def template_vars(card, hw) -> dict[str, int]:
    out = {k: int(getattr(card, k, 0) or 0) for k in CARD_VARS}
    out["gpus_per_node"] = int(getattr(hw, "gpus_per_node", 1) or 1)
    return out


def render(value, vars: dict[str, int]):
    """`{name}` / `{name//k}` / `{name*k}` / `{name+k}` / `{name-k}` -> the number (a string that is
    exactly one placeholder becomes an int); anything else passes through. No eval, ever."""
    if isinstance(value, dict):  # JSON-valued flags (vLLM's --speculative-config)
        return {k: render(v, vars) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, vars) for v in value]
    if not isinstance(value, str):
        return value

    def one(m) -> int:
        name, op, k = m.group(1), m.group(2), m.group(3)
        if name not in vars:
            raise ValueError(f"template names {name!r}, which this model/hardware does not define")
        x = vars[name]
        if op is None:
            return x
        k = int(k)
        if op == "//":
            if k == 0:
                raise ValueError(f"template {m.group(0)!r} divides by zero")
            return x // k
        return {"*": x * k, "+": x + k, "-": x - k}[op]

    m = TEMPLATE.fullmatch(value)
    if m:
        return one(m)
    return TEMPLATE.sub(lambda m: str(one(m)), value)


@dataclass
class Adapted:
    """A step made concrete for one model and node, or the reason it does not apply."""
    step: object  # agent.playbooks.schema.Step
    skip: str | None = None
    framework: str | None = None
    weights: str | None = None
    parallel: Parallel | None = None
    flags: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    patches: list[dict] = field(default_factory=list)  # [{framework, fix, params (rendered), diff}]
    moe_shape: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what changed relative to the recording


def when_fails(w, card, hw) -> str | None:
    """Why these conditions do not hold on this model and hardware (every failing one), or None."""
    name, hwn = getattr(card, "name", "this model"), getattr(hw, "name", "this hardware")
    out = []
    if w.architectures is not None and card.architecture not in w.architectures:
        out.append(f"{name} is {card.architecture}; the step applies to {', '.join(w.architectures)}")
    if w.is_moe is not None and bool(card.is_moe) != w.is_moe:
        out.append(f"{name} is {'' if card.is_moe else 'not '}a mixture-of-experts model")
    mtp = int(getattr(card, "mtp_layers", 0) or 0) > 0
    if w.has_mtp is not None and mtp != w.has_mtp:
        out.append(f"{name} has {'MTP layers' if mtp else 'no MTP (NextN) draft layers'}; the step needs "
                   f"{'MTP layers' if w.has_mtp else 'none'}")
    if w.vendor is not None and hw.vendor not in w.vendor:
        out.append(f"{hwn} is {hw.vendor}; the step is for {'/'.join(w.vendor)} only"
                   + (" (ROCm)" if w.vendor == ["amd"] else ""))
    if w.hw_compute is not None and w.hw_compute not in (getattr(hw, "tflops", {}) or {}):
        out.append(f"{hwn} has no native {w.hw_compute} compute")
    return "; ".join(out) or None


def conditions(step, card, hw, frameworks: tuple[str, ...] | None = None) -> str | None:
    """Why the step does not apply here, or None. (after_diagnosis is checked at replay time.)"""
    why = when_fails(step.when, card, hw)
    if why:
        return why
    fws = [step.framework] if step.framework else []
    fws += [p.framework for p in step.patches]
    if frameworks is not None:
        for fw in fws:
            if fw not in frameworks:
                return f"framework {fw} is not available here (available: {', '.join(frameworks)})"
    return None


def adapt(step, card, hw, frameworks: tuple[str, ...] | None = None) -> Adapted:
    """Conditions checked and templates rendered against this model card and hardware."""
    why = conditions(step, card, hw, frameworks)
    if why:
        return Adapted(step=step, skip=why)
    vars = template_vars(card, hw)
    a = Adapted(step=step, framework=step.framework, weights=step.weights)
    try:
        if step.parallel is not None:
            tp, dp = int(render(step.parallel.tp, vars)), int(render(step.parallel.dp, vars))
            n = vars["gpus_per_node"]
            if tp < 1 or dp < 1 or tp * dp > n:
                return Adapted(step=step, skip=f"TP{tp} x DP{dp} does not fit a {n}-GPU node")
            if card.num_attention_heads % tp:
                return Adapted(step=step, skip=f"{card.num_attention_heads} attention heads do not split {tp} ways")
            a.parallel = Parallel(tp=tp, dp=dp, ep=step.parallel.ep and bool(card.is_moe))
            if isinstance(step.parallel.tp, str):
                a.notes.append(f"tp {step.parallel.tp} = {tp}")
        for k, v in step.flags.items():
            a.flags[k] = render(v, vars)
            if isinstance(v, str) and a.flags[k] != v:
                a.notes.append(f"{k} {v} = {a.flags[k]}")
        a.env = {k: str(render(v, vars)) for k, v in step.env.items()}
        for p in step.patches:
            why = when_fails(p.when, card, hw)
            if why:
                a.notes.append(f"patch {p.fix} left out: {why}")
                continue
            params = {k: render(v, vars) for k, v in p.params.items()}
            for k, v in p.params.items():
                if isinstance(v, str) and params[k] != v:
                    a.notes.append(f"patch {p.fix}: {k} {v} = {params[k]}")
            after = p.when.after_diagnosis or (step.when.after_diagnosis if len(step.patches) == 1 else None)
            a.patches.append({"framework": p.framework, "fix": p.fix, "params": params, "diff": p.diff,
                              "after": after})
        if step.moe is not None:
            a.moe_shape = {k: render(v, vars) for k, v in step.moe.shape.items()}
    except (ValueError, TypeError) as e:
        return Adapted(step=step, skip=f"cannot render its parameters for {card.name}: {e}")
    return a


def build_candidate(inc: Candidate, a: Adapted, start=None) -> Candidate:
    """The incumbent with the step applied. `start(framework) -> (flags, env)`: what a candidate of
    another framework starts from on this run (PlanContext.start_flags / start_env)."""
    c = inc
    if a.framework and a.framework != c.framework:  # another framework: the old one's flags do not apply
        flags, env = start(a.framework) if start else ({}, {})
        c = Candidate(framework=a.framework, weights=c.weights, parallel=c.parallel, flags=flags, env=env)
    upd: dict = {}
    if a.weights:
        upd["weights"] = a.weights
    if a.parallel is not None:
        upd["parallel"] = a.parallel
    if a.flags:
        flags = dict(c.flags)
        fw = fwmod.get(c.framework)
        if hasattr(fw, "translate"):  # a playbook recorded on another version: its renamed flags
            renamed, notes = fw.translate({k: v for k, v in a.flags.items() if v is not None})
            if notes:
                a.notes.extend(notes)  # recorded with the step's other adaptations
                a.flags = {**{k: v for k, v in a.flags.items() if v is None}, **renamed}
        for k, v in a.flags.items():
            if v is None:
                flags.pop(k, None)
            else:
                flags[k] = v
        upd["flags"] = flags
    if a.env:
        upd["env"] = {**c.env, **a.env}
    return c.model_copy(update=upd) if upd else c
