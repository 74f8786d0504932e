"""DockerSandbox: serving frameworks in containers through the docker SDK (`tools.protocols.Sandbox`).

One image per framework (e.g. rocm/sgl-dev, rocm/vllm, rocm/atom). GPUs: ROCm passes `/dev/kfd`
and `/dev/dri` (+ group video, ipc host, seccomp unconfined, as AMD's docs run them); NVIDIA uses a
device request for all GPUs. Mounts: the weights (read-only), a patched framework source tree over
the installed package, tuned MoE configs (the framework's env variable points at them). Host
networking by default; with `network="bridge"` the server's port is published on a free host port.
The docker client is injected so tests use a fake that records calls and serves logs.
"""
from __future__ import annotations

import io
import subprocess
import tarfile
import time
from pathlib import Path

from sandboxes import registry
from tools.errors import BadInput
from sandboxes.local import NotSupported
from tools import frameworks, logs
from tools.candidate import Candidate
from tools.server import RunningServer, free_port, wait_ready

MODEL_MOUNT = "/inferloop/model"
MOE_MOUNT = "/inferloop/moe_configs"
OUT_MOUNT = "/inferloop/out"
_PKG = {"vllm": "vllm", "sglang": "sglang", "atom": "atom"}


class ContainerHandle:
    """A container as a `tools.server.Handle`: status, logs (mirrored to a file), stop+remove."""

    def __init__(self, container, log_path: Path):
        self.c, self.log_path = container, log_path
        self._stopped = False

    def poll(self) -> int | None:
        try:
            self.c.reload()
        except Exception:  # removed behind our back: treat as dead
            return -1
        if self.c.status in ("exited", "dead"):
            return int(self.c.attrs.get("State", {}).get("ExitCode", -1))
        return None

    def log_text(self) -> str:
        try:
            text = self.c.logs(stdout=True, stderr=True).decode(errors="replace")
        except Exception:
            return logs.read(self.log_path)
        self.log_path.write_text(text)
        return text

    def stop(self, grace_s: float = 10.0) -> None:
        if self._stopped:
            return
        self.log_text()  # keep the last words before the container goes
        for step in (lambda: self.c.stop(timeout=int(grace_s)), lambda: self.c.remove(force=True)):
            try:
                step()
            except Exception:
                pass
        self._stopped = True


