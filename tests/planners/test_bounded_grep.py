"""Issue 13 item 7: the regexes an LLM passes to grep_log / grep_source are bounded in time and
size; under `re` these patterns backtrack for minutes (or forever) on one long line."""
import time

import pytest

from agent.planners.llm_tools import ToolError
from tests.planners.conftest import make_ctx
from tools import logs
from tools.bounded_grep import MAX_PATTERN, GrepBounded, grep_lines


@pytest.mark.parametrize("pattern,line", [(r"(x+x+)+y", "x" * 5000), (r"(a|aa)+$", "a" * 5000 + "b")])
def test_catastrophic_patterns_stop_at_the_deadline(pattern, line):
    t0 = time.monotonic()
    with pytest.raises(GrepBounded, match="stopped after"):
        grep_lines([line], pattern, seconds=0.5)
    assert time.monotonic() - t0 < 10


def test_ordinary_patterns_still_match_and_long_patterns_are_refused():
    assert logs.grep("a\nfoo()\nb", r"(\w|\w)+\(\)") == ["foo()"]
    with pytest.raises(GrepBounded, match="longer than"):
        grep_lines(["x"], "a" * (MAX_PATTERN + 1))


def test_llm_tools_turn_the_bound_into_a_tool_error(tmp_path):
    from agent.planners.llm_tools import ToolBox
    ctx = make_ctx(tmp_path / "run", log_text="x" * 5000)
    box = ToolBox(ctx=ctx, run_dir=tmp_path / "run")
    t0 = time.monotonic()
    with pytest.raises(ToolError, match="stopped after"):
        box.call("grep_log", {"trial_id": 2, "pattern": r"(x+x+)+y"})
    assert time.monotonic() - t0 < 15
