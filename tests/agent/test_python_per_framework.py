"""`--python FRAMEWORK=PATH` (issue 16): each framework may have its own interpreter; a plain
`--python PATH` keeps meaning the default one. Bad values exit 2 naming the value and what is allowed."""
import os
import sys

import pytest

from agent.cmd_common import parse_pythons
from agent.errors import BadInput
from sandboxes.local import LocalSandbox, installed_frameworks

OPT = ["optimize", "--model", "glm-5.2", "--hw", "cpu", "--budget", "1", "--backend", "local"]


def test_plain_and_named_values_split():
    assert parse_pythons(["/a/python", "sglang=/b/python", "transformers=/c/py"]) == (
        "/a/python", {"sglang": "/b/python", "transformers": "/c/py"})
    assert parse_pythons(None) == (None, {})


@pytest.mark.parametrize("values,words", [
    (["vlm=/x"], "unknown framework 'vlm'; allowed: vllm, sglang, atom, transformers"),
    (["sglang="], "no path after '='"),
    (["sglang=/a", "sglang=/b"], "sglang given twice"),
    (["/a", "/b"], "a second default interpreter"),
])
def test_bad_values_name_themselves(values, words):
    with pytest.raises(BadInput, match=words.replace("(", r"\(")):
        parse_pythons(values)


@pytest.mark.parametrize("value,words", [
    ("vlm=/usr/bin/python3", "--python 'vlm=/usr/bin/python3': unknown framework 'vlm'"),
    ("sglang=/nonexistent/python", "--python sglang='/nonexistent/python': not an executable file"),
])
def test_cli_exits_2(agent, tmp_path, value, words):
    (tmp_path / "m").mkdir()
    r = agent(*OPT, "--model-path", str(tmp_path / "m"), "--python", value, "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert words in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


def _venv_with(tmp_path, name, package):
    """An interpreter that can import `package` (a stub package on its path: what is probed is
    only where the interpreter finds it)."""
    root = tmp_path / name
    (root / "site" / package).mkdir(parents=True)
    (root / "site" / package / "__init__.py").write_text("")
    py = root / "python"
    py.write_text(f"#!/bin/sh\nPYTHONPATH={root / 'site'} exec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    return str(py)


def test_each_framework_is_probed_under_its_own_interpreter(tmp_path):
    tf = _venv_with(tmp_path, "tf", "transformers")
    sb = LocalSandbox(tmp_path, python=_venv_with(tmp_path, "v", "vllm"), pythons={"transformers": tf})
    assert sb.python_for("transformers") == tf and sb.python_for("vllm") == sb.python
    assert installed_frameworks(sb) == ("vllm", "transformers")
    # named but missing from its interpreter: a clear error, not a silent drop from the comparison
    sb = LocalSandbox(tmp_path, python=sb.python, pythons={"sglang": tf})
    with pytest.raises(BadInput, match="sglang is not installed for that interpreter"):
        installed_frameworks(sb)
    assert os.access(tf, os.X_OK)
