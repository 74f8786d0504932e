"""What 'the same run' means when comparing an interrupted-and-resumed run with an
uninterrupted one: everything the ledger decided and measured, without wall-clock times."""
import json
import sqlite3
from pathlib import Path

TRIAL_COLS = ("id", "phase", "kind", "description", "candidate", "status", "outcome", "verdict", "reason", "reason_code",
              "numbers", "patch_id", "ground_s")


def signature(run_dir: Path) -> dict:
    db = sqlite3.connect(Path(run_dir) / "ledger.sqlite")
    try:
        trials = [dict(zip(TRIAL_COLS, r)) for r in db.execute(f"SELECT {', '.join(TRIAL_COLS)} FROM trials ORDER BY id")]
        meas = db.execute("SELECT trial_id, role, seq, data, ground_s FROM measurements ORDER BY trial_id, role, seq").fetchall()
        patches = db.execute("SELECT id, fix, status, diff FROM patches ORDER BY id").fetchall()
        meta = {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM meta")
                if k in ("stop_reason", "status", "ground")}
    finally:
        db.close()
    out = {"trials": trials, "measurements": meas, "patches": patches, "meta": meta}
    # Paths inside the run dir (log and config paths in diagnoses) differ between two run dirs only.
    return json.loads(json.dumps(out).replace(str(Path(run_dir).resolve()), "<RUN>").replace(str(run_dir), "<RUN>"))


def trials_done(run_dir: Path) -> int:
    p = Path(run_dir) / "ledger.sqlite"
    if not p.exists():
        return -1
    try:
        db = sqlite3.connect(p, timeout=0.1)
        try:
            return db.execute("SELECT COUNT(*) FROM trials WHERE status='done'").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return -1


def has_config(run_dir: Path) -> bool:
    """Whether a start got as far as recording the run's configuration (else: start it again)."""
    p = Path(run_dir) / "ledger.sqlite"
    if not p.exists():
        return False
    db = sqlite3.connect(p)
    try:
        return db.execute("SELECT COUNT(*) FROM meta WHERE key='config'").fetchone()[0] > 0
    except sqlite3.Error:
        return False
    finally:
        db.close()


def first_difference(got: dict, ref: dict) -> str:
    """Where a resumed run first parted from the uninterrupted one, in words (pytest's own diff
    of these nested dicts hides the trials in the middle)."""
    for a, b in zip(got["trials"], ref["trials"]):
        if a != b:
            keys = [k for k in TRIAL_COLS if a.get(k) != b.get(k)]
            return (f"trial {b['id']} differs in {keys}: got {[a.get(k) for k in keys]}, "
                    f"the uninterrupted run had {[b.get(k) for k in keys]}")
    if len(got["trials"]) != len(ref["trials"]):
        return f"{len(got['trials'])} trials, the uninterrupted run had {len(ref['trials'])}"
    for k in ("measurements", "patches"):
        for a, b in zip(got[k], ref[k]):
            if a != b:
                return f"the same trials, a different {k[:-1]}: got {a}, the uninterrupted run had {b}"
        if len(got[k]) != len(ref[k]):
            return f"{len(got[k])} {k}, the uninterrupted run had {len(ref[k])}"
    if got["meta"] != ref["meta"]:
        return f"the same trials, different meta: got {got['meta']}, the uninterrupted run had {ref['meta']}"
    return "no difference"
