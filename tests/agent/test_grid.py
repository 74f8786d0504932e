"""The human grid numeric search works on (agent/planners/grid.py) and the search over it."""
import pytest

from agent.planners import grid, search
from tools import frameworks


@pytest.mark.parametrize("value,human", [
    (0.84, True), (0.8372033759818311, False), (0.9, True), (21784, False), (22000, True), (16384, True),
    (4096, True), (48, True), (255, False), (250, True), (-1, True), ("fp8_e4m3", True), (True, True)])
def test_is_human(value, human):
    assert grid.is_human(value) is human


def test_grids_are_what_a_person_would_try():
    f = grid.dim("float", 0.70, 0.95)
    assert (f.dist.low, f.dist.high, f.dist.step) == (0.7, 0.95, 0.01)
    assert grid.dim("int", 4096, 65536, log=True).values == (4096, 8192, 16384, 32768, 65536)
    assert grid.dim("int", 8, 1024, log=True).values == (8, 16, 32, 64, 128, 256, 512, 1024)
    assert grid.dim("int", 1, 6).values is None  # small counts stay plain integers
    assert grid.dim("int", 100, 5000).values == (100, *range(500, 5001, 500))  # a 1-2-5 step, the low end kept


def test_snap_goes_to_the_nearest_grid_point():
    assert grid.snap(0.8372033759818311, grid.dim("float", 0.70, 0.95)) == 0.84
    assert grid.snap(0.99, grid.dim("float", 0.70, 0.95)) == 0.95
    assert grid.snap(21784, grid.dim("int", 4096, 65536, log=True)) == 16384  # nearest on a log axis
    assert grid.snap(25000, grid.dim("int", 4096, 65536, log=True)) == 32768
    assert grid.snap("auto", grid.dim("int", 8, 1024, log=True)) == "auto"


@pytest.mark.parametrize("fw", ["sglang", "vllm", "atom"])
def test_every_value_the_search_asks_is_human(fw):
    specs = {n: s for n, s in frameworks.get(fw).flags.items() if s.search and "choices" not in s.search}
    dims = search.distributions(specs)
    hist = []
    for i in range(12):  # past the random start-up into TPE proper
        p = search.ask(dims, hist, seed=0, tried={search.key(h) for h, _ in hist})
        assert p and all(grid.is_human(v) for v in p.values()), p
        hist.append((p, float(i % 5)))


def test_history_recorded_off_the_grid_still_informs_the_search():
    dims = search.distributions({n: s for n, s in frameworks.get("sglang").flags.items()
                                 if n in ("--mem-fraction-static", "--max-prefill-tokens")})
    old = [({"--mem-fraction-static": 0.8372033759818311, "--max-prefill-tokens": 21784}, 10.0)] * 4
    p = search.ask(dims, old, seed=1, tried=set())
    assert p and all(grid.is_human(v) for v in p.values())
