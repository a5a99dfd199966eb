"""The SQLite store: an R*Tree of rectangles of identical decisions, shared safely between processes.

Schema (``SCHEMA`` below; bump ``SCHEMA_VERSION`` on any change):
- ``meta``: schema version and the generator version that created the file.
- ``ns``: one namespace per (ISA, generator version, code fingerprint). Results of other namespaces are
  never read: a new version or an edited synthesizer starts from an empty namespace.
- ``keys``: table keys (see encode.py) per namespace; ``decisions``: decision strings.
- ``rects``: ``rtree_i32`` over (key, shape coordinate 1..3, L1 bytes) with the VRF and RF byte ranges,
  the decision, the range of cost per unit of iteration volume (a sanity check on replay) and the number
  of synthesized specs merged into the rectangle as auxiliary columns (an R*Tree indexes at most five dimensions).
- ``runs``: per store session: lookups, hits, misses, results written (for ``db stats``).

Concurrency: WAL journal, a long busy timeout, and results buffered in memory and written in short
``BEGIN IMMEDIATE`` transactions (every ``flush_every`` results and at close). Readers never block.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from pathlib import Path

import morello_build
from morello_build.db import encode

SCHEMA_VERSION = 2
BUSY_TIMEOUT_S = 120.0
FLUSH_EVERY = 2000
FLUSH_SECONDS = 5.0
UNBOUNDED = 2**31 - 1  # upper limit of a box open upwards (rtree_i32 coordinates are 32-bit)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ns(
    id INTEGER PRIMARY KEY, isa TEXT NOT NULL, version TEXT NOT NULL, fingerprint TEXT NOT NULL,
    created REAL NOT NULL, UNIQUE(isa, version, fingerprint));
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

_FIND = (
    "SELECT decision, nlo, nhi FROM rects WHERE klo<=?1 AND khi>=?1 AND alo<=?2 AND ahi>=?2 AND blo<=?3"
    " AND bhi>=?3 AND clo<=?4 AND chi>=?4 AND llo<=?5 AND lhi>=?5 AND vlo<=?6 AND vhi>=?6"
    " AND rlo<=?7 AND rhi>=?7 ORDER BY id DESC"
)
# Rectangles of the same key, decision and upper limits whose shapes touch or overlap box (alo..chi).
_NEIGHBOURS = (
    "SELECT id, alo, ahi, blo, bhi, clo, chi, llo, vlo, rlo, nlo, nhi, points FROM rects"
    " WHERE klo=?1 AND khi=?1 AND lhi=?2 AND vhi=?3 AND rhi=?4 AND decision=?5"
    " AND alo<=?7+1 AND ahi>=?6-1 AND blo<=?9+1 AND bhi>=?8-1 AND clo<=?11+1 AND chi>=?10-1"
)


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


_FINGERPRINT_FILES = (
    "ir/spec.py", "ir/layout.py", "synth/cost.py", "synth/search.py", "ir/impl.py", "synth/overwrite.py",
    "target/__init__.py", "target/kernels/__init__.py", "target/kernels/common.py", "target/kernels/outer.py",
    "target/kernels/dot.py", "target/kernels/moves.py", "target/kernels/zero.py", "db/encode.py", "synth/actions/__init__.py", "synth/actions/plan.py",
    "synth/actions/tile.py", "synth/actions/move.py", "synth/actions/accum.py", "synth/actions/policy.py",
)


def code_fingerprint() -> str:
    """Hash of the synthesizer's sources: results of an edited search or cost model are not reused.
    (``_MORELLO_DB_FINGERPRINT`` overrides it: tests pin it while others edit the tree.)"""
    pinned = os.environ.get("_MORELLO_DB_FINGERPRINT")
    if pinned:
        return pinned
    root = Path(morello_build.__file__).parent
    h = hashlib.sha256()
    for name in _FINGERPRINT_FILES:
        try:
            h.update((root / name).read_bytes())
        except OSError:
            h.update(b"?" + name.encode())
    return h.hexdigest()[:16]


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


def connect(path, *, create: bool = True) -> sqlite3.Connection:
    path = Path(path)
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DBError(f"cannot create synthesis DB {path}: {e.strerror} ({e.filename}); "
                          "pass another --db PATH, or --db none") from None
    check_header(path)
    try:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA synchronous=NORMAL")
        row = _retry_while_locked(lambda: _schema_row(conn))
    except sqlite3.Error as e:
        raise _wrap(path, e) from None
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


def namespace_id(conn, target, create: bool = True) -> int | None:
    args = (target.isa, morello_build.__version__, code_fingerprint())
    row = conn.execute("SELECT id FROM ns WHERE isa=? AND version=? AND fingerprint=?", args).fetchone()
    if row is None and create:
        conn.execute("INSERT OR IGNORE INTO ns(isa, version, fingerprint, created) VALUES(?,?,?,?)",
                     args + (time.time(),))
        row = conn.execute("SELECT id FROM ns WHERE isa=? AND version=? AND fingerprint=?", args).fetchone()
    return row[0] if row else None


def _cost_matches(cost: float, nlo: float, nhi: float, volume: int) -> bool:
    """Whether a replayed cost lies in the rectangle's range of cost per unit volume."""
    n = cost / volume
    tol = 1e-9 * max(abs(nlo), abs(nhi), 1e-12)
    return nlo - tol <= n <= nhi + tol


