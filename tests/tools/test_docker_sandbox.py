"""DockerSandbox against a fake docker client that records calls and serves scripted logs
(no docker engine here)."""
import io
import itertools
import subprocess
import tarfile
import time

import pytest

from agent.errors import BadInput
from sandboxes.docker import MODEL_MOUNT, MOE_MOUNT, DockerSandbox
from sandboxes.local import NotSupported
from tools.candidate import Candidate, Parallel
from tools.protocols import LaunchFailure, Sandbox


_ids = itertools.count(1)


class FakeContainer:
    def __init__(self, script: list[tuple[str, str]], exit_code: int = 1):
        self.script = script  # (status, log line) revealed one per reload()
        self.shown, self.status, self.exit_code = 0, "created", exit_code
        self.stopped = self.removed = False
        self.archive: dict[str, bytes] = {}
        self.id = f"{next(_ids):064x}"

    @property
    def attrs(self):
        return {"State": {"ExitCode": self.exit_code}}

    def reload(self):
        if self.shown < len(self.script):
            self.shown += 1
        self.status = self.script[self.shown - 1][0] if self.shown else "running"

    def logs(self, stdout=True, stderr=True, stream=False, follow=False):
        if not stream:
            return "".join(l + "\n" for _, l in self.script[:self.shown]).encode()
        return self._follow()

    def _follow(self):  # like the engine's stream: lines as they appear, until the container stops
        sent = 0
        while True:
            while sent < self.shown:
                yield (self.script[sent][1] + "\n").encode()
                sent += 1
            if self.status == "exited" or self.stopped or self.removed:
                return
            time.sleep(0.01)

    def stop(self, timeout=10):
        self.stopped = True
        self.status = "exited"

    def remove(self, force=False, v=False):
        self.removed = True

    def get_archive(self, path):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in self.archive.items():
                info = tarfile.TarInfo(f"{path.rsplit('/', 1)[1]}/{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return [buf.getvalue()], {}


class FakeContainers:
    def __init__(self, client):
        self.client = client

    def run(self, image, command=None, **kw):
        self.client.calls.append(("run", image, command, kw))
        if kw.get("remove"):
            return self.client.run_output
        c = self.client.next_container
        c.status = "running"
        self.client.containers_made.append(c)
        return c

    def create(self, image, command=None, **kw):
        self.client.calls.append(("create", image, command, kw))
        return self.client.archive_container


class FakeImage:
    def __init__(self, name, labels):
        self.id, self.labels = f"sha256:{name}", labels


class FakeImages:
    def __init__(self, client):
        self.client = client

    def get(self, name):
        self.client.calls.append(("image", name, None, {}))
        return FakeImage(name, self.client.image_labels)


# what an image states it serves (sandboxes/testbed/image.py labels its image so)
LABELS = {"org.inferloop.version.vllm": "0.32.0", "org.inferloop.version.sglang": "0.5.23",
          "org.inferloop.version.atom": "2026-08-22"}


class FakeDocker:
    def __init__(self, container=None):
        self.calls, self.containers_made = [], []
        self.next_container = container
        self.containers = FakeContainers(self)
        self.images = FakeImages(self)
        self.image_labels = dict(LABELS)
        self.run_output = b"/usr/lib/python3/site-packages/sglang\n"
        self.archive_container = FakeContainer([])


READY_SGL = "The server is fired up and ready to roll!"


def test_is_a_sandbox(tmp_path):
    assert isinstance(DockerSandbox("img", tmp_path, client=FakeDocker()), Sandbox)


def test_rocm_launch_passes_devices_mounts_env_and_host_network(tmp_path):
    cont = FakeContainer([("running", "loading weights"), ("running", "[fused_moe] using 2stage default for "
                          "(256, 32, 6144, 2048, 257, 9, 'a', 'b', 'c', 'd', 'e', True, False) "),
                          ("running", READY_SGL)])
    fake = FakeDocker(cont)
    cfg = tmp_path / "E=257,N=256,device_name=AMD_Instinct_MI355X.json"
    cfg.write_text("{}")
    sb = DockerSandbox({"sglang": "rocm/sgl-dev:v0.5"}, tmp_path / "w", model_name="glm", client=fake,
                       ready_timeout_s=30, env={"SGLANG_USE_AITER": "1"})
    (tmp_path / "w").mkdir()
    c = Candidate(framework="sglang", parallel=Parallel(tp=8), flags={"--kv-cache-dtype": "fp8_e4m3"},
                  moe_configs=[str(cfg)])
    s = sb.launch(c, tmp_path / "run")
    (_, image, argv, kw), = [x for x in fake.calls if x[0] == "run"]
    assert image == "rocm/sgl-dev:v0.5"
    assert argv[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", MODEL_MOUNT]
    assert "--served-model-name" in argv and "glm" in argv and ["--tp-size", "8"] == argv[argv.index("--tp-size"):][:2]
    assert kw["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"] and kw["group_add"] == ["video"]
    assert kw["network_mode"] == "host" and kw["shm_size"] == "32g" and kw["ipc_mode"] == "host"
    assert kw["volumes"][str((tmp_path / "w").resolve())] == {"bind": MODEL_MOUNT, "mode": "ro"}
    assert kw["volumes"][str((tmp_path / "run" / "moe_configs").resolve())]["bind"] == MOE_MOUNT
    assert kw["environment"] == {"SGLANG_USE_AITER": "1", "SGLANG_MOE_CONFIG_DIR": MOE_MOUNT}
    assert s.url.startswith("http://127.0.0.1:") and READY_SGL in s.log_path.read_text()
    assert [d.kind for d in s.diagnose()] == ["moe_default_config"]
    s.stop()
    assert cont.stopped and cont.removed
    # a tuned aiter table (what the tuner writes on ROCm) goes in by aiter's variable, as the file
    table = tmp_path / "tuned_fmoe.csv"
    table.write_text("cu_num,token\n")
    fake.next_container = FakeContainer([("running", READY_SGL)])
    sb.launch(c.model_copy(update={"moe_configs": [str(table)]}), tmp_path / "run2").stop()
    kw = [x for x in fake.calls if x[0] == "run"][-1][3]
    assert kw["environment"] == {"SGLANG_USE_AITER": "1", "AITER_CONFIG_FMOE": f"{MOE_MOUNT}/tuned_fmoe.csv"}


def test_nvidia_bridge_publishes_port_and_requests_gpus(tmp_path):
    fake = FakeDocker(FakeContainer([("running", "INFO:     Application startup complete.")]))
    sb = DockerSandbox("vllm/vllm-openai:v0.11", tmp_path, gpu="nvidia", network="bridge", client=fake,
                       ready_timeout_s=30)
    with sb.launch(Candidate(framework="vllm"), tmp_path / "r") as s:
        (_, _, argv, kw), = [x for x in fake.calls if x[0] == "run"]
        host_port = int(s.url.rsplit(":", 1)[1])
        assert kw["ports"] == {"8000/tcp": ("127.0.0.1", host_port)} and "network_mode" not in kw
        assert argv[argv.index("--port") + 1] == "8000" and argv[argv.index("--host") + 1] == "0.0.0.0"
        req = kw["device_requests"][0]
        assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]
        assert {(u["Name"], u["Soft"]) for u in kw["ulimits"]} == {("memlock", -1), ("stack", 67108864)}
        assert "devices" not in kw


def test_the_device_share_this_process_was_given_reaches_the_container(tmp_path, monkeypatch):
    """Ray gives a trial that shares the host its GPUs through CUDA_VISIBLE_DEVICES (HIP/ROCR on
    AMD); the container sees every device, so the variable must travel in for the share to hold."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    fake = FakeDocker(FakeContainer([("running", "INFO:     Application startup complete.")]))
    sb = DockerSandbox("vllm/vllm-openai:v0.11", tmp_path, gpu="nvidia", client=fake, ready_timeout_s=30)
    with sb.launch(Candidate(framework="vllm"), tmp_path / "r"):
        (_, _, _, kw), = [x for x in fake.calls if x[0] == "run"]
        assert kw["environment"] == {"CUDA_VISIBLE_DEVICES": "2,3"}


def test_container_death_fails_fast_with_diagnosis_and_is_removed(tmp_path):
    line = "ValueError: The quantization method mxfp4 is not supported for the current GPU."
    cont = FakeContainer([("running", "starting"), ("exited", line)], exit_code=1)
    sb = DockerSandbox("img", tmp_path, client=FakeDocker(cont), ready_timeout_s=60)
    with pytest.raises(LaunchFailure) as e:
        sb.launch(Candidate(framework="vllm", flags={"--quantization": "mxfp4"}), tmp_path / "r")
    assert e.value.diagnosis.kind == "unsupported_quant" and line in e.value.excerpt
    assert cont.removed


def test_never_ready_container_times_out_and_is_removed(tmp_path):
    cont = FakeContainer([("running", "compiling kernels...")])
    sb = DockerSandbox("img", tmp_path, client=FakeDocker(cont), ready_timeout_s=1)
    with pytest.raises(LaunchFailure, match="not ready after 1 s") as e:
        sb.launch(Candidate(framework="atom"), tmp_path / "r")
    assert "compiling kernels" in e.value.excerpt and cont.stopped and cont.removed


def test_source_tree_is_copied_out_as_git_and_mounted_over_the_package(tmp_path):
    fake = FakeDocker(FakeContainer([("running", READY_SGL)]))
    fake.archive_container.archive = {"srt/models/deepseek_nextn.py": b"x = 1\n", "__init__.py": b""}
    sb = DockerSandbox("img", tmp_path, client=fake, ready_timeout_s=30)
    tree = sb.source_tree("sglang", tmp_path / "run")
    assert (tree / "srt" / "models" / "deepseek_nextn.py").read_text() == "x = 1\n"
    assert "pristine sglang" in subprocess.run(["git", "-C", str(tree), "log"], capture_output=True, text=True).stdout
    assert fake.archive_container.removed
    with sb.launch(Candidate(framework="sglang"), tmp_path / "run"):
        (_, _, _, kw), = [x for x in fake.calls if x[0] == "run" and not x[3].get("remove")]
        assert kw["volumes"][str(tree.resolve())] == {"bind": "/usr/lib/python3/site-packages/sglang", "mode": "ro"}


def test_tune_moe_runs_configured_tuner_or_refuses(tmp_path):
    fake = FakeDocker()
    sb = DockerSandbox("img", tmp_path, client=fake)
    with pytest.raises(NotSupported, match="no MoE tuner command"):
        sb.tune_moe(Candidate(framework="sglang"), tmp_path)
    (tmp_path / "moe_tuned").mkdir()
    (tmp_path / "moe_tuned" / "E=257,N=256.json").write_text("{}")  # what the tuner would have written
    sb = DockerSandbox("img", tmp_path, client=fake, tuner_commands={"sglang": ["python3", "tune.py"]})
    assert [p.name for p in sb.tune_moe(Candidate(framework="sglang"), tmp_path)] == ["E=257,N=256.json"]
    (_, _, cmd, kw), = [x for x in fake.calls if x[2] == ["python3", "tune.py"]]
    assert kw["volumes"][str((tmp_path / "moe_tuned").resolve())]["bind"] == "/inferloop/out"


def test_bad_configuration_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="unknown gpu kind 'tpu'"):
        DockerSandbox("img", tmp_path, gpu="tpu")
    sb = DockerSandbox({"vllm": "v"}, tmp_path, client=FakeDocker(FakeContainer([("running", "x")])))
    with pytest.raises(BadInput, match="no image configured for sglang"):
        sb.launch(Candidate(framework="sglang"), tmp_path / "r")


def test_version_comes_from_the_image_label_or_a_probe_cached_by_image_id(tmp_path):
    fake = FakeDocker()
    sb = DockerSandbox({"vllm": "a", "sglang": "b"}, tmp_path, client=fake)
    assert sb.version("sglang") == "0.5.23" and not [x for x in fake.calls if x[0] == "run"]
    fake.image_labels = {}  # an image that states nothing: asked in a throwaway container, once per image
    fake.run_output = b"0.33.0\n"
    assert sb.version("vllm") == "0.33.0" and sb.version("vllm") == "0.33.0"
    probes = [x for x in fake.calls if x[0] == "run"]
    assert len(probes) == 1 and probes[0][3]["remove"] and probes[0][2][-1] == "vllm"


def test_launch_validates_argv_for_the_version_in_the_image(tmp_path):
    fake = FakeDocker(FakeContainer([("running", "x")]))
    fake.image_labels = {"org.inferloop.version.sglang": "0.5.12"}
    sb = DockerSandbox("img", tmp_path, client=fake, ready_timeout_s=5)
    from tools import frameworks
    new_only = sorted(set(frameworks.get("sglang", "0.5.23").flags) - set(frameworks.get("sglang", "0.5.12").flags))
    assert new_only, "the two shipped sglang schemas differ"
    with pytest.raises(BadInput, match=new_only[0]):
        sb.launch(Candidate(framework="sglang", flags={new_only[0]: True}), tmp_path / "r")
    assert not [x for x in fake.calls if x[0] == "run"]  # refused before any container started


def test_launch_records_the_container_and_stop_removes_record_and_container(tmp_path):
    cont = FakeContainer([("running", "INFO:     Application startup complete.")])
    fake = FakeDocker(cont)
    sb = DockerSandbox("img", tmp_path, client=fake, ready_timeout_s=30)
    s = sb.launch(Candidate(framework="vllm"), tmp_path / "r")
    import json
    rec, = (tmp_path / "r" / "procs").glob("container-*.json")
    data = json.loads(rec.read_text())
    (_, _, _, kw), = [x for x in fake.calls if x[0] == "run"]
    assert data["id"] == cont.id and data["token"] == kw["labels"]["inferloop.record"]
    s.stop()
    assert cont.removed and not rec.exists()


def test_each_precision_mounts_its_own_checkpoint(tmp_path):
    # --model-path bf16=DIR --model-path fp8=DIR2: one container per launch, each with its checkpoint
    bf16, fp8 = tmp_path / "glm", tmp_path / "glm-fp8"
    bf16.mkdir(), fp8.mkdir()
    (fp8 / "config.json").write_text('{"quantization_config": {"quant_method": "fp8"}}')
    fake = FakeDocker(FakeContainer([("running", READY_SGL)]))
    sb = DockerSandbox({"sglang": "img"}, bf16, client=fake, ready_timeout_s=30, checkpoints={"bf16": bf16, "fp8": fp8})
    sb.launch(Candidate(framework="sglang", weights="fp8"), tmp_path / "run").stop()
    kw = [x for x in fake.calls if x[0] == "run"][-1][3]
    assert kw["volumes"][str(fp8.resolve())] == {"bind": MODEL_MOUNT, "mode": "ro"}
    assert str(bf16.resolve()) not in kw["volumes"]
    with pytest.raises(NotSupported, match="nvfp4 weights need a checkpoint of their own"):
        sb.launch(Candidate(framework="sglang", weights="nvfp4"), tmp_path / "run2")
