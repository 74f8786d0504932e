"""The run's source of truth: a SQLite file in the run directory holding every candidate, launch
outcome, diagnosis, measurement (sweep, single stream, evals), verdict with its numbers and
reason, patch and its review, with wall and ground timings.

Graph state only carries ids into this ledger. Every write commits at once, so a kill -9 loses at
most the work in flight, never a finished trial.
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import get_args

from agent.errors import BadInput
from agent.records import Measurement, Result, RunStatus, Trial

LEDGER = "ledger.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trials (
  id INTEGER PRIMARY KEY, phase TEXT NOT NULL, kind TEXT NOT NULL, description TEXT NOT NULL,
  rationale TEXT NOT NULL DEFAULT '', candidate TEXT NOT NULL, incumbent_id INTEGER,
  proposal TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL DEFAULT 'proposed',
  outcome TEXT, verdict TEXT, reason TEXT, reason_code TEXT, numbers TEXT,
  diagnoses TEXT NOT NULL DEFAULT '[]',
  log_excerpt TEXT NOT NULL DEFAULT '', patch_id TEXT, created REAL NOT NULL,
  started REAL, ended REAL, wall_s REAL, ground_s REAL);
CREATE TABLE IF NOT EXISTS measurements (
  id INTEGER PRIMARY KEY, trial_id INTEGER NOT NULL, role TEXT NOT NULL, seq INTEGER NOT NULL,
  data TEXT NOT NULL, wall_s REAL, ground_s REAL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS patches (
  id TEXT PRIMARY KEY, key TEXT NOT NULL, fix TEXT NOT NULL, framework TEXT NOT NULL,
  diff TEXT NOT NULL, files TEXT NOT NULL, diagnosis TEXT NOT NULL, log_excerpt TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'pending', decided_by TEXT, reason TEXT, trial_id INTEGER,
  created REAL NOT NULL, decided REAL);
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, ts REAL NOT NULL, kind TEXT NOT NULL,
  message TEXT NOT NULL);
"""
_JSON = ("candidate", "proposal", "numbers", "diagnoses", "data", "files", "diagnosis")


def _row(cur: sqlite3.Cursor, row: tuple) -> dict:
    d = {c[0]: v for c, v in zip(cur.description, row)}
    for k in _JSON:
        if k in d and isinstance(d[k], str):
            try:
                d[k] = json.loads(d[k])
            except ValueError:
                raise LedgerCorrupt(f"a ledger row holds unreadable JSON in {k!r}") from None
    return d


class LedgerCorrupt(BadInput):
    """The ledger file cannot be read (truncated, overwritten): said in one line, exit 2."""


class _DB:
    """sqlite3 connection whose errors on a damaged file read as LedgerCorrupt, naming the file
    and what is left, instead of a traceback from deep inside resume/report/approvals."""

    def __init__(self, path: Path):
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None)  # autocommit: every write lands

    def _wrap(self, fn, *a):
        try:
            return fn(*a)
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and "locked" in str(e):
                raise
            raise LedgerCorrupt(f"the ledger {str(self.path)!r} is unreadable ({e}); the run cannot be resumed "
                                "or reported from it. What remains: its report.md / result.json if they "
                                "were written, and the server logs in the run dir") from None

    def execute(self, *a):
        return self._wrap(self.conn.execute, *a)

    def executescript(self, *a):
        return self._wrap(self.conn.executescript, *a)

    def close(self):
        self.conn.close()


