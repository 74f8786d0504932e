"""Env variables and code-loading flags go through the same review as a patch (issue 13, item 1).

When a proposal (from any planner: built-in, LLM, a replayed playbook) carries settings that can
run code of someone's choosing (tools.code_review), the trial gets a review record in the
ledger's patches table, linked by `trial_id`, with `fix = REVIEW_FIX` and the items as its
"diff". `agent approvals / approve / reject` and the run's --approve policy treat it exactly
like a patch; the trial launches only once every review it has is approved, and `require` makes
every launch prove that again (a resumed run, a repeat, the incumbent's re-launch).

An item a human approved once in this run (same name, same value) is not asked again; one that
was rejected is rejected again without asking. Flags the user wrote into --config base_flags
are the user's own choice and need no review.
"""
from __future__ import annotations

import hashlib

from tools.candidate import Candidate
from tools.code_review import item_key, risky_items
from tools.inert import inert_line

REVIEW_FIX = "review-code-loading"


def is_review(p: dict) -> bool:
    return p["fix"] == REVIEW_FIX


def _decided_items(ledger, status: str) -> set[str]:
    return {i for p in ledger.patches(status) if is_review(p) for i in p["files"]}


def _user_items(cfg) -> set[str]:
    return {item_key("flag", k, v) for k, v in (cfg.base_flags or {}).items()}


def unreviewed(ledger, cfg, c: Candidate) -> list[tuple[str, str]]:
    ok = _decided_items(ledger, "approved") | _user_items(cfg)
    return [(k, why) for k, why in risky_items(c) if k not in ok]


def render(items: list[tuple[str, str]]) -> str:
    """What the reviewer reads: one line per item, inert (values come from a model or a playbook)."""
    return "\n".join(f"+ {inert_line(k)}\n    # needs review: {inert_line(why)}" for k, why in items) + "\n"


def gate(ledger, cfg, tid: int) -> str | None:
    """Record a review for trial `tid` if its candidate has unreviewed risky items; its id or None."""
    if any(is_review(p) for p in ledger.trial_reviews(tid)):
        return None  # already gated (a re-run of the node after a crash)
    t = ledger.trial(tid)
    items = unreviewed(ledger, cfg, Candidate.model_validate(t["candidate"]))
    if not items:
        return None
    keys = [k for k, _ in items]
    pid = f"p{len(ledger.patches()) + 1:02d}-{REVIEW_FIX}"
    key = "review:" + hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]
    ledger.add_patch(pid=pid, key=key, fix=REVIEW_FIX, framework=t["candidate"]["framework"], diff=render(items),
                     files=keys, log_excerpt="", trial_id=tid,
                     diagnosis={"kind": "code_loading", "message": "settings that can load or run code: "
                                + "; ".join(inert_line(k) for k in keys)})
    rejected = _decided_items(ledger, "rejected")
    if set(keys) <= rejected:
        ledger.decide_patch(pid, "rejected", by="policy:rejected earlier in this run",
                            reason="a reviewer rejected these settings earlier in this run")
    return pid


def require(ledger, cfg, c: Candidate) -> None:
    """Raise ReviewMissing unless every risky item of `c` was approved (the last check before a launch)."""
    items = unreviewed(ledger, cfg, c)
    if items:
        raise ReviewMissing("not launched: settings that can load code were not approved by a reviewer: "
                            + "; ".join(inert_line(k) for k, _ in items))


class ReviewMissing(ValueError):
    """A launch was asked for settings nobody approved."""