class DockerSandbox:
    name = "docker"

    def __init__(self, images: dict[str, str] | str, model_dir: Path | str, *, model_name: str | None = None,
                 gpu: str = "rocm", client=None, shm_size: str = "32g", network: str = "host",
                 host: str = "127.0.0.1", env: dict[str, str] | None = None, python: str = "python3",
                 ready_timeout_s: float = 1800.0, tuner_commands: dict[str, list[str]] | None = None):
        if gpu not in ("rocm", "nvidia", "none"):
            raise BadInput(f"unknown gpu kind {gpu!r}; allowed: nvidia, none, rocm")
        if network not in ("host", "bridge"):
            raise BadInput(f"unknown network {network!r}; allowed: bridge, host")
        self.images = images if isinstance(images, dict) else {fw: images for fw in frameworks.NAMES}
        self.model_dir = Path(model_dir)
        self.model_name = model_name or self.model_dir.name
        self.gpu, self.shm_size, self.network, self.host = gpu, shm_size, network, host
        self.env, self.python, self.ready_timeout_s = dict(env or {}), python, ready_timeout_s
        self.tuner_commands = tuner_commands or {}
        self._client = client
        self._sources: dict[str, tuple[Path, str]] = {}  # framework -> (host tree, package path in image)
        self._t0 = time.monotonic()

    @property
    def client(self):
        if self._client is None:
            import docker
            try:
                self._client = docker.from_env()
            except Exception as e:
                raise BadInput(f"cannot talk to the docker engine: {e}") from None
        return self._client

    def image(self, framework: str) -> str:
        if framework not in self.images:
            raise BadInput(f"no image configured for {framework}; configured: {', '.join(sorted(self.images))}")
        return self.images[framework]

    def gpu_kwargs(self) -> dict:
        if self.gpu == "rocm":
            return {"devices": ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"], "group_add": ["video"],
                    "security_opt": ["seccomp=unconfined"], "cap_add": ["SYS_PTRACE"], "ipc_mode": "host"}
        if self.gpu == "nvidia":
            from docker.types import DeviceRequest
            return {"device_requests": [DeviceRequest(count=-1, capabilities=[["gpu"]])], "ipc_mode": "host"}
        return {}

    def _mounts(self, fw: frameworks.Framework, c: Candidate, run_dir: Path) -> tuple[dict, dict]:
        volumes = {str(self.model_dir.resolve()): {"bind": MODEL_MOUNT, "mode": "ro"}}
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
            env[fw.moe_config_env] = (f"{MOE_MOUNT}/{Path(c.moe_configs[0]).name}" if fw.name == "atom"
                                      else MOE_MOUNT)
        return volumes, env

    def launch(self, candidate: Candidate, run_dir: Path) -> RunningServer:
        fw = frameworks.get(candidate.framework)
        fw.validate(candidate)
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        volumes, moe_env = self._mounts(fw, candidate, run_dir)
        host_port = free_port(self.host)
        inner_port = host_port if self.network == "host" else 8000
        bind_host = self.host if self.network == "host" else "0.0.0.0"
        argv = fw.argv(candidate, model=MODEL_MOUNT, port=inner_port, host=bind_host,
                       served_name=self.model_name, python=self.python)
        (run_dir / "launch.txt").write_text(logs.redact(" ".join(argv)) + "\n")
        kw = {"network_mode": "host"} if self.network == "host" else {"ports": {f"{inner_port}/tcp": (self.host, host_port)}}
        container = self.client.containers.run(
            self.image(fw.name), command=argv, detach=True, environment={**self.env, **candidate.env, **moe_env},
            volumes=volumes, shm_size=self.shm_size, name=f"inferloop-{candidate.key()}-{host_port}",
            labels={"inferloop": "1", "inferloop.candidate": candidate.key()}, **kw, **self.gpu_kwargs())
        log_path = run_dir / f"server-{host_port}.log"
        handle = ContainerHandle(container, log_path)
        url = f"http://{self.host}:{host_port}"
        wait_ready(handle, url=url, ready_line=fw.ready_line, health_path=fw.health_path,
                   timeout_s=self.ready_timeout_s, diagnose=fw.diagnose, log_path=log_path)
        return RunningServer(handle, url=url, model=self.model_name if fw.served_name_flag else MODEL_MOUNT,
                             log_path=log_path, tokenizer_dir=self.model_dir)

    def _package_path(self, framework: str) -> str:
        code = (f"import importlib.util; s = importlib.util.find_spec('{_PKG[framework]}'); "
                "print(s.submodule_search_locations[0] if s else '')")
        out = self.client.containers.run(self.image(framework), command=[self.python, "-c", code], remove=True)
        path = (out.decode() if isinstance(out, bytes) else str(out)).strip().splitlines()
        if not path or not path[-1].startswith("/"):
            raise NotSupported(f"{framework} is not importable in image {self.image(framework)}")
        return path[-1]

    def source_tree(self, framework: str, run_dir: Path) -> Path:
        """The image's installed package copied out as a git work tree; later launches mount it
        over the package, so approved patches take effect."""
        if framework in self._sources:
            return self._sources[framework][0]
        frameworks.get(framework)
        pkg_path = self._package_path(framework)
        dest = Path(run_dir) / "src" / framework
        dest.mkdir(parents=True, exist_ok=True)
        c = self.client.containers.create(self.image(framework), command=["true"])
        try:
            stream, _ = c.get_archive(pkg_path)
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                tar.extractall(dest.parent, filter="data")
        finally:
            c.remove(force=True)
        tree = dest.parent / Path(pkg_path).name
        git = ["git", "-C", str(tree), "-c", "user.name=inferloop", "-c", "user.email=inferloop@localhost"]
        for args in (["init", "-q"], ["add", "-A", "."], ["commit", "-q", "-m", f"pristine {framework} from image"]):
            subprocess.run(git + args, check=True, capture_output=True, timeout=600)
        self._sources[framework] = (tree, pkg_path)
        return tree

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
                                   environment={**self.env, **candidate.env}, shm_size=self.shm_size,
                                   network_mode="host", **self.gpu_kwargs())
        return sorted(p for p in out.rglob("*") if p.is_file())

    def elapsed_s(self) -> float:
        return time.monotonic() - self._t0


# ---- the `docker` backend ---------------------------------------------------------------------
def _open_docker(cfg, card, hw) -> DockerSandbox:
    # The CLI has no options for images or the checkpoint yet; this passes what
    # `agent optimize --backend docker` always passed (see the issue-12 note: it is not a
    # usable docker configuration and needs its own options).
    return DockerSandbox(cfg.target.model, cfg.target.hw)


registry.register(registry.Ground("docker", _open_docker, help="serving frameworks in containers (docker SDK)"))
