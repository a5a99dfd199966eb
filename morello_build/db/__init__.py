"""The persistent, spatially compressed synthesis database (the memo of the search, on disk).

Each canonical spec is a point in a table: the table key holds the discrete parameters, the point its
shape coordinates and memory limits (encode.py). An answer found under limits L that needs limits R is
the answer for the whole box [R, L]; it is stored as that rectangle, with only the decision taken and
the range of its cost per unit of volume. Rectangles of neighbouring shapes with the same decision
and the same upper limits are merged (lower limits: the larger), but only where every shape inside was
synthesized: each point of a merged rectangle is answered by the decision found for it. Lookups
find the rectangle containing the point (an SQLite R*Tree) and rebuild the Impl by replaying the
decision, each sub-spec again through the search and the DB.

Location: ``--db PATH``, else ``$MORELLO_DB``, else ``$XDG_CACHE_HOME/morello-build/synth.db``
(``~/.cache/...``); ``none`` disables it. Entry points: ``open_db`` (the search's store), ``stats``,
``verify``, ``rebuild``, ``prune``, ``default_path``, ``resolve_path``.
"""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

from morello_build.db import tuned
from morello_build.db.sqlite import DBError, code_fingerprint, connect, namespace_ids, writable
from morello_build.db.store import NO_RANGE, Store

__all__ = [
    "DBError",
    "Store",
    "NullStore",
    "default_path",
    "cache_path",
    "resolve_path",
    "open_db",
    "stats",
    "verify",
    "rebuild",
    "prune",
]

DISABLED = ("none", "off", "no", "0", "false")


def cache_path() -> str:
    """The per-user default: ``$XDG_CACHE_HOME/morello-build/synth.db`` or ``~/.cache/morello-build/synth.db``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "morello-build", "synth.db")


def default_path() -> str:
    """``$MORELLO_DB`` if set, else the per-user cache (may be ``none``: see resolve_path)."""
    return os.environ.get("MORELLO_DB") or cache_path()


def resolve_path(arg: str | None, warn=None) -> str | None:
    """The DB a command uses: ``--db`` if given, else the default; None when that says ``none``.

    With ``warn``, an unusable per-user cache that nobody asked for by name (a read-only or missing
    home in a sandboxed build) is skipped with a warning instead of failing the build: the DB only
    makes synthesis faster. A DB named by ``--db`` or ``$MORELLO_DB`` must work."""
    path = arg if arg else default_path()
    if path.strip().lower() in DISABLED:
        return None
    if warn is not None and not arg and not os.environ.get("MORELLO_DB"):
        problem = _unwritable(Path(path))
        if problem:
            warn(
                f"the synthesis DB cache {path} is unusable ({problem}); synthesizing without it "
                "(set MORELLO_DB or pass --db to choose another)"
            )
            return None
    return path


def _unwritable(path: Path) -> str | None:
    """Why ``path`` cannot hold a DB we can write, or None."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return e.strerror or str(e)
    if path.exists():  # read-only (a shared cache): served read-only (Store)
        return None if os.access(path, os.R_OK) else "not readable"
    return None if os.access(path.parent, os.W_OK) else "not writable"


class NullStore:
    """The store of ``--db none``: remembers nothing."""

    def get(self, spec, search):
        return False, None, NO_RANGE

    def put(self, spec, impl, action, lo, hi) -> None:
        pass

    def close(self) -> None:
        pass


def open_db(path, target, **kw) -> Store | NullStore:
    """The store the search reads and writes (``get``/``put``/``close``); raises DBError on a bad file.
    ``none`` (see DISABLED) gives a store that remembers nothing."""
    if str(path).strip().lower() in DISABLED:
        return NullStore()
    return Store(path, target, **kw)


# -- reporting ---------------------------------------------------------------------------------------
def _disk_bytes(path) -> int:
    return sum(os.path.getsize(p) for p in (str(path), f"{path}-wal") if os.path.exists(p))


def _wrapped(path, fn):
    from morello_build.db.sqlite import _wrap

    try:
        return fn()
    except sqlite3.Error as e:
        raise _wrap(path, e) from None


def _ns_figures(conn, ids):
    return conn.execute(
        "SELECT count(*), coalesce(sum(r.points), 0), count(DISTINCT r.klo) FROM rects r"
        " JOIN keys k ON k.id = r.klo WHERE k.ns IN (?, ?)",
        ids,
    ).fetchone()


def stats(path, target) -> str:
    """Specs covered, rectangles, compression ratio, bytes on disk and the last run's hit rate."""
    if not Path(path).exists():
        return f"no synthesis DB at {path} yet (the first synthesis that uses it creates it)"
    conn = connect(path, create=False, read_only=not writable(path))
    try:
        return _wrapped(path, lambda: _stats(conn, path, target))
    finally:
        conn.close()


