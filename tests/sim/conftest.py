import subprocess
from pathlib import Path

import pytest

from sandboxes.sim import SimSandbox
from tools.candidate import Candidate, Parallel

STORY_FLAGS = {"--kv-cache-dtype": "fp8_e4m3", "--enable-aiter-allreduce-fusion": True,
               "--speculative-algorithm": "NEXTN", "--speculative-num-steps": 5,
               "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 6}


def story_candidate(**kw) -> Candidate:
    base = dict(framework="sglang", weights="mxfp4", parallel=Parallel(tp=4, dp=2), flags=dict(STORY_FLAGS))
    base.update(kw)
    return Candidate(**base)


def make_diff(tree: Path, rel: str, old: str, new: str) -> str:
    """A real unified diff of one edit, produced by git and then undone in the tree."""
    p = tree / rel
    text = p.read_text()
    assert old in text, f"{old!r} not in {rel}"
    p.write_text(text.replace(old, new, 1))
    diff = subprocess.run(["git", "diff", "--", rel], cwd=tree, capture_output=True, text=True, check=True).stdout
    subprocess.run(["git", "checkout", "--", rel], cwd=tree, check=True)
    return diff


def git_apply(tree: Path, diff: str) -> None:
    subprocess.run(["git", "apply", "-"], cwd=tree, input=diff, text=True, check=True)


@pytest.fixture
def sim():
    return SimSandbox("glm-5.2", "mi355x", seed=0)
