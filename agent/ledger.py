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

LEDGER = "ledger.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trials (
  id INTEGER PRIMARY KEY, phase TEXT NOT NULL, kind TEXT NOT NULL, description TEXT NOT NULL,
  rationale TEXT NOT NULL DEFAULT '', candidate TEXT NOT NULL, incumbent_id INTEGER,
  proposal TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL DEFAULT 'proposed',
  outcome TEXT, verdict TEXT, reason TEXT, numbers TEXT, diagnoses TEXT NOT NULL DEFAULT '[]',
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
            d[k] = json.loads(d[k])
    return d


class Ledger:
    def __init__(self, run_dir: Path | str, *, create: bool = False):
        self.path = Path(run_dir) / LEDGER
        if not create and not self.path.is_file():
            raise FileNotFoundError(self.path)
        self.db = sqlite3.connect(self.path, isolation_level=None)  # autocommit: every write lands
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def _q(self, sql: str, args: tuple = ()) -> list[dict]:
        cur = self.db.execute(sql, args)
        return [_row(cur, r) for r in cur.fetchall()]

    # ---- meta ----
    def set_meta(self, key: str, value) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def meta(self, key: str, default=None):
        r = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(r[0]) if r else default

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

    def finish_trial(self, tid: int, *, verdict: str, reason: str, numbers: dict | None = None,
                     ground_s: float | None = None) -> None:
        t = self.trial(tid)
        now = time.time()
        self.update_trial(tid, status="done", verdict=verdict, reason=reason, numbers=numbers or {},
                          ended=now, wall_s=now - (t["started"] or now), ground_s=ground_s)

    def launched_count(self) -> int:
        """Trials that count against the budget: every candidate that reached the sandbox."""
        return self.db.execute("SELECT COUNT(*) FROM trials WHERE started IS NOT NULL").fetchone()[0]

    # ---- measurements ----
    def add_measurement(self, tid: int, role: str, data: dict, *, wall_s: float, ground_s: float) -> int:
        seq = self.db.execute("SELECT COUNT(*) FROM measurements WHERE trial_id=? AND role=?",
                              (tid, role)).fetchone()[0]
        cur = self.db.execute(
            "INSERT INTO measurements (trial_id, role, seq, data, wall_s, ground_s, created)"
            " VALUES (?,?,?,?,?,?,?)", (tid, role, seq, json.dumps(data), wall_s, ground_s, time.time()))
        return int(cur.lastrowid)

    def measurements(self, tid: int, role: str | None = None) -> list[dict]:
        if role is None:
            return self._q("SELECT * FROM measurements WHERE trial_id=? ORDER BY id", (tid,))
        return self._q("SELECT * FROM measurements WHERE trial_id=? AND role=? ORDER BY id", (tid, role))

    def set_measurement(self, mid: int, data: dict) -> None:
        self.db.execute("UPDATE measurements SET data=? WHERE id=?", (json.dumps(data), mid))

    # ---- patches ----
    def add_patch(self, *, pid: str, key: str, fix: str, framework: str, diff: str, files: list[str],
                  diagnosis: dict, log_excerpt: str) -> str:
        self.db.execute(
            "INSERT OR IGNORE INTO patches (id, key, fix, framework, diff, files, diagnosis, log_excerpt,"
            " created) VALUES (?,?,?,?,?,?,?,?,?)",
            (pid, key, fix, framework, diff, json.dumps(files), json.dumps(diagnosis), log_excerpt, time.time()))
        return pid

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
