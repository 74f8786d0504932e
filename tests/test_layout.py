"""The house rules of the layout, read from the source with ast (nothing is imported):

- the code flows downhill: nothing under tools/ or sandboxes/ imports agent;
- the agent never knows which ground it runs on: nothing under agent/ imports sandboxes.sim,
  directly or by a module string (importlib, a registry entry);
- the top level is the one the user asked for.
"""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOP_LEVEL = {"pyproject.toml", "README.md", "agent", "tools", "playbooks", "sandboxes", "logs", "tests"}
# Still at the top level, each with the reason; the test fails once one is gone, so the entry goes too.
PENDING: dict[str, str] = {}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file, relative imports resolved, plus every string
    constant that is exactly a dotted module path (what importlib.import_module would take)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.fullmatch(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+(:\w+)?", node.value):
            out.append((node.lineno, node.value.split(":")[0]))
    return out


def violations(root: Path, folders: tuple[str, ...], forbidden: str) -> list[str]:
    """`file:line imports module` wherever a file under `folders` reaches `forbidden` (a package)."""
    bad = []
    for folder in folders:
        for f in sorted((root / folder).rglob("*.py")):
            for line, mod in imports(f, root):
                if mod == forbidden or mod.startswith(forbidden + "."):
                    bad.append(f"{f.relative_to(root)}:{line} imports {mod}")
    return bad


def top_level(root: Path) -> set[str]:
    """What the repository holds at the top (tracked files; build outputs and dotfiles aside)."""
    r = subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, text=True)
    if r.returncode == 0 and r.stdout:
        names = {p.split("/", 1)[0] for p in r.stdout.splitlines()}
        names = {n for n in names if (root / n).exists()}  # a move not yet committed
        names |= {p.name for p in root.iterdir() if p.name in TOP_LEVEL}
    else:  # not a git checkout (an sdist): what is on disk, less what a build leaves
        names = {p.name for p in root.iterdir() if p.name not in ("build", "dist", "runs")
                 and not p.name.endswith(".egg-info") and p.name != "__pycache__"}
    return {n for n in names if not n.startswith(".")}


def test_tools_and_sandboxes_never_import_agent():
    assert violations(REPO, ("tools", "sandboxes"), "agent") == []


def test_agent_never_imports_the_simulator():
    assert violations(REPO, ("agent",), "sandboxes.sim") == []


def test_agent_reaches_grounds_only_through_the_registry():
    found = violations(REPO, ("agent",), "sandboxes")
    assert [v for v in found if not re.search(r" imports sandboxes(\.registry(\.\w+)?)?$", v)] == []


def test_only_the_cli_imports_command_modules():
    """The run is a library (agent/run.py, agent/replay.py); cmd_* are shells over it that share
    agent.cmd_common and never import each other, and nothing else imports a shell."""
    bad = []
    for f in sorted(REPO.rglob("*.py")):
        rel = f.relative_to(REPO)
        if rel.parts[0] not in ("agent", "tools", "sandboxes", "tests") or rel == Path("agent/cli.py"):
            continue
        for line, mod in imports(f, REPO):
            if re.fullmatch(r"agent\.cmd_(?!common\b)\w+(\..*)?", mod):
                bad.append(f"{rel}:{line} imports {mod}")
    assert bad == []


def import_cycles(root: Path, folder: str) -> list[list[str]]:
    """Groups of modules under `folder` that import each other round a loop (strongly connected,
    Tarjan), counting imports inside functions too: a lazy import hides a cycle, it does not end it."""
    mods = {module_name(f, root): f for f in sorted((root / folder).rglob("*.py"))}
    graph = {m: sorted({i for _, i in imports(f, root) if i in mods and i != m}) for m, f in mods.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                out.append(sorted(group))
    for m in graph:
        if m not in index:
            visit(m)
    return sorted(out)


def test_agent_has_no_import_cycle():
    assert import_cycles(REPO, "agent") == []


def test_top_level_is_the_asked_for_one():
    extra = top_level(REPO) - TOP_LEVEL - set(PENDING)
    assert extra == set(), f"not in the asked-for layout: {sorted(extra)}"
    assert {n for n in PENDING if (REPO / n).exists()} == set(PENDING), "a pending folder moved: drop it from PENDING"


# ---- the checker itself: it finds what it must (so the tests above can fail) ------------------
@pytest.fixture
def tree(tmp_path):
    def write(rel: str, text: str) -> None:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for pkg in ("agent", "tools", "tools/bench", "sandboxes", "sandboxes/sim"):
        write(f"{pkg}/__init__.py", "")
    return tmp_path, write


def test_checker_finds_direct_relative_and_string_imports(tree):
    root, write = tree
    write("tools/bench/a.py", "import agent.errors\n")
    write("tools/bench/b.py", "def f():\n    from agent import nodes\n")
    write("sandboxes/c.py", "import importlib\nimportlib.import_module('agent.cli')\n")
    write("agent/d.py", "from ..sandboxes.sim import SimSandbox\n")  # relative, from inside agent
    write("agent/e.py", "OPENERS = {'sim': 'sandboxes.sim.ground:open_sim'}\n")
    write("agent/ok.py", "import sandboxes.registry\nfrom tools import errors\nX = 'agent estimate'\n")
    assert violations(root, ("tools", "sandboxes"), "agent") == [
        "tools/bench/a.py:1 imports agent.errors", "tools/bench/b.py:2 imports agent",
        "tools/bench/b.py:2 imports agent.nodes", "sandboxes/c.py:2 imports agent.cli"]
    assert violations(root, ("agent",), "sandboxes.sim") == [
        "agent/d.py:1 imports sandboxes.sim", "agent/d.py:1 imports sandboxes.sim.SimSandbox",
        "agent/e.py:1 imports sandboxes.sim.ground"]


def test_checker_sees_a_folder_outside_the_layout(tmp_path):
    for n in ("agent", "tools", "gpu", ".ci"):
        (tmp_path / n).mkdir()
    (tmp_path / "README.md").write_text("")
    assert top_level(tmp_path) - TOP_LEVEL == {"gpu"}


def test_checker_finds_an_import_cycle_also_through_a_lazy_import(tree):
    root, write = tree
    write("agent/a.py", "from agent.b import x\n")
    write("agent/b.py", "def f():\n    from agent import c\n")
    write("agent/c.py", "import agent.a\n")
    write("agent/d.py", "import agent.a\n")  # imports into the loop, is not part of it
    assert import_cycles(root, "agent") == [["agent.a", "agent.b", "agent.c"]]


def test_ci_runs_exactly_the_readmes_test_command():
    """The README's set-up gives one command that installs and runs the tests; .ci/run must run
    that very command (a phase added to one and not the other would leave CI testing less)."""
    import re
    readme = (REPO / "README.md").read_text()
    m = re.search(r"Install and run the tests:\n\n {4}(.+)\n", readme)
    assert m, "README.md lost its test command"
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("pip install")]
    assert [c.replace(" -q ", " ") for c in ci] == [m.group(1)]
