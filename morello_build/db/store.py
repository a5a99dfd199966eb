"""The Store: the search's persistent memo in the synthesis DB (schema and connections: sqlite.py).

Results are buffered in memory and written in short ``BEGIN IMMEDIATE`` transactions (every
``flush_every`` results and at close); a result is stored as a rectangle of identical decisions, merged
with its neighbours (boxes.py).
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import replace

from morello_build.db import encode
from morello_build.db.boxes import covers, merge_boxes, union
from morello_build.db.sqlite import DBError, _wrap, connect, corrupt, namespace_id, warn_read_only, writable

FLUSH_EVERY = 2000
FLUSH_SECONDS = 5.0
UNBOUNDED = 2**31 - 1  # upper limit of a box open upwards (rtree_i32 coordinates are 32-bit)
NO_RANGE = ((0, 0, 0), (0, 0, 0))  # get's range where no box answers

_FIND = (
    "SELECT decision, nlo, nhi, llo, lhi, vlo, vhi, rlo, rhi FROM rects"
    " WHERE klo<=?1 AND khi>=?1 AND alo<=?2 AND ahi>=?2 AND blo<=?3 AND bhi>=?3 AND clo<=?4 AND chi>=?4"
    " AND llo<=?5 AND lhi>=?5 AND vlo<=?6 AND vhi>=?6 AND rlo<=?7 AND rhi>=?7 ORDER BY id DESC"
)
# Rectangles of the same key, decision and upper limits whose shapes touch or overlap box (alo..chi).
_NEIGHBOURS = (
    "SELECT id, alo, ahi, blo, bhi, clo, chi, llo, vlo, rlo, nlo, nhi, points FROM rects"
    " WHERE klo=?1 AND khi=?1 AND lhi=?2 AND vhi=?3 AND rhi=?4 AND decision=?5"
    " AND alo<=?7+1 AND ahi>=?6-1 AND blo<=?9+1 AND bhi>=?8-1 AND clo<=?11+1 AND chi>=?10-1"
)


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
        self.read_only = not writable(path)  # a shared cache on a read-only mount: serve its hits
        self.conn = connect(path, read_only=self.read_only)
        if self.read_only:
            warn_read_only(path)
        try:
            create = not self.read_only
            self.ns = namespace_id(self.conn, target, create=create)
            # Serial specs never get a parallel loop: their programs are the same for every thread count,
            # so they are kept once, in the 1-thread namespace, and shared by every count.
            serial = replace(target, threads=1)
            self.ns_serial = self.ns if target.threads == 1 else namespace_id(self.conn, serial, create=create)
            self._keys = {}
            self._add_keys()
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
        self._replaying: set = set()  # the ops whose decisions are being replayed (_replay)
        self._last_flush = time.monotonic()
        self._started = time.time()
        self.lookups = self.hits = self.misses = self.stale = self.puts = self.skipped = 0
        self.top_spec: str | None = None
        self.top_hit: bool | None = None
        self.closed = False

    # -- the search hook -----------------------------------------------------------------------------
    def get(self, spec, search):
        """(True, impl or None, (lo, hi)) if a stored decision answers ``spec`` (replayed through ``search``),
        with the range of limits its box holds for (see put); (False, None, NO_RANGE) if none does."""
        self.lookups += 1
        first = self.top_spec is None
        if first:
            self.top_spec = spec.describe()
        found, impl, limits = self._get(spec, search)
        if found:
            self.hits += 1
        else:
            self.misses += 1
        if first:
            self.top_hit = found
        return found, impl, limits

    def _get(self, spec, search):
        key, coords, volume = encode.op_key(spec.op)
        kid = self._keys.get(key)
        if kid not in self._lookup_keys:
            return False, None, NO_RANGE
        q = (kid,) + coords + spec.limits.as_tuple()
        try:
            rows = self.conn.execute(_FIND, q).fetchall()
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None
        for decision, nlo, nhi, *box in rows:
            text = self._decision(decision)
            limits = tuple(box[0::2]), tuple(box[1::2])
            if text == encode.NONE:
                if nlo != 0 or nhi != 0:  # "no program" is stored with cost 0
                    raise corrupt(self.path, f"'no program' stored for {spec.describe()} with a cost")
                return True, None, limits
            return True, self._replay(spec, search, text, nlo, nhi, volume), limits
        return False, None, NO_RANGE

    def _replay(self, spec, search, text: str, nlo: float, nhi: float, volume: int):
        """The program ``text`` stored for ``spec`` builds. Within one namespace a stored decision always
        replays to a program of the stored cost, so any other outcome (a decision that does not decode or
        names what the spec lacks, a refused action, another cost, a decision that leads back to its own op: a
        copy that changes nothing, which no search chooses) means the file was damaged."""
        if spec.op in self._replaying:
            raise corrupt(self.path, f"decision {text!r} for {spec.describe()} replays to the same op again")
        self._replaying.add(spec.op)
        try:
            impl = search.apply(spec, encode.action_from_text(text, spec.op))
        except DBError:
            raise  # a sub-spec's decision: already named
        except (ValueError, IndexError, KeyError, TypeError, AttributeError) as e:
            raise corrupt(self.path, f"decision {text!r} for {spec.describe()} does not replay: {e}") from None
        finally:
            self._replaying.discard(spec.op)
        if impl is None or not _cost_matches(impl.cost, nlo, nhi, volume):
            found = "no program" if impl is None else f"a program of another cost ({impl.cost:,.1f})"
            raise corrupt(self.path, f"decision {text!r} for {spec.describe()} replays to {found}")
        return impl

    def _ns_of(self, key: str) -> int:
        """The namespace of an op's key text: serial ops' (flags "<accum><serial>", 4th field) are shared."""
        return self.ns_serial if key.split("|", 4)[3][1] == "1" else self.ns

    def _add_keys(self) -> set[int]:
        """Load the keys of this store's namespaces (each key from the namespace it belongs to); the new ids."""
        new = set()
        q = "SELECT ns, text, id FROM keys WHERE ns IN (?, ?)"
        for ns, text, kid in self.conn.execute(q, (self.ns, self.ns_serial)).fetchall():
            if text not in self._keys and ns == self._ns_of(text):
                self._keys[text] = kid
                new.add(kid)
        return new

    def _decision(self, did: int) -> str:
        text = self._decisions.get(did)
        if text is None:
            row = self.conn.execute("SELECT text FROM decisions WHERE id=?", (did,)).fetchone()
            text = row[0] if row else "?"
            self._decisions[did] = text
        return text

    def put(self, spec, impl, action, lo: tuple, hi: tuple) -> None:
        """Record the search's answer for ``spec``, ``impl`` made by ``action`` (both None: nothing fits), as
        the box of limits from ``lo`` to ``hi`` (L1, VRF, RF; both included): the range over which a search of
        ``spec`` does what this one did (Search's memo), so a fresh search anywhere in it finds this answer."""
        self.puts += 1
        if self.read_only:
            return
        key, coords, volume = encode.op_key(spec.op)
        hi = tuple(min(h, UNBOUNDED) for h in hi)
        ncost = 0.0 if impl is None else impl.cost / volume
        if any(a > b for a, b in zip(lo, hi)):  # a range that holds nowhere: a caller's bug, nothing to store
            self.skipped += 1
            return
        text = encode.action_text(action, spec.op)
        self._pending.append(
            (key, text, hi, [coords[0], coords[0], coords[1], coords[1], coords[2], coords[2], *lo, ncost, ncost, 1])
        )
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
        new = self._add_keys()
        self._db_keys |= new
        self._lookup_keys |= new
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
            ns = self._ns_of(key)
            self.conn.execute("INSERT OR IGNORE INTO keys(ns, text) VALUES(?, ?)", (ns, key))
            kid = self.conn.execute("SELECT id FROM keys WHERE ns=? AND text=?", (ns, key)).fetchone()[0]
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
                if covers(other, box):
                    if other[9] > box[9] or other[10] < box[10]:  # widen its cost range
                        self.conn.execute(
                            "UPDATE rects SET nlo=?, nhi=? WHERE id=?",
                            (min(other[9], box[9]), max(other[10], box[10]), rid),
                        )
                    return None  # already stored (another process found it too)
                merged = union(box, other)
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
            if self.record_run and self.lookups and not self.read_only:
                self.conn.execute(
                    "INSERT INTO runs(ns, started, seconds, pid, spec, top_hit, lookups, hits, misses, stale,"
                    " puts, skipped) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        self.ns,
                        self._started,
                        time.time() - self._started,
                        os.getpid(),
                        self.top_spec,
                        None if self.top_hit is None else int(self.top_hit),
                        self.lookups,
                        self.hits,
                        self.misses,
                        self.stale,
                        self.puts,
                        self.skipped,
                    ),
                )
        except sqlite3.Error as e:
            raise _wrap(self.path, e) from None
        finally:
            self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
