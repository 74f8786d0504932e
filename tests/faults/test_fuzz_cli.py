"""The CLI fuzzed with hypothesis: for every numeric option of optimize and estimate, and for
framework flags after `--`, values outside what is allowed (NaN, infinities, negatives, zero where
a positive is needed, absurdly large, not a number at all) exit 2 with the bad value named in the
one-line error; never a traceback, never exit 0 (issue 13 items 11, 12)."""
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SET = settings(max_examples=int(__import__("os").environ.get("INFERLOOP_FUZZ_EXAMPLES", "12")), deadline=None, database=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])
OPT = ["optimize", "--model", "glm-5.2", "--hw", "mi355x"]
EST = ["estimate", "--model", "glm-5.2", "--hw", "mi355x", "--framework", "sglang"]
NONFINITE = st.sampled_from(["nan", "inf", "-inf", "NaN", "+inf"])
JUNK = st.text(alphabet="abcxyz!@#%^&* \u202e\x1b", min_size=1, max_size=8).filter(lambda s: not s.strip().isdigit())


def _f(s: str) -> str:
    return repr(float(s)) if _is_float(s) else s


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _named(stderr: str, raw: str) -> bool:
    """The error names the value as typed, or as Python reads it (1e12 -> 1000000000000.0)."""
    from tools.inert import inert_line
    cands = {raw, inert_line(raw), repr(raw), inert_line(repr(raw))}
    if _is_float(raw):
        v = float(raw)
        cands |= {repr(v), str(v), f"{v:g}"} | ({str(int(v))} if math.isfinite(v) and v == int(v) else set())
    return any(c in stderr for c in cands)


def _check(agent, args, raw):
    r = agent(*args)
    assert r.returncode == 2, (args, r.returncode, r.stdout[-500:], r.stderr[-500:])
    assert "Traceback" not in r.stderr and _named(r.stderr, raw), (args, r.stderr)


BAD = {  # option -> values it must refuse
    ("opt", "--time-budget"): NONFINITE | st.sampled_from(["0", "-5", "-1m", "1e40", "9e9h"]) | JUNK,
    ("opt", "--budget"): st.integers(max_value=0).map(str) | st.integers(min_value=100_001).map(str) | JUNK,
    ("opt", "--seed"): st.integers(max_value=-1).map(str) | st.integers(min_value=2**32).map(str),
    ("est", "--rates"): NONFINITE | st.floats(max_value=0, allow_nan=False).map(str)
    | st.floats(min_value=1.01e6, allow_infinity=False).map(str),
    ("est", "--concurrency"): st.integers(max_value=0).map(str) | st.integers(min_value=100_001, max_value=10**12).map(str),
    ("est", "--ttft-slo"): NONFINITE | st.floats(max_value=0, allow_nan=False).map(str)
    | st.floats(min_value=3601, allow_infinity=False).map(str),
    ("est", "--input-len"): st.integers(max_value=0).map(str) | st.integers(min_value=10_000_001, max_value=10**15).map(str),
    ("est", "--prefix-hit"): NONFINITE | st.floats(min_value=1.001, allow_infinity=False).map(str)
    | st.floats(max_value=-0.001, allow_nan=False).map(str),
    ("est", "--seed"): st.integers(max_value=-1).map(str) | st.integers(min_value=2**32, max_value=2**62).map(str),
}


def _mk(cmd, opt):
    @SET
    @given(raw=BAD[(cmd, opt)])
    def t(agent, tmp_path, raw):
        base = OPT + ["--run-dir", str(tmp_path / "never")] if cmd == "opt" else EST
        _check(agent, base + [f"{opt}={raw}"], raw)
        assert not (tmp_path / "never").exists()
    t.__name__ = f"test_{cmd}_{opt.strip('-').replace('-', '_')}_refuses_bad_values"
    return t


for (cmd, opt) in BAD:
    globals()[f"test_{cmd}_{opt.strip('-').replace('-', '_')}"] = _mk(cmd, opt)


@SET
@given(raw=NONFINITE | st.floats(min_value=1.001, allow_infinity=False).map(str)
       | st.floats(max_value=0, allow_nan=False).map(str))
def test_a_fraction_flag_after_dashdash(agent, raw):
    _check(agent, EST + ["--", f"--mem-fraction-static={raw}"], raw)  # `=`: argparse reads "-inf" as an option otherwise


@SET
@given(flag=st.sampled_from(["--max-running-requests", "--chunked-prefill-size", "--cuda-graph-max-bs"]),
       raw=st.integers(max_value=-2).map(str) | st.integers(min_value=2**40 + 1, max_value=2**62).map(str))
def test_count_flags_after_dashdash(agent, flag, raw):
    _check(agent, EST + ["--", f"{flag}={raw}"], raw)
