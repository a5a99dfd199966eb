"""The synthesis DB file: its schema, connections, namespaces and errors (the Store, store.py, reads and writes it).

Schema (``SCHEMA`` below; bump ``SCHEMA_VERSION`` on any change):
- ``meta``: schema version and the generator version that created the file.
- ``ns``: one namespace per (ISA, thread count, generator version, code fingerprint); a target priced by
  a cost profile other than the built-in table has "+costs:<Target.cost_fingerprint>" after the code's. Results of other
  namespaces are never read: a new version or an edited synthesizer starts from an empty namespace, and
  programs for 2 threads never answer for 16; serial specs, whose programs do not depend on the thread
  count, are stored once in the 1-thread namespace (store.py). (Schema 3 added ``threads``: a schema-2
  file is migrated in place, its namespaces marked 2 threads, the count every schema-2 result was
  synthesized for.)
- ``keys``: table keys (see encode.py) per namespace; ``decisions``: decision strings.
- ``rects``: ``rtree_i32`` over (key, shape coordinate 1..3, L1 bytes) with the VRF and RF byte ranges,
  the decision, the range of cost per unit of iteration volume (a sanity check on replay) and the number
  of synthesized specs merged into the rectangle as auxiliary columns (an R*Tree indexes at most five dimensions).
- ``runs``: per store session: lookups, hits, misses, results written (for ``db stats``).

Concurrency: WAL journal, a long busy timeout, and results buffered in memory and written in short
``BEGIN IMMEDIATE`` transactions (every ``flush_every`` results and at close). Readers never block.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path

import morello_build
from morello_build.fingerprint import synthesis_fingerprint

SCHEMA_VERSION = 3
BUSY_TIMEOUT_S = 120.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ns(
    id INTEGER PRIMARY KEY, isa TEXT NOT NULL, threads INTEGER NOT NULL, version TEXT NOT NULL,
    fingerprint TEXT NOT NULL, created REAL NOT NULL, UNIQUE(isa, threads, version, fingerprint));
CREATE TABLE IF NOT EXISTS keys(id INTEGER PRIMARY KEY, ns INTEGER NOT NULL, text TEXT NOT NULL,
    UNIQUE(ns, text));
CREATE TABLE IF NOT EXISTS decisions(id INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE);
CREATE VIRTUAL TABLE IF NOT EXISTS rects USING rtree_i32(
    id, klo, khi, alo, ahi, blo, bhi, clo, chi, llo, lhi,
    +vlo, +vhi, +rlo, +rhi, +decision, +nlo, +nhi, +points);
CREATE TABLE IF NOT EXISTS runs(
    id INTEGER PRIMARY KEY, ns INTEGER NOT NULL, started REAL NOT NULL, seconds REAL NOT NULL,
    pid INTEGER NOT NULL, spec TEXT, top_hit INTEGER, lookups INTEGER NOT NULL, hits INTEGER NOT NULL,
    misses INTEGER NOT NULL, stale INTEGER NOT NULL, puts INTEGER NOT NULL, skipped INTEGER NOT NULL);
"""


class DBError(ValueError):
    """The DB file is unusable (corrupt, from an incompatible schema, locked too long): one-line message."""


def recovery(path) -> str:
    return f"delete it or run `morello-build db rebuild --db {path}`"


def corrupt(path, why: str) -> DBError:
    return DBError(f"synthesis DB {path} is corrupt ({why}); {recovery(path)}")


def _wrap(path, e: sqlite3.Error) -> DBError:
    msg = str(e)
    if "locked" in msg or "busy" in msg:
        return DBError(f"synthesis DB {path} stayed locked by another process for {BUSY_TIMEOUT_S:.0f} s ({msg})")
    if "readonly" in msg or "read-only" in msg or "unable to open" in msg:
        return DBError(f"cannot write synthesis DB {path} ({msg}); pass --db PATH or --db none")
    return corrupt(path, msg)


def code_fingerprint() -> str:
    """fingerprint.synthesis_fingerprint(): an edited synthesizer never reuses stale decisions.
    (``_MORELLO_DB_FINGERPRINT`` overrides it: tests pin it while others edit the tree.)"""
    return os.environ.get("_MORELLO_DB_FINGERPRINT") or synthesis_fingerprint()


