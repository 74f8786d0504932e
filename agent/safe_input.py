"""Files and folders named on the command line, checked before anything reads or writes them
(issue 13 items 8 and 13): one clear line and exit 2, never a traceback, a hang or a fork bomb.

- A settings file is read as bytes with a size cap, must be UTF-8 text, and may hold no YAML
  anchors, aliases or tags: `&a [*a, *a, ...]` nested ten deep is a few hundred bytes that
  expand to billions of nodes (the playbook loader refuses the same for the same reason).
- A run directory must be a directory we can create or write; /proc, /sys and /dev are
  never run directories.
"""
from __future__ import annotations

import os
from pathlib import Path

import yaml

from agent.errors import BadInput

MAX_SETTINGS_BYTES = 1 << 20
_SPECIAL = ("/proc", "/sys", "/dev")


def load_yaml_file(path: str, what: str) -> object:
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"{what} {path!r}: no such file")
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_SETTINGS_BYTES + 1)
    except OSError as e:
        raise BadInput(f"{what} {path!r}: cannot be read ({e.strerror})") from None
    if len(raw) > MAX_SETTINGS_BYTES:
        raise BadInput(f"{what} {path!r} is larger than {MAX_SETTINGS_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{what} {path!r} is not UTF-8 text (a binary file?)") from None
    try:
        for tok in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(tok, (yaml.AliasToken, yaml.AnchorToken, yaml.TagToken)):
                raise BadInput(f"{what} {path!r}: YAML anchors, aliases and tags are not allowed")
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise BadInput(f"{what} {path!r} is not YAML/JSON: {str(e).splitlines()[0]}") from None


def prepare_run_dir(run_dir: Path) -> bool:
    """Create the run directory (and parents); True if this call created it. BadInput if the
    path is a file, a special filesystem, or not writable."""
    p = Path(run_dir)
    real = p.resolve()
    special = next((s for s in _SPECIAL if str(real) == s or str(real).startswith(s + "/")), None)
    if special:
        raise BadInput(f"--run-dir {str(run_dir)!r} is under {special}; give a directory on a normal filesystem")
    if p.exists() and not p.is_dir():
        raise BadInput(f"--run-dir {str(run_dir)!r} exists and is not a directory")
    created = not p.exists()
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"--run-dir {str(run_dir)!r} cannot be created: {e.strerror}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise BadInput(f"--run-dir {str(run_dir)!r} is not writable")
    return created
