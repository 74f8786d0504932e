"""Shared fixtures.

`shared_dir`: the project's shared folder (../shared beside the repo, or INFERLOOP_SHARED); tests
that need its data skip with the reason when it is absent.
`testbed`: the real vLLM CPU testbed (sandboxes/testbed/build.py), built on demand with progress on the
terminal, or reused from its cache; skipped with the reason when it cannot be built (no PyPI) or
when INFERLOOP_SKIP_TESTBED=1.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Subprocesses the tests start (fake frameworks, mock servers, `python -c "from agent.cli ..."`)
# import this checkout's code, not the checkout an editable install points at (with cwd elsewhere
# or a script path, sys.path[0] is not the repo and the install's finder would answer).
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])


def shared_path() -> Path:
    env = os.environ.get("INFERLOOP_SHARED")
    return Path(env) if env else (REPO / ".." / "shared").resolve()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    p = shared_path()
    if not p.is_dir():
        pytest.skip(f"shared folder {p} is absent (set INFERLOOP_SHARED to point at it)")
    return p


@dataclass(frozen=True)
class Testbed:
    root: Path
    python: Path  # the testbed venv's interpreter (vLLM lives there, not in ours)
    model_dir: Path
    model_name: str
    mode: dict  # the serving mode the build proved correct on this CPU (sandboxes/testbed/mode.py)

    @property
    def serving_flags(self) -> dict:
        return dict(self.mode["flags"])


# Failures that mean "this machine cannot reach the package index", not "the build is broken".
_NO_INDEX = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable",
             "No matching distribution found", "Could not find a version that satisfies")


@contextlib.contextmanager
def _terminal(config):
    """Let the build's progress reach the terminal even while pytest captures output."""
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        yield
        return
    with capman.global_and_fixture_disabled():
        yield


@pytest.fixture(scope="session")
def testbed(request) -> Testbed:
    if os.environ.get("INFERLOOP_SKIP_TESTBED") == "1":
        pytest.skip("INFERLOOP_SKIP_TESTBED=1")
    from sandboxes.testbed import paths
    from sandboxes.testbed.build import BuildError, build, is_built

    base = paths.root()
    if not is_built(base):
        with _terminal(request.config):
            print(f"\n[testbed] building the real vLLM CPU testbed in {base} "
                  "(first time only: many minutes; see README 'The real testbed')", flush=True)
            try:
                build(base, say=lambda m: print(m, flush=True))
            except BuildError as e:
                if any(s in str(e) for s in _NO_INDEX):
                    pytest.skip(f"cannot build the testbed here (no package index?): {str(e).splitlines()[0]}")
                raise
    from sandboxes.testbed import mode
    tb = Testbed(root=base, python=paths.venv_python(base), model_dir=paths.model_dir(base),
                 model_name=paths.MODEL_NAME, mode=mode.load(base))
    _USED.append(tb)
    with _terminal(request.config):
        print(f"\n[testbed] serving mode {mode.describe(tb.mode)}", flush=True)
    return tb


_USED: list[Testbed] = []


def pytest_terminal_summary(terminalreporter):
    """Say which serving mode the real-server tests ran in, and why, where they ran at all."""
    if _USED:
        from sandboxes.testbed import mode
        terminalreporter.write_line(f"testbed serving mode: {mode.describe(_USED[0].mode)}")


@pytest.fixture
def agent(capsys):
    """Run the `agent` CLI in-process: agent("optimize", ...) -> returncode, stdout, stderr."""
    from types import SimpleNamespace

    from agent.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as e:
            main(list(args))
        out = capsys.readouterr()
        return SimpleNamespace(returncode=e.value.code, stdout=out.out, stderr=out.err)
    return run
