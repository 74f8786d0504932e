"""The catalogue fix for an optional package a framework imports unconditionally (issue 16): the
real sglang 0.5.23 log line -> a missing_module diagnosis naming the importing file -> a patch that
guards exactly the imports of that package that the rule covers, and applies with git."""
import subprocess
import textwrap
from pathlib import Path

from agent.planners.fixes import fixes_for
from agent.planners.import_guard import guard_source
from tools import frameworks
from tools.candidate import Candidate
from tools.frameworks.signatures import diagnose, primary

# The tail of sglang 0.5.23's start on the CPU testbed without torchvision (2026-12-01, verbatim
# but for the venv path), and its warning for an optional model file, which stops nothing.
LOG = """[2026-12-01 12:35:11] Ignore import error when loading sglang.srt.models.midashenglm: No module named 'torchaudio'
  File "/venv/lib/python3.11/site-packages/sglang/srt/configs/nano_nemotron_vl.py", line 22, in <module>
    from sglang.srt.multimodal.internvl_utils import IMAGENET_MEAN, IMAGENET_STD
  File "/venv/lib/python3.11/site-packages/sglang/srt/multimodal/internvl_utils.py", line 5, in <module>
    import torchvision.transforms as T
ModuleNotFoundError: No module named 'torchvision'
"""

INTERNVL = textwrap.dedent("""\
    import math

    import torch
    import torchvision.transforms as T
    from PIL import Image
    from torchvision.transforms.functional import InterpolationMode


    def build_transform(size):
        return T.Compose([T.Resize((size, size), interpolation=InterpolationMode.BICUBIC)])
    """)
ALLOC = textwrap.dedent("""\
    from sglang.srt.utils import is_cpu, is_npu

    _is_cpu = is_cpu()
    if is_npu():
        from sgl_kernel import npu_only
    elif _is_cpu:
        from sgl_kernel import (
            assign_req_to_token_pool_cpu,
            other_cpu as oc,
        )
    from sgl_kernel import cuda_top_level
    """)


def _tree(tmp_path: Path) -> Path:
    t = tmp_path / "sglang"
    for rel, text in {"srt/multimodal/internvl_utils.py": INTERNVL, "srt/mem_cache/allocation.py": ALLOC,
                      "multimodal_gen/x.py": "import torchvision\n", "srt/plain.py": "import torch\n"}.items():
        (t / rel).parent.mkdir(parents=True, exist_ok=True)
        (t / rel).write_text(text)
    git = ["git", "-C", str(t), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "pristine"]):
        subprocess.run(git + args, check=True)
    return t


def test_the_real_log_names_the_module_and_the_importing_file():
    d = primary(diagnose(LOG))
    assert d.kind == "missing_module" and d.fatal
    assert d.details == {"module": "torchvision", "line": 5,
                         "file": "/venv/lib/python3.11/site-packages/sglang/srt/multimodal/internvl_utils.py"}
    assert [x.details["module"] for x in diagnose(LOG)] == ["torchvision"]  # the warning is not a cause


def test_guards_bind_the_names_and_compile():
    new = guard_source(INTERNVL, "torchvision", "top")
    assert "except ImportError:  # optional: torchvision is not installed\n    T = None\n" in new
    assert "    InterpolationMode = None\n" in new
    ns: dict = {}
    exec(compile(new.replace("import torch\n", "", 1), "x.py", "exec"), ns)  # no torchvision here: still imports
    assert ns["T"] is None and ns["InterpolationMode"] is None
    cpu = guard_source(ALLOC, "sgl_kernel", "cpu")
    assert "assign_req_to_token_pool_cpu = oc = None" in cpu
    assert "from sgl_kernel import npu_only\n" in cpu and "\nfrom sgl_kernel import cuda_top_level\n" in cpu  # untouched
    compile(cpu, "a.py", "exec")
    assert guard_source("import torch\n", "torchvision", "top") is None


def test_the_fix_patches_the_tree_and_applies(tmp_path):
    tree = _tree(tmp_path)
    diags = [d.model_dump() for d in diagnose(LOG)]
    fixes = fixes_for(diags, Candidate(framework="sglang"), card=None, hw=None, tree=tree,
                      framework=frameworks.get("sglang", "0.5.23"))
    (fx,) = fixes
    assert fx.name == "guard_optional_import" and fx.kind == "patch"
    assert fx.files == ["srt/multimodal/internvl_utils.py"]  # multimodal_gen is not the LM server's
    (tmp_path / "p.diff").write_text(fx.diff)
    subprocess.run(["git", "-C", str(tree), "apply", "--check", str(tmp_path / "p.diff")], check=True)
    # not a known optional package of this framework, or a file outside the tree: no fix
    other = [{**diags[-1], "details": {**diags[-1]["details"], "module": "numpy"}}]
    assert fixes_for(other, Candidate(framework="sglang"), card=None, hw=None, tree=tree,
                     framework=frameworks.get("sglang", "0.5.23")) == []
    assert fixes_for(diags, Candidate(framework="vllm"), card=None, hw=None, tree=tree,
                     framework=frameworks.get("vllm", "0.32.0")) == []