class Store:
    """The persistent memo the search consults (``get``) and feeds (``put``); see search.Search."""

    def __init__(self, path, target, *, flush_every: int = FLUSH_EVERY, record_run: bool = True):
        self.path = str(path)
        self.target = target
        self.flush_every = flush_every
        self.record_run = record_run
        self.conn = connect(path)
        try:
            self.ns = namespace_id(self.conn, target)
            self._keys = dict(self.conn.execute("SELECT text, id FROM keys WHERE ns=?", (self.ns,)))
            # Keys that may have rectangles in the file, and those that may have rectangles this store did
            # not write (only those can answer a lookup: the search's memo holds everything it put).
            self._db_keys = set(self._keys.values())
            self._lookup_keys = set(self._db_keys)
            self._decisions = {i: t for i, t in self.conn.execute("SELECT id, text FROM decisions")}
        except sqlite3.Error as e:
            self.conn.close()
            raise _wrap(path, e) from None
        self._decision_ids = {t: i for i, t in self._decisions.items()}
        self._pending: list = []
        self._required_memo: dict = {}
        self._last_flush = time.monotonic()
        self._started = time.time()
        self.lookups = self.hits = self.misses = self.stale = self.puts = self.skipped = 0
        self.top_spec: str | None = None
        self.top_hit: bool | None = None
        self.closed = False

    # -- the search hook -----------------------------------------------------------------------------
    def get(self, spec, search):
        """(True, impl or None) if a stored decision answers ``spec`` (replayed through ``search``)."""
        self.lookups += 1
        first = self.top_spec is None
        if first:
            self.top_spec = spec.describe()
        found, impl = self._get(spec, search)
        if found:
            self.hits += 1
        else:
            self.misses += 1
        if first:
            self.top_hit = found
        return found, impl

    def _get(self, spec, search):
        key, coords, volume = encode.op_key(spec.op)
        kid = self._keys.get(key)
        if kid not in self._lookup_keys:
            return False, None
        q = (kid,) + coords + spec.limits.as_tuple()
        try:
            rows = self.conn.execute(_FIND, q).fetchall()
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None
        for decision, nlo, nhi in rows:
            text = self._decision(decision)
            if text == encode.NONE:
                return True, None
            impl = search.apply(spec, encode.action_from_text(text, spec.op))
            if impl is not None and _cost_matches(impl.cost, nlo, nhi, volume):
                return True, impl
            self.stale += 1  # cannot happen within one namespace unless the file was tampered with
        return False, None

    def _decision(self, did: int) -> str:
        text = self._decisions.get(did)
        if text is None:
            row = self.conn.execute("SELECT text FROM decisions WHERE id=?", (did,)).fetchone()
            text = row[0] if row else "?"
            self._decisions[did] = text
        return text

    def put(self, spec, impl, unbounded: tuple[bool, bool, bool] | None = None) -> None:
        """Record the search's answer for ``spec`` as the box [limits it needs, limits it was found under].

        ``unbounded[i]``: the search may state that no action was refused for lack of memory at level i
        (L1, VRF, RF) anywhere in this spec's search, so more of it changes nothing: the box is then
        open upwards in that level (a non-empty answer only; "nothing fits" stays bounded).
        """
        self.puts += 1
        key, coords, volume = encode.op_key(spec.op)
        hi = spec.limits.as_tuple()
        if unbounded and impl is not None:
            hi = tuple(UNBOUNDED if u else h for u, h in zip(unbounded, hi))
        if impl is None:
            lo, ncost = (0, 0, 0), 0.0
        else:
            lo = encode.required_limits(impl, self.target, self._required_memo)
            ncost = impl.cost / volume
        if any(a > b for a, b in zip(lo, hi)):
            # The in-memory memo reused a body at limits its rounded L1 does not leave it: this answer
            # is not what a fresh search finds under these limits, so it is not stored.
            self.skipped += 1
            return
        text = encode.decision_text(spec, impl, self.target)
        self._pending.append((key, text, hi, [coords[0], coords[0], coords[1], coords[1], coords[2], coords[2],
                                               *lo, ncost, ncost, 1]))
        if len(self._pending) >= self.flush_every or time.monotonic() - self._last_flush > FLUSH_SECONDS:
            self.flush()

    # -- writing ---------------------------------------------------------------------------------------
    def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        try:
            self._write(pending)
        except sqlite3.Error as e:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise _wrap(self.path, e) from None
        self._last_flush = time.monotonic()

    def _write(self, pending) -> None:
        groups: dict[tuple, list] = {}
        for key, text, hi, box in pending:
            groups.setdefault((key, text, hi), []).append(box)
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        # Keys other processes added since we looked may have rectangles too.
        for text, kid in conn.execute("SELECT text, id FROM keys WHERE ns=?", (self.ns,)):
            if text not in self._keys:
                self._keys[text] = kid
                self._db_keys.add(kid)
                self._lookup_keys.add(kid)
        for (key, text, hi), boxes in groups.items():
            kid = self._key_id(key)
            did = self._decision_id(text)
            for box in merge_boxes(boxes):
                if kid in self._db_keys:
                    box = self._merge_with_db(kid, did, hi, box)
                    if box is None:
                        continue
                conn.execute(
                    "INSERT INTO rects(klo, khi, alo, ahi, blo, bhi, clo, chi, llo, lhi, vlo, vhi, rlo, rhi,"
                    " decision, nlo, nhi, points) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (kid, kid, *box[:6], box[6], hi[0], box[7], hi[1], box[8], hi[2], did, *box[9:12]),
                )
        conn.execute("COMMIT")
        self._db_keys.update(self._keys.values())

    def _key_id(self, key: str) -> int:
        kid = self._keys.get(key)
        if kid is None:
            self.conn.execute("INSERT OR IGNORE INTO keys(ns, text) VALUES(?, ?)", (self.ns, key))
            kid = self.conn.execute("SELECT id FROM keys WHERE ns=? AND text=?", (self.ns, key)).fetchone()[0]
            self._keys[key] = kid
        return kid

    def _decision_id(self, text: str) -> int:
        did = self._decision_ids.get(text)
        if did is None:
            self.conn.execute("INSERT OR IGNORE INTO decisions(text) VALUES(?)", (text,))
            did = self.conn.execute("SELECT id FROM decisions WHERE text=?", (text,)).fetchone()[0]
            self._decision_ids[text] = did
            self._decisions[did] = text
        return did

    def _merge_with_db(self, kid, did, hi, box):
        """Grow ``box`` by stored rectangles with the same answer that it touches; None if one covers it."""
        while True:
            rows = self.conn.execute(_NEIGHBOURS, (kid, *hi, did, *box[:6])).fetchall()
            grown = False
            for rid, *other in rows:
                if _covers(other, box):
                    if other[9] > box[9] or other[10] < box[10]:  # widen its cost range
                        self.conn.execute("UPDATE rects SET nlo=?, nhi=? WHERE id=?",
                                          (min(other[9], box[9]), max(other[10], box[10]), rid))
                    return None  # already stored (another process found it too)
                merged = _union(box, other)
                if merged is not None:
                    self.conn.execute("DELETE FROM rects WHERE id=?", (rid,))
                    box = merged
                    grown = True
            if not grown:
                return box

    # -- closing -------------------------------------------------------------------------------------
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.flush()
            if self.record_run and self.lookups:
                self.conn.execute(
                    "INSERT INTO runs(ns, started, seconds, pid, spec, top_hit, lookups, hits, misses, stale,"
                    " puts, skipped) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                    (self.ns, self._started, time.time() - self._started, os.getpid(), self.top_spec,
                     None if self.top_hit is None else int(self.top_hit), self.lookups, self.hits,
                     self.misses, self.stale, self.puts, self.skipped),
                )
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None
        finally:
            self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# A box is [alo, ahi, blo, bhi, clo, chi, llo, vlo, rlo, nlo, nhi, points]: shape coordinate ranges, the
