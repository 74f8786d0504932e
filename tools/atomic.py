"""Files that are whole or absent: a process killed mid-write (kill -9, a lost node) must not leave
half a JSON file for the next reader, or a resumed run, to trip on."""
from __future__ import annotations

from pathlib import Path


def write_whole(path: Path, text: str) -> None:
    """Write beside the target, then rename over it (atomic within one filesystem)."""
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
