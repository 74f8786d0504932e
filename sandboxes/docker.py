"""DockerSandbox: serving frameworks in containers through the docker SDK (`tools.protocols.Sandbox`).

One image per framework (e.g. rocm/sgl-dev, rocm/vllm, rocm/atom). GPUs: ROCm passes `/dev/kfd`
and `/dev/dri` (+ group video, ipc host, seccomp unconfined, as AMD's docs run them); NVIDIA uses a
device request for all GPUs. Mounts: the weights (read-only), a patched framework source tree over
the installed package, tuned MoE configs (the framework's env variable points at them). Host
networking by default; with `network="bridge"` the server's port is published on a free host port.
The docker client is injected so tests use a fake that records calls and serves logs.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from sandboxes import registry
from tools.errors import BadInput
from sandboxes.local import NotSupported, RealNode, checkpoints_of
from tools import frameworks, logs, moe, procs
from tools.candidate import Candidate
from tools.server import RunningServer, free_port, wait_ready
from sandboxes.containers import ContainerHandle, connect

MODEL_MOUNT = "/inferloop/model"
MOE_MOUNT = "/inferloop/moe_configs"
OUT_MOUNT = "/inferloop/out"
_PKG = {"vllm": "vllm", "sglang": "sglang", "atom": "atom"}
VERSION_LABEL = "org.inferloop.version."  # + framework: an image may state what it serves (testbed/image.py)
_VERSION_CODE = ("import importlib.metadata as m, sys; d = m.packages_distributions().get(sys.argv[1]) or []; "
                 "print(m.version(d[0]) if d else '')")

VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def visible_devices() -> dict[str, str]:
    """The device selection this process was given (by the user, or by Ray for a trial that shares
    the host with others): the container sees every device and this picks its share."""
    return {k: os.environ[k] for k in VISIBLE if k in os.environ}


class DockerSandbox(RealNode):
    name = "docker"

    def __init__(self, images: dict[str, str] | str, model_dir: Path | str, *, model_name: str | None = None,
                 gpu: str = "rocm", client=None, shm_size: str = "32g", network: str = "host",
                 host: str = "127.0.0.1", env: dict[str, str] | None = None, python: str = "python3",
                 ready_timeout_s: float = 1800.0, tuner_commands: dict[str, list[str]] | None = None,
                 checkpoints: dict[str, Path | str] | None = None):
        if gpu not in ("rocm", "nvidia", "none"):
            raise BadInput(f"unknown gpu kind {gpu!r}; allowed: nvidia, none, rocm")
        if network not in ("host", "bridge"):
            raise BadInput(f"unknown network {network!r}; allowed: bridge, host")
        self.images = images if isinstance(images, dict) else {fw: images for fw in frameworks.NAMES}
        self.frameworks = tuple(fw for fw in frameworks.NAMES if fw in self.images)  # what the planner compares
        self.model_dir = Path(model_dir)
        self.checkpoints = {w: Path(d) for w, d in (checkpoints or {}).items()}
        self.model_name = model_name or self.model_dir.name
        self.gpu, self.shm_size, self.network, self.host = gpu, shm_size, network, host
        self.env, self.python, self.ready_timeout_s = dict(env or {}), python, ready_timeout_s
        self.tuner_commands = tuner_commands or {}
        self._client = client
        self._sources: dict[str, tuple[Path, str]] = {}  # framework -> (host tree, package path in image)
        self._versions: dict[tuple[str, str], str | None] = {}  # (image id, framework) -> version
        self._t0 = time.monotonic()

    @property
    def client(self):
        if self._client is None:
            self._client = connect()
        return self._client

    def image(self, framework: str) -> str:
        if framework not in self.images:
            raise BadInput(f"no image configured for {framework}; configured: {', '.join(sorted(self.images))} "
                           f"(give --image {framework}=IMAGE)")
        return self.images[framework]

    def check_images(self) -> None:
        """Every configured image is in the engine (nothing is pulled behind the user's back)."""
        for fw, name in sorted(self.images.items()):
            try:
                self.client.images.get(name)
            except Exception as e:
                if "No such image" in str(e) or type(e).__name__ == "ImageNotFound":
                    raise BadInput(f"--image {fw}={name}: the docker engine has no such image; "
                                   f"pull or build it first (docker pull {name})") from None
                raise BadInput(f"--image {fw}={name}: cannot inspect it: {e}") from None

    def version(self, framework: str) -> str | None:
        """The framework's version inside its image: the image's label when it states one, else
        the distribution metadata read in a throwaway container; cached by image id."""
        image = self.client.images.get(self.image(framework))
        key = (image.id, framework)
        if key not in self._versions:
            label = (image.labels or {}).get(VERSION_LABEL + framework)
            self._versions[key] = label or self.probe_version(image.id, framework)
        return self._versions[key]

    def probe_version(self, image_id: str, framework: str) -> str | None:
        """The framework distribution's version as the image's own Python reports it (no import)."""
        try:
            out = self.client.containers.run(image_id, command=[self.python, "-c", _VERSION_CODE,
                                             _PKG.get(framework, framework)], remove=True, network_mode="none")
        except Exception:  # no such python in the image: argv is validated against the newest schema
            return None
        text = (out.decode() if isinstance(out, bytes) else str(out)).strip()
        return text.splitlines()[-1] if text else None

    def gpu_kwargs(self) -> dict:
        if self.gpu == "rocm":
            return {"devices": ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"], "group_add": ["video"],
                    "security_opt": ["seccomp=unconfined"], "cap_add": ["SYS_PTRACE"], "ipc_mode": "host"}
        if self.gpu == "nvidia":  # sglang's docker docs add the ulimits (pinned memory, deep stacks)
            from docker.types import DeviceRequest, Ulimit
            return {"device_requests": [DeviceRequest(count=-1, capabilities=[["gpu"]])], "ipc_mode": "host",
                    "ulimits": [Ulimit(name="memlock", soft=-1, hard=-1),
                                Ulimit(name="stack", soft=67108864, hard=67108864)]}
        return {}

    def _mounts(self, fw: frameworks.Framework, c: Candidate, run_dir: Path) -> tuple[dict, dict]:
        volumes = {str(self.checkpoint(c).resolve()): {"bind": MODEL_MOUNT, "mode": "ro"}}
        env: dict[str, str] = {}
        if fw.name in self._sources:  # patched source replaces the installed package
            tree, pkg_path = self._sources[fw.name]
            volumes[str(tree.resolve())] = {"bind": pkg_path, "mode": "ro"}
        if c.moe_configs:
            d = run_dir / "moe_configs"
            d.mkdir(parents=True, exist_ok=True)
            for p in c.moe_configs:
                if not Path(p).is_file():
                    raise BadInput(f"tuned MoE config not found: {p}")
                (d / Path(p).name).write_bytes(Path(p).read_bytes())
            volumes[str(d.resolve())] = {"bind": MOE_MOUNT, "mode": "ro"}
            var = moe.config_env(fw, c.moe_configs)  # aiter reads its CSV file, Triton a folder
            env[var] = f"{MOE_MOUNT}/{Path(c.moe_configs[0]).name}" if var == moe.AITER_ENV else MOE_MOUNT
        return volumes, env

    def launch(self, candidate: Candidate, run_dir: Path) -> RunningServer:
        fw = frameworks.get(candidate.framework, self.version(candidate.framework))
        fw.validate(candidate)  # argv checked against the schema of the version in the image
        ckpt = self.checkpoint(candidate)
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        if fw.name not in self._sources and (self._tree(fw.name, run_dir) / ".git").is_dir():
            self.source_tree(fw.name, run_dir)  # a resumed run: its patched tree is mounted again
        volumes, moe_env = self._mounts(fw, candidate, run_dir)
        host_port = free_port(self.host)
        inner_port = host_port if self.network == "host" else 8000
        bind_host = self.host if self.network == "host" else "0.0.0.0"
        argv = fw.argv(candidate, model=MODEL_MOUNT, port=inner_port, host=bind_host,
                       served_name=self.model_name, python=self.python)
        (run_dir / "launch.txt").write_text(logs.redact(" ".join(argv)) + "\n")
        kw = {"network_mode": "host"} if self.network == "host" else {"ports": {f"{inner_port}/tcp": (self.host, host_port)}}
        token = secrets.token_hex(8)  # names this container in its record: resume removes only it
        container = self.client.containers.run(
            self.image(fw.name), command=argv, detach=True, environment={**visible_devices(), **self.env, **candidate.env, **moe_env},
            volumes=volumes, shm_size=self.shm_size, name=f"inferloop-{candidate.key()}-{host_port}",
            labels={"inferloop": "1", "inferloop.candidate": candidate.key(), "inferloop.record": token},
            **kw, **self.gpu_kwargs())
        record = procs.record_other(run_dir, "container", container.id, {"token": token})
        log_path = run_dir / f"server-{host_port}.log"
        handle = ContainerHandle(container, log_path, record)
        url = f"http://{self.host}:{host_port}"
        wait_ready(handle, url=url, ready_line=fw.ready_line, health_path=fw.health_path,
                   timeout_s=self.ready_timeout_s, diagnose=fw.diagnose, log_path=log_path)
        return RunningServer(handle, url=url, model=self.model_name if fw.served_name_flag else MODEL_MOUNT,
                             log_path=log_path, tokenizer_dir=ckpt)

    def _package_path(self, framework: str) -> str:
        code = (f"import importlib.util; s = importlib.util.find_spec('{_PKG[framework]}'); "
                "print(s.submodule_search_locations[0] if s else '')")
        out = self.client.containers.run(self.image(framework), command=[self.python, "-c", code], remove=True)
        path = (out.decode() if isinstance(out, bytes) else str(out)).strip().splitlines()
        if not path or not path[-1].startswith("/"):
            raise NotSupported(f"{framework} is not importable in image {self.image(framework)}")
        return path[-1]

    def _tree(self, framework: str, run_dir: Path) -> Path:
        return Path(run_dir) / "src" / framework / _PKG.get(framework, framework)

    def source_tree(self, framework: str, run_dir: Path) -> Path:
        """The image's installed package copied out as a git work tree; later launches mount it
        over the package, so approved patches take effect. Made once per run (a resumed run finds it)."""
        if framework in self._sources:
            return self._sources[framework][0]
        frameworks.get(framework)
        pkg_path = self._package_path(framework)
        tree = self._tree(framework, run_dir)
        if not (tree / ".git").is_dir():
            self._copy_out(framework, pkg_path, tree)
        self._sources[framework] = (tree, pkg_path)
        return tree

    def _copy_out(self, framework: str, pkg_path: str, tree: Path) -> None:
        if tree.exists():  # a copy cut short by a kill: start it again
            shutil.rmtree(tree)
        tree.parent.mkdir(parents=True, exist_ok=True)
        c = self.client.containers.create(self.image(framework), command=["true"])
        spool = tree.parent / "package.tar"  # spooled to disk: a package can be hundreds of MB
        try:
            stream, _ = c.get_archive(pkg_path)
            with open(spool, "wb") as f:
                for chunk in stream:
                    f.write(chunk)
            with tarfile.open(spool) as tar:
                tar.extractall(tree.parent, filter="data")
        finally:
            c.remove(force=True)
            spool.unlink(missing_ok=True)
        extracted = tree.parent / Path(pkg_path).name
        if extracted != tree:
            extracted.rename(tree)
        if (tree / ".git").exists():  # a repository the image happened to hold is not ours to build on
            shutil.rmtree(tree / ".git")
        git = ["git", "-C", str(tree), "-c", "user.name=inferloop", "-c", "user.email=inferloop@localhost"]
        subprocess.run(git + ["init", "-q"], check=True, capture_output=True, timeout=600)
        (tree / ".git" / "info").mkdir(exist_ok=True)
        (tree / ".git" / "info" / "exclude").write_text("__pycache__/\n")  # compiled files stay, untracked
        for args in (["add", "-A", "."], ["commit", "-q", "-m", f"pristine {framework} from image"]):
            subprocess.run(git + args, check=True, capture_output=True, timeout=600)

    def tune_moe(self, candidate: Candidate, run_dir: Path) -> list[Path]:
        """Run the configured tuner command in the framework's image; it writes into OUT_MOUNT."""
        cmd = self.tuner_commands.get(candidate.framework)
        if not cmd:
            raise NotSupported(f"no MoE tuner command configured for {candidate.framework} "
                               "(DockerSandbox(tuner_commands={framework: argv writing to /inferloop/out}))")
        if self.gpu == "none":
            raise NotSupported("MoE kernel tuning needs GPUs (gpu='none')")
        out = Path(run_dir) / "moe_tuned"
        out.mkdir(parents=True, exist_ok=True)
        volumes, _ = self._mounts(frameworks.get(candidate.framework), candidate, Path(run_dir))
        volumes[str(out.resolve())] = {"bind": OUT_MOUNT, "mode": "rw"}
        self.client.containers.run(self.image(candidate.framework), command=cmd, remove=True, volumes=volumes,
                                   environment={**visible_devices(), **self.env, **candidate.env}, shm_size=self.shm_size,
                                   network_mode="host", **self.gpu_kwargs())
        return sorted(p for p in out.rglob("*") if p.is_file())


# ---- the `docker` backend ---------------------------------------------------------------------
GPU_OF_VENDOR = {"amd": "rocm", "nvidia": "nvidia", "cpu": "none"}


def _open_docker(cfg, card, hw) -> DockerSandbox:
    t = cfg.target
    images = dict(getattr(t, "images", None) or {})
    if not images:
        raise BadInput("--backend docker needs --image FRAMEWORK=IMAGE (repeatable; e.g. --image "
                       "vllm=rocm/vllm:latest --image sglang=lmsysorg/sglang:latest)")
    default, ckpts = checkpoints_of(t)
    if default is None:
        raise BadInput("--backend docker needs --model-path DIR (the checkpoint on this host; it is mounted "
                       f"read-only at {MODEL_MOUNT})")
    sb = DockerSandbox(images, default, model_name=t.model, gpu=GPU_OF_VENDOR.get(hw.vendor, "none"),
                       shm_size="32g" if hw.vendor != "cpu" else "2g", checkpoints=ckpts)
    sb.check_images()  # also reaches the engine: exit 2 with what to do when it is down
    return sb


registry.register(registry.Ground("docker", _open_docker, help="serving frameworks in containers (docker SDK)"))
