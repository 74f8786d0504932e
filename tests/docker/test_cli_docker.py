"""`agent optimize --backend docker`: bad options and an engine that is not running exit 2 with
what to do, before a run directory is made (no engine needed: DOCKER_HOST names a socket where
nothing listens)."""
import pytest

BASE = ["optimize", "--model", "smollm2-135m", "--hw", "cpu", "--backend", "docker"]


@pytest.fixture
def model(tmp_path):
    (tmp_path / "m").mkdir()
    return str(tmp_path / "m")


@pytest.mark.parametrize("extra,words", [
    ([], "--backend docker needs --image FRAMEWORK=IMAGE"),
    (["--image", "vllm"], "--image 'vllm': give FRAMEWORK=IMAGE"),
    (["--image", "trt=nvcr.io/trt:1"], "unknown framework 'trt'; allowed: vllm, sglang, atom"),
    (["--image", "vllm=a", "--image", "vllm=b"], "--image vllm= given twice"),
])
def test_bad_docker_options_exit_2(agent, tmp_path, model, extra, words):
    r = agent(*BASE, "--model-path", model, *extra, "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


def test_docker_needs_a_model_path(agent, tmp_path):
    r = agent(*BASE, "--image", "vllm=x", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "--backend docker needs --model-path DIR" in r.stderr, r.stderr


def test_image_is_for_the_docker_backend_only(agent, tmp_path, model):
    r = agent("optimize", "--model", "smollm2-135m", "--hw", "cpu", "--backend", "local", "--model-path", model,
              "--image", "vllm=x", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "--image is for --backend docker" in r.stderr, r.stderr


def test_engine_not_running_exits_2_saying_what_to_do(agent, tmp_path, model, monkeypatch):
    sock = tmp_path / "nothing.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    r = agent(*BASE, "--model-path", model, "--image", "vllm=inferloop-testbed:x", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"the docker engine at unix://{sock} is not answering" in r.stderr
    assert "systemctl start docker" in r.stderr and "dockerd" in r.stderr
    assert not (tmp_path / "r").exists()