class Ledger:
    def __init__(self, run_dir: Path | str, *, create: bool = False):
        self.path = Path(run_dir) / LEDGER
        if not create and not self.path.is_file():
            raise FileNotFoundError(self.path)
        self.db = _DB(self.path)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        cols = {r[1] for r in self.db.execute("PRAGMA table_info(trials)").fetchall()}
        if "reason_code" not in cols:  # a ledger from before reason codes: its old verdicts have none
            self.db.execute("ALTER TABLE trials ADD COLUMN reason_code TEXT")
        # The ground's own state (sim clock and launch counter, a real host's elapsed time), saved in
        # the same transaction as each finished unit of work, so a resumed run continues the
        # clock where the work it keeps left it (issue 13 item 6). Set by the runtime.
        self.ground = None

    def _with_ground(self, write) -> object:
        if self.ground is None:
            return write()
        self.db.execute("BEGIN IMMEDIATE")
        try:
            out = write()
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", ("ground", json.dumps(self.ground())))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return out

    def atomic(self, write):
        """write() in one transaction: a kill between its inserts leaves none of them (a patch row
        without its trial made the resumed run number its next patch one higher, issue 13)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            out = write()
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return out

    def save_ground(self) -> None:
        """After work that is never redone on resume (a MoE tuning run), keep the clock it spent."""
        self._with_ground(lambda: None)

    def close(self) -> None:
        self.db.close()

    def _q(self, sql: str, args: tuple = ()) -> list[dict]:
        cur = self.db.execute(sql, args)
        return [_row(cur, r) for r in self.db._wrap(cur.fetchall)]

    # ---- meta ----
    def set_meta(self, key: str, value) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def meta(self, key: str, default=None):
        r = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        try:
            return json.loads(r[0]) if r else default
        except ValueError:
            raise LedgerCorrupt(f"the ledger's {key!r} entry is unreadable JSON") from None

    def set_status(self, status: RunStatus) -> None:
        if status not in get_args(RunStatus):
            raise ValueError(f"run status {status!r}: allowed: {', '.join(get_args(RunStatus))}")
        self.set_meta("status", status)

    def status(self) -> RunStatus | None:
        return self.meta("status")

    def event(self, kind: str, message: str) -> None:
        self.db.execute("INSERT INTO events (ts, kind, message) VALUES (?,?,?)", (time.time(), kind, message))

    def events(self) -> list[dict]:
        return self._q("SELECT * FROM events ORDER BY id")

    # ---- trials ----
    def add_trial(self, *, phase: str, kind: str, description: str, candidate: dict,
                  incumbent_id: int | None, rationale: str = "", proposal: dict | None = None,
                  patch_id: str | None = None) -> int:
        cur = self.db.execute(
            "INSERT INTO trials (phase, kind, description, rationale, candidate, incumbent_id, proposal,"
            " patch_id, created) VALUES (?,?,?,?,?,?,?,?,?)",
            (phase, kind, description, rationale, json.dumps(candidate), incumbent_id,
             json.dumps(proposal or {}), patch_id, time.time()))
        return int(cur.lastrowid)

    def trial(self, tid: int) -> dict:
        rows = self._q("SELECT * FROM trials WHERE id=?", (tid,))
        if not rows:
            raise KeyError(f"no trial {tid}")
        return rows[0]

    def trials(self, **where) -> list[dict]:
        sql, args = "SELECT * FROM trials", ()
        if where:
            sql += " WHERE " + " AND ".join(f"{k}=?" for k in where)
            args = tuple(where.values())
        return self._q(sql + " ORDER BY id", args)

    def update_trial(self, tid: int, **fields) -> None:
        for k in _JSON:
            if k in fields and not isinstance(fields[k], str):
                fields[k] = json.dumps(fields[k])
        sets = ", ".join(f"{k}=?" for k in fields)
        self.db.execute(f"UPDATE trials SET {sets} WHERE id=?", (*fields.values(), tid))

    def start_trial(self, tid: int) -> None:
        if self.trial(tid)["started"] is None:
            self.update_trial(tid, status="running", started=time.time())

    def trial_record(self, tid: int) -> Trial:
        return Trial.model_validate(self.trial(tid))

    def trial_records(self) -> list[Trial]:
        return [Trial.model_validate(t) for t in self.trials()]

    def finish_trial(self, tid: int, r: Result) -> None:
        t = self.trial(tid)
        now = time.time()
        self._with_ground(lambda: self.update_trial(
            tid, status="done", verdict=r.verdict, reason=r.reason, reason_code=r.code, numbers=r.numbers,
            ended=now, wall_s=now - (t["started"] or now), ground_s=r.ground_s))

    def incumbent(self) -> int | None:
        """The configuration to beat: the newest kept trial (a trial is kept only against the
        incumbent of its time, so the newest kept one is the current incumbent). The one place the
        incumbent lives; graph state and meta do not keep a copy of it."""
        kept = [t for t in self.trials() if t["verdict"] == "kept"]
        return max(kept, key=lambda t: (t["ended"] or 0, t["id"]))["id"] if kept else None

    def launched_count(self) -> int:
        """Trials that count against the budget: every candidate that reached the sandbox."""
        return self.db.execute("SELECT COUNT(*) FROM trials WHERE started IS NOT NULL").fetchone()[0]

    # ---- measurements ----
    def add_measurement(self, tid: int, role: str, data: dict, *, wall_s: float, ground_s: float) -> int:
        def write() -> int:
            seq = self.db.execute("SELECT COUNT(*) FROM measurements WHERE trial_id=? AND role=?",
                                  (tid, role)).fetchone()[0]
            cur = self.db.execute(
                "INSERT INTO measurements (trial_id, role, seq, data, wall_s, ground_s, created)"
                " VALUES (?,?,?,?,?,?,?)", (tid, role, seq, json.dumps(data), wall_s, ground_s, time.time()))
            return int(cur.lastrowid)
        return self._with_ground(write)

    def measurements(self, tid: int, role: str | None = None) -> list[dict]:
        if role is None:
            return self._q("SELECT * FROM measurements WHERE trial_id=? ORDER BY id", (tid,))
        return self._q("SELECT * FROM measurements WHERE trial_id=? AND role=? ORDER BY id", (tid, role))

    def measurement_records(self, tid: int, role: str | None = None) -> list[Measurement]:
        return [Measurement.model_validate(m) for m in self.measurements(tid, role)]

    def set_measurement(self, mid: int, data: dict) -> None:
        self.db.execute("UPDATE measurements SET data=? WHERE id=?", (json.dumps(data), mid))

    # ---- patches ----
    def add_patch(self, *, pid: str, key: str, fix: str, framework: str, diff: str, files: list[str],
                  diagnosis: dict, log_excerpt: str, trial_id: int | None = None) -> str:
        self.db.execute(
            "INSERT OR IGNORE INTO patches (id, key, fix, framework, diff, files, diagnosis, log_excerpt,"
            " trial_id, created) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (pid, key, fix, framework, diff, json.dumps(files), json.dumps(diagnosis), log_excerpt, trial_id,
             time.time()))
        return pid

    def trial_reviews(self, tid: int) -> list[dict]:
        """Everything a trial waits on a reviewer for: its patch and any linked review records."""
        return self._q("SELECT p.* FROM patches p WHERE p.trial_id=? OR p.id=(SELECT patch_id FROM trials"
                       " WHERE id=?) ORDER BY p.created", (tid, tid))

    def patch(self, pid: str) -> dict:
        rows = self._q("SELECT * FROM patches WHERE id=?", (pid,))
        if not rows:
            raise KeyError(pid)
        return rows[0]

    def patches(self, status: str | None = None) -> list[dict]:
        if status is None:
            return self._q("SELECT * FROM patches ORDER BY created")
        return self._q("SELECT * FROM patches WHERE status=? ORDER BY created", (status,))

    def decide_patch(self, pid: str, status: str, *, by: str, reason: str = "") -> None:
        """Record a review outcome; `by` names who decided (a human at the CLI, or the policy)."""
        if status not in ("approved", "rejected", "skipped"):
            raise ValueError(status)
        self.db.execute("UPDATE patches SET status=?, decided_by=?, reason=?, decided=? WHERE id=?",
                        (status, by, reason, time.time(), pid))

    def rejected_keys(self) -> dict[str, str]:
        """Content keys of patches a human (or the policy) turned down, with the reason: the
        planner never proposes these again."""
        return {r["key"]: r["reason"] or "" for r in self.patches() if r["status"] in ("rejected", "skipped")}
