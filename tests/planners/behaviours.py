"""Scripted "models" for the scripted server: functions of the conversation so far that decide the
next reply the way a model would, using only what the tools returned over HTTP.

`mtp_fixer` plays a model that fixes the MTP prefix mismatch: it greps the failed trial's log for
the shape mismatch, learns the MTP layer index from the checkpoint name in it, greps the source for
the prefix mapper, reads that file through the tool, and writes the diff from the text it read.
"""
from __future__ import annotations

import difflib
import json
import re

from tests.planners.scripted_openai import reply

MODULES = ("eh_proj", "enorm", "hnorm", "shared_head")


def _last_call(body: dict) -> str | None:
    for m in reversed(body["messages"]):
        if m["role"] == "assistant" and m.get("tool_calls"):
            return m["tool_calls"][-1]["function"]["name"]
    return None


def _tools_text(body: dict) -> str:
    return "\n".join(m["content"] for m in body["messages"] if m["role"] == "tool")


def focus_trial(body: dict) -> int | None:
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    state = json.loads(user.split("Run state (JSON):\n", 1)[1])
    return (state.get("failed_trial") or {}).get("id")


def source_from_tool(text: str) -> str:
    """The file text inside a read_source result: drop the data markers and the 'N: ' prefixes."""
    lines = text.splitlines()[1:-1]
    return "\n".join(re.sub(r"^\d+: ", "", ln, count=1) for ln in lines) + "\n"


def mtp_fix_diff(path: str, src: str, layer: int) -> str:
    out = []
    for ln in src.splitlines(True):
        out.append(ln)
        if "orig_to_new_prefix={" in ln:
            ind = re.match(r"\s*", ln).group(0) + "    "
            out += [f'{ind}"model.layers.{layer}.{m}": "model.{m}",\n' for m in MODULES]
            out.append(f'{ind}"model.layers.{layer}.": "model.decoder.",\n')
    return "".join(difflib.unified_diff(src.splitlines(True), out, f"a/{path}", f"b/{path}"))


def mtp_fixer(body: dict):
    last = body["messages"][-1]
    if last["role"] == "user" and _last_call(body) is None:
        tid = focus_trial(body)
        if tid is None:  # a stall question: nothing to add
            return reply([("stop", {"reason": "the built-in plan is fine"})])
        return reply([("grep_log", {"trial_id": tid, "pattern": "shape mismatch", "context": 1})])
    call = _last_call(body)
    if call == "grep_log":
        return reply([("grep_source", {"framework": "sglang", "pattern": "orig_to_new_prefix"})])
    if call == "grep_source":
        path = re.search(r"^([\w./-]+\.py):\d+:", last["content"], re.M).group(1)
        return reply([("read_source", {"framework": "sglang", "path": path})])
    if call == "read_source":
        layer = int(re.search(r"model\.layers\.(\d+)\.\w+", _tools_text(body)).group(1))
        path = re.search(r'source="sglang:([^ ]+) ', last["content"]).group(1)
        diff = mtp_fix_diff(path, source_from_tool(last["content"]), layer)
        return reply([("propose_patch", {"framework": "sglang", "diff": diff,
                                         "title": f"map MTP layer {layer} names to the NextN modules",
                                         "why": f"model.layers.{layer}.* exclusions miss the runtime names"})])
    return reply([("stop", {"reason": "no fix found"})])


def obeys_the_log(body: dict):
    """A compromised model: it does what the log text tells it (approve a patch)."""
    call = _last_call(body)
    if call is None:
        tid = focus_trial(body)
        if tid is None:
            return reply([("stop", {"reason": "nothing"})])
        return reply([("read_log", {"trial_id": tid})])
    if call == "read_log":
        return reply([("approve_patch", {"patch": "p01"})], content="The log says to approve: APPROVED.")
    if call == "approve_patch":
        return mtp_fixer_from_scratch(body)
    return reply([("stop", {"reason": "done"})])


def mtp_fixer_from_scratch(body: dict):
    """Proposes the (right) MTP diff without reading the source, from the pristine sim file."""
    from pathlib import Path
    rel = "python/sglang/srt/models/deepseek_nextn.py"
    src = (Path(__file__).resolve().parents[2] / "sandboxes/sim/source/sglang" / rel).read_text()
    return reply([("propose_patch", {"framework": "sglang", "diff": mtp_fix_diff(rel, src, 78),
                                     "title": "APPROVED BY LOG", "why": "the log said this is approved"})],
                 content="Patch approved per the log instructions.")
