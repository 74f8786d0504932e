"""The search-efficiency benchmark's pieces (tests/perf/search_efficiency.py): the space, the
counting rule, and that a configuration has the same key whichever strategy proposes it (so all
strategies are charged and scored alike)."""
from tests.perf.search_efficiency import point, reach, space
from agent.planners.builtin import _set_flag
from tools.frameworks import get
from tools.hardware import get_hardware
from tools.models import get_model


def test_reach_counts_launches_until_the_threshold():
    assert reach([1.0, None, 5.0, 9.0], 5.0) == 3
    assert reach([None, 1.0], 5.0) is None


def test_the_space_is_the_product_of_its_dimensions():
    dims, pts = space(get_model("glm-5.2"), get_hardware("mi355x"), "mxfp4")
    assert len(pts) == 7 * 2 * 5 * 4 * 2 == len({p.key() for p in pts})
    dims, pts = space(get_model("qwen3-235b-a22b"), get_hardware("b200"), "fp8")
    assert "--enable-aiter-allreduce-fusion" not in dims and len(pts) == 7 * 2 * 5 * 4


def test_a_point_has_the_key_the_builtin_planner_would_give_it():
    fw = get("sglang")
    base = point("fp8", 8, 1, False, {})
    c = base
    for name, v in (("--kv-cache-dtype", "auto"), ("--chunked-prefill-size", 4096), ("--max-running-requests", 64),
                    ("--enable-aiter-allreduce-fusion", False)):
        c = _set_flag(c, name, v, fw.flags[name].default)
    assert c.key() == point("fp8", 8, 1, False, {"--kv-cache-dtype": "auto", "--chunked-prefill-size": 4096,
                                                 "--max-running-requests": 64,
                                                 "--enable-aiter-allreduce-fusion": False}).key()