def _stats(conn, path, target) -> str:
    ids = namespace_ids(conn, target)
    ns = ids[0]
    import morello_build

    lines = [f"synthesis DB {path}: {_disk_bytes(path):,} bytes on disk"]
    lines.append(
        f"namespace: target {target.isa}, {target.threads} threads, morello-build {morello_build.__version__}, "
        f"code {code_fingerprint()}, costs {target.profile} ({target.cost_fingerprint})"
    )
    rects, specs, keys = _ns_figures(conn, ids)
    ratio = f"{specs / rects:.2f}" if rects else "-"
    lines.append(f"  specs covered:     {specs:,} (synthesized specs the rectangles answer)")
    lines.append(f"  rectangles stored: {rects:,} in {keys:,} tables")
    lines.append(f"  compression ratio: {ratio} specs per rectangle")
    run = conn.execute(
        "SELECT spec, top_hit, lookups, hits, misses, stale, puts, skipped, seconds, datetime(started, 'unixepoch')"
        " FROM runs WHERE ns IS ? ORDER BY id DESC LIMIT 1",
        (ns,),
    ).fetchone()
    if run:
        spec, top, lookups, hits, misses, stale, puts, skipped, secs, when = run
        rate = f"{100.0 * hits / lookups:.1f}%" if lookups else "-"
        lines.append(
            f"  last run ({when} UTC, {secs:.2f} s): hit rate {rate} ({hits:,} hits, {misses:,} misses"
            f" of {lookups:,} lookups), top-level {'hit' if top else 'miss'}, {puts:,} results written"
            + (f", {stale:,} stale" if stale else "")
            + (f", {skipped:,} not stored" if skipped else "")
        )
        lines.append(f"    top-level spec: {spec}")
    else:
        lines.append("  last run: none recorded for this namespace")
    lines.append(_tuned_line(tuned.entries(conn, ids)))
    total = conn.execute("SELECT count(*) FROM rects").fetchone()[0]
    if total > rects:
        others = conn.execute("SELECT count(*) FROM ns WHERE id IS NOT ? AND id IS NOT ?", ids).fetchone()[0]
        lines.append(
            f"other namespaces (other targets, thread counts or versions, not used here): {others}, "
            f"{total - rects:,} rectangles"
        )
    return "\n".join(lines)


def _tuned_line(entries) -> str:
    if not entries:
        return "  tuned choices:     none (`synth --tune K` stores them)"
    hosts = sorted({host for _, host, _ in entries})
    return f"  tuned choices:     {len(entries):,} (measured by --tune on {len(hosts)} host CPU(s): {', '.join(hosts)})"


def _check_tuned(target, entries) -> list[str]:
    """The stored --tune choices whose pinned decisions no longer replay to their stored model cost: within
    one namespace (same code) they must, so a mismatch is a damaged entry."""
    from morello_build.ir.grammar import parse_spec
    from morello_build.synth.candidates import replay
    from morello_build.synth.search import Search

    bad = []
    for spec_text, host, entry in entries:
        try:
            user = parse_spec(spec_text)
            impl = replay(user.to_spec(target.limits()), entry.path, Search(target))
        except Exception as e:  # a corrupt entry may fail anywhere in parsing or replay: report it, go on
            impl, why = None, f"does not replay ({type(e).__name__})"
        else:
            why = "does not replay" if impl is None else f"replays to cost {impl.cost:,.1f}"
        if impl is None or abs(impl.cost - entry.cost) > 1e-9 * max(1.0, abs(entry.cost)):
            bad.append(f"tuned choice for '{spec_text}' on {host}: {why}, stored {entry.cost:,.1f}")
    return bad


def verify(path, target, sample: int = 20, seed: int = 0) -> tuple[bool, str]:
    """PRAGMA integrity_check, then re-derive ``sample`` random entries (a random point inside each
    rectangle) by fresh synthesis and compare with what the DB answers there."""
    if not Path(path).exists():
        return False, f"no synthesis DB at {path}"
    conn = connect(path, create=False, read_only=not writable(path))
    try:
        problems = _wrapped(path, lambda: [r[0] for r in conn.execute("PRAGMA integrity_check")])
        if problems != ["ok"]:
            from morello_build.db.sqlite import corrupt

            raise corrupt(path, "integrity check: " + "; ".join(problems[:3]))
        ids = namespace_ids(conn, target)
        rows = _wrapped(
            path,
            lambda: conn.execute(
                "SELECT r.id, k.text, alo, ahi, blo, bhi, clo, chi, llo, lhi, vlo, vhi, rlo, rhi FROM rects r"
                " JOIN keys k ON k.id = r.klo WHERE k.ns IN (?, ?) ORDER BY r.id",
                ids,
            ).fetchall(),
        )
        tuned_entries = _wrapped(path, lambda: tuned.entries(conn, ids))
    finally:
        conn.close()
    bad_tuned = _check_tuned(target, tuned_entries)
    tuned_line = f"; {len(tuned_entries) - len(bad_tuned)} of {len(tuned_entries)} tuned choices replay"
    if not rows and not tuned_entries:
        return True, (
            f"synthesis DB {path}: integrity ok; no entries for target {target.isa} ({target.threads} threads) "
            "with this morello-build version and code (other namespaces are not used; see `db stats`)"
        )
    rng = random.Random(seed)
    picked = rng.sample(rows, min(sample, len(rows)))
    bad = []
    for row in picked:
        spec = point_spec(row[1], [rng.randint(row[2 + 2 * i], row[3 + 2 * i]) for i in range(6)])
        ok, why = check_point(path, target, spec)
        if not ok:
            bad.append(f"rectangle {row[0]} at {spec.describe()} {spec.limits.as_tuple()}: {why}")
    lines = [
        f"synthesis DB {path}: integrity ok; {len(picked)} of {len(rows):,} rectangles re-derived, "
        f"{len(picked) - len(bad)} agree with fresh synthesis" + (tuned_line if tuned_entries else "")
    ]
    bad += bad_tuned
    lines += [f"  MISMATCH {b}" for b in bad]
    return not bad, "\n".join(lines)


