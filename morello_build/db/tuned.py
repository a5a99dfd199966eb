"""Measured choices of ``synth --tune K`` in the synthesis DB: a table of their own.

``tuned`` keys a result by the synthesis namespace (ISA, threads, generator version, code fingerprint:
sqlite.namespace_id), the canonical spec and the host's CPU (a measurement says nothing about another
CPU). It holds how many candidates were measured (K), the chosen program's pinned decisions
(synth/candidates.py paths, as JSON) with its model cost, and the timings (JSON). The table is created
when first written, so a DB from before it keeps working, and a read-only DB without it is simply a miss.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from morello_build.db.sqlite import _retry_while_locked, _wrap, connect, namespace_id, writable

_TABLE = """CREATE TABLE IF NOT EXISTS tuned(
    ns INTEGER NOT NULL, spec TEXT NOT NULL, host TEXT NOT NULL, k INTEGER NOT NULL, path TEXT NOT NULL,
    cost REAL NOT NULL, timings TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY(ns, spec, host))"""


@dataclass(frozen=True)
class TunedEntry:
    k: int
    path: tuple  # ((decision text, main child index), ...)
    cost: float  # the chosen program's model cost (a check on replay)
    timings: dict  # "seconds": per candidate (cost order), "chosen": index, ...


def lookup(db_path, target, spec: str, host: str) -> TunedEntry | None:
    """The stored tuning result for ``spec`` on ``host``, or None (none stored, no table, no file)."""
    if not Path(db_path).exists():
        return None
    conn = connect(db_path, read_only=not writable(db_path))
    try:
        ns = namespace_id(conn, target, create=False)
        if ns is None:
            return None
        row = conn.execute(
            "SELECT k, path, cost, timings FROM tuned WHERE ns=? AND spec=? AND host=?", (ns, spec, host)
        )
        row = row.fetchone()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return None
        raise _wrap(db_path, e) from None
    finally:
        conn.close()
    if row is None:
        return None
    return TunedEntry(row[0], tuple(tuple(step) for step in json.loads(row[1])), row[2], json.loads(row[3]))


def entries(conn, ns_ids) -> list[tuple[str, str, TunedEntry]]:
    """(spec, host, entry) of every choice stored for namespaces ``ns_ids``; none where there is no table."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='tuned'").fetchone():
        return []
    rows = conn.execute(
        "SELECT spec, host, k, path, cost, timings FROM tuned WHERE ns IN (?, ?) ORDER BY spec, host", ns_ids
    )
    return [
        (spec, host, TunedEntry(k, tuple(tuple(step) for step in json.loads(path)), cost, json.loads(timings)))
        for spec, host, k, path, cost, timings in rows
    ]


def forget(conn, namespaces_sql: str, args) -> None:
    """Delete the entries of the namespaces ``namespaces_sql`` selects (``db prune``); no table, nothing."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name='tuned'").fetchone():
        conn.execute(f"DELETE FROM tuned WHERE ns IN ({namespaces_sql})", args)


def store(db_path, target, spec: str, host: str, entry: TunedEntry) -> bool:
    """Record ``entry`` (replacing an older one); False where the DB cannot be written."""
    if not writable(db_path):
        return False
    conn = connect(db_path)
    try:

        def write():
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(_TABLE)
                ns = namespace_id(conn, target)
                conn.execute(
                    "INSERT OR REPLACE INTO tuned VALUES(?,?,?,?,?,?,?,?)",
                    (
                        ns,
                        spec,
                        host,
                        entry.k,
                        json.dumps(entry.path),
                        entry.cost,
                        json.dumps(entry.timings),
                        time.time(),
                    ),
                )
                conn.execute("COMMIT")
            except sqlite3.Error:
                conn.execute("ROLLBACK")
                raise

        _retry_while_locked(write)
    except sqlite3.Error as e:
        raise _wrap(db_path, e) from None
    finally:
        conn.close()
    return True