# lower memory limits (the upper ones are the group's), the range of cost per volume, specs merged.
def _covers(a, b) -> bool:
    """Whether box a answers every point of box b (same decision and upper limits assumed)."""
    return all(a[2 * d] <= b[2 * d] and b[2 * d + 1] <= a[2 * d + 1] for d in range(3)) and all(
        a[i] <= b[i] for i in (6, 7, 8))


def _union(a, b):
    """One box answering exactly the shapes of a and b, if their shapes form a box (equal in two dims,
    touching or overlapping in the third): lower limits are the larger of the two (every program fits),
    costs the union of their ranges. None if the shapes do not form a box."""
    diff = [d for d in range(3) if (a[2 * d], a[2 * d + 1]) != (b[2 * d], b[2 * d + 1])]
    if len(diff) > 1:
        return None
    out = list(a)
    if diff:
        d = diff[0]
        if a[2 * d] > b[2 * d + 1] + 1 or b[2 * d] > a[2 * d + 1] + 1:
            return None
        out[2 * d], out[2 * d + 1] = min(a[2 * d], b[2 * d]), max(a[2 * d + 1], b[2 * d + 1])
        out[11] = a[11] + b[11]
    else:
        out[11] = max(a[11], b[11])  # the same shapes twice: the same specs
    for i in (6, 7, 8):
        out[i] = max(a[i], b[i])
    out[9], out[10] = min(a[9], b[9]), max(a[10], b[10])
    return out


def merge_boxes(boxes: list) -> list:
    """Merge boxes (see above) of one key, decision and upper limits whose shapes share a face or
    coincide. The merged shapes are exactly the union of the inputs': no unsynthesized shape is claimed."""
    boxes = [list(b) for b in boxes]
    changed = True
    while changed and len(boxes) > 1:
        changed = False
        for d in range(3):
            others = [i for i in range(6) if i // 2 != d]
            boxes.sort(key=lambda b: ([b[i] for i in others], b[2 * d]))
            out = [boxes[0]]
            for b in boxes[1:]:
                merged = _union(out[-1], b) if all(out[-1][i] == b[i] for i in others) else None
                if merged is not None:
                    out[-1] = merged
                    changed = True
                else:
                    out.append(b)
            boxes = out
    return boxes