def point_spec(key: str, point):
    """The spec at ``point`` (3 shape coordinates, then L1, VRF, RF bytes) of table ``key``."""
    from morello_build.db.encode import op_from_key
    from morello_build.ir.spec import MemoryLimits, Spec

    return Spec(op_from_key(key, point[:3]), MemoryLimits(*point[3:]))


def program_signature(impl):
    """An Impl tree with each node's spec reduced to its op: equal signatures are the same program.
    (A node's spec also records the limits it was first found under, which memo reuse may vary.)"""
    from dataclasses import fields, is_dataclass

    from morello_build.ir.spec import Spec, TensorSpec

    if isinstance(impl, Spec):
        return impl.op
    if is_dataclass(impl) and not isinstance(impl, (type, TensorSpec)):
        return (type(impl).__name__,) + tuple(program_signature(getattr(impl, f.name)) for f in fields(impl))
    if isinstance(impl, tuple):
        return tuple(program_signature(x) for x in impl)
    return impl


def check_point(path, target, spec) -> tuple[bool, str]:
    """Whether the DB answers ``spec`` directly, with what a fresh search (no DB) finds: the same program, or
    one it ties with (the same cost and work, the model's order; the peaks and depth that break such ties
    depend on the limits a box's decision was found under, above the point, and on the memo's history)."""
    from morello_build.synth.cost import order_key
    from morello_build.synth.search import Search

    fresh = Search(target).best(spec)
    store = Store(path, target, record_run=False)
    try:
        replayed = Search(target, store=store).best(spec)
        hit = store.top_hit
    finally:
        store.close()
    if not hit:
        return False, "not answered by the DB"
    tie = fresh is not None and replayed is not None and order_key(fresh)[:2] == order_key(replayed)[:2]
    if program_signature(fresh) != program_signature(replayed) and not tie:
        describe = lambda i: "no program" if i is None else f"cost {i.cost:,.1f} ({i.label()})"
        return False, f"DB gives {describe(replayed)}, fresh synthesis {describe(fresh)}"
    return True, ""


# -- maintenance -------------------------------------------------------------------------------------
def rebuild(path, target=None) -> str:
    """Replace the file (corrupt or not) by an empty DB; results are synthesized again when next needed.
    Do not run it while builds use the file."""
    old = _disk_bytes(path) if Path(path).exists() else 0
    for p in (f"{path}-wal", f"{path}-shm", str(path)):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    connect(path).close()
    return (
        f"rebuilt synthesis DB {path}: now empty (discarded {old:,} bytes); "
        "kernels are synthesized again, and stored, by the next builds that need them"
    )


def prune(path, target=None) -> str:
    """Delete the rectangles of stale namespaces (other morello-build versions or synthesizer code) and
    compact. Every target's current namespace stays: one project may build for several ISAs."""
    from morello_build import __version__

    current = "version=? AND (fingerprint=? OR fingerprint LIKE ? || '+costs:%')"
    args = (__version__, code_fingerprint(), code_fingerprint())
    conn = connect(path, create=False)
    try:

        def run():
            conn.execute("BEGIN IMMEDIATE")
            stale = f"SELECT id FROM ns WHERE NOT ({current})"
            gone = conn.execute(
                f"SELECT count(*) FROM rects WHERE klo IN (SELECT id FROM keys WHERE ns IN ({stale}))", args
            ).fetchone()[0]
            conn.execute(f"DELETE FROM rects WHERE klo IN (SELECT id FROM keys WHERE ns IN ({stale}))", args)
            conn.execute(f"DELETE FROM keys WHERE ns IN ({stale})", args)
            conn.execute(f"DELETE FROM runs WHERE ns IN ({stale})", args)
            tuned.forget(conn, stale, args)
            conn.execute(f"DELETE FROM ns WHERE NOT ({current})", args)
            conn.execute("COMMIT")
            conn.execute("VACUUM")
            return gone

        gone = _wrapped(path, run)
    finally:
        conn.close()
    return (
        f"pruned synthesis DB {path}: removed {gone:,} rectangles of other morello-build versions or code "
        "(every target's current entries kept)"
    )