def check_header(path: Path) -> None:
    """Refuse garbage and truncated files before SQLite sees them (it may not notice until later)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return  # SQLite treats an empty file as a new database
    with open(path, "rb") as f:
        head = f.read(100)
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise corrupt(path, "file is not a database")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    valid = head[24:28] == head[92:96] and pages > 0
    wal = Path(str(path) + "-wal")
    wal_live = wal.exists() and wal.stat().st_size > 0
    if valid and pages * page > size and not wal_live:
        raise corrupt(path, f"truncated: {size:,} of {pages * page:,} bytes")


def writable(path) -> bool:
    """Whether this process can write the DB at ``path``: the file, and its WAL files (created in its
    directory). A new file is created by ``connect`` (or fails there with a clear error)."""
    path = Path(path)
    if not path.exists():
        return True
    wal_files = [Path(f"{path}-wal"), Path(f"{path}-shm")]
    beside = os.access(path.parent, os.W_OK) or all(os.access(p, os.W_OK) for p in wal_files)
    return os.access(path, os.W_OK) and beside


_warned_read_only: set[str] = set()


def warn_read_only(path) -> None:
    """Once per process and file: a read-only DB serves what it holds and stores nothing."""
    if str(path) not in _warned_read_only:
        _warned_read_only.add(str(path))
        # As tools.errors.warn (the DB, hashed by the synthesis fingerprint, imports nothing of tools/).
        msg = f"synthesis DB {path} is read-only: using its results, but new results are not stored"
        print(f"morello-build: warning: {msg}", file=sys.stderr)


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """``mode=ro``; where SQLite cannot create the WAL index beside a read-only file (a read-only
    directory or mount), ``immutable``: nothing can change the file there."""
    uri = path.absolute().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        conn.close()
    return sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)


def connect(path, *, create: bool = True, read_only: bool = False) -> sqlite3.Connection:
    """A connection to the DB at ``path`` (created if ``create``; only read if ``read_only``)."""
    path = Path(path)
    if read_only:
        check_header(path)
        try:
            conn = _connect_read_only(path)
            row = _schema_row(conn)
        except sqlite3.Error as e:
            raise _wrap(path, e) from None
        return _check_schema(conn, row, path)
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DBError(
                f"cannot create synthesis DB {path}: {e.strerror} ({e.filename}); pass another --db PATH, or --db none"
            ) from None
    check_header(path)
    try:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA synchronous=NORMAL")
        row = _retry_while_locked(lambda: _schema_row(conn))
        if row[0] == "2":
            row = _retry_while_locked(lambda: _migrate_from_2(conn))
    except sqlite3.Error as e:
        raise _wrap(path, e) from None
    return _check_schema(conn, row, path)


def _check_schema(conn, row, path) -> sqlite3.Connection:
    if row[0] != str(SCHEMA_VERSION):
        conn.close()
        raise DBError(
            f"synthesis DB {path} has schema {row[0]}, this morello-build {morello_build.__version__} "
            f"needs schema {SCHEMA_VERSION}; {recovery(path)}"
        )
    return conn


def _schema_row(conn: sqlite3.Connection):
    """The stored schema version, creating the tables (in WAL mode) in a new file."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
    except sqlite3.OperationalError as e:
        if "no such table" not in str(e):
            raise
        row = None
    if row is not None:
        return row
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in SCHEMA.split(";"):
            if stmt.strip():
                conn.execute(stmt)
        conn.execute("INSERT OR IGNORE INTO meta VALUES('schema', ?)", (str(SCHEMA_VERSION),))
        conn.execute("INSERT OR IGNORE INTO meta VALUES('created_by', ?)", (morello_build.__version__,))
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.execute("ROLLBACK")
        raise
    return conn.execute("SELECT value FROM meta WHERE name='schema'").fetchone()


def _migrate_from_2(conn: sqlite3.Connection):
    """Schema 2 -> 3: the namespaces gain their thread count (2: before it was a parameter, every
    target had 2 cores). SQLite cannot change a UNIQUE constraint, so the table is copied."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("SELECT value FROM meta WHERE name='schema'").fetchone()[0] == "2":  # not done meanwhile
            conn.execute("ALTER TABLE ns RENAME TO ns_v2")
            conn.execute(next(s for s in SCHEMA.split(";") if "EXISTS ns(" in s))
            conn.execute("INSERT INTO ns SELECT id, isa, 2, version, fingerprint, created FROM ns_v2")
            conn.execute("DROP TABLE ns_v2")
            conn.execute("UPDATE meta SET value=? WHERE name='schema'", (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.execute("ROLLBACK")
        raise
    return conn.execute("SELECT value FROM meta WHERE name='schema'").fetchone()


def _retry_while_locked(step):
    """Run ``step``, again while another process holds the file: SQLite answers a journal-mode change
    (two builds creating one DB at once) with "locked" at once, without waiting on the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            return step()
        except sqlite3.OperationalError as e:
            msg = str(e).lower()
            if ("locked" not in msg and "busy" not in msg) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def namespace_ids(conn, target) -> tuple[int | None, int | None]:
    """The existing namespaces a store for ``target`` reads: its own, and the 1-thread one that holds the
    serial specs of every thread count (store.Store); None where absent."""
    from dataclasses import replace

    return namespace_id(conn, target, create=False), namespace_id(conn, replace(target, threads=1), create=False)


def ns_fingerprint(target) -> str:
    """A namespace's fingerprint: the code's, and the cost profile's unless the target is priced by the
    built-in table (so built-in results keep their namespace; other profiles never share it)."""
    code = code_fingerprint()
    return code if target.builtin_costs else f"{code}+costs:{target.cost_fingerprint}"


def namespace_id(conn, target, create: bool = True) -> int | None:
    args = (target.isa, target.threads, morello_build.__version__, ns_fingerprint(target))
    query = "SELECT id FROM ns WHERE isa=? AND threads=? AND version=? AND fingerprint=?"
    row = conn.execute(query, args).fetchone()
    if row is None and create:
        conn.execute(
            "INSERT OR IGNORE INTO ns(isa, threads, version, fingerprint, created) VALUES(?,?,?,?,?)",
            args + (time.time(),),
        )
        row = conn.execute(query, args).fetchone()
    return row[0] if row else None
