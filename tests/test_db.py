"""The persistent synthesis DB: encoding, round trips (property), warm hits, several writers, corruption."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import morello_build
from morello_build import db
from morello_build.db import encode
from morello_build.db.boxes import merge_boxes
from morello_build.db.store import NO_RANGE, UNBOUNDED, Store
from morello_build.ir.grammar import parse_spec
from morello_build.synth.search import ANY, Search, synthesize
from morello_build.target import get_target

ISA = "avx2"  # small register file: quick searches that still use every action
SPECS = [
    "matmul 4x8x8",
    "matmul 3x5x6 b=bf16:col",
    "matmul 2x4x16 serial",
    "matmul 3x1024x2 serial",
]  # the last: A rows 4 KiB apart (a stride class)


@pytest.fixture(autouse=True, scope="module")
def _pinned_namespace():
    """Edits of the synthesizer's sources by others during the run must not switch namespaces."""
    from morello_build.db.sqlite import code_fingerprint

    old = os.environ.get("_MORELLO_DB_FINGERPRINT")
    os.environ["_MORELLO_DB_FINGERPRINT"] = code_fingerprint()
    yield
    if old is None:
        del os.environ["_MORELLO_DB_FINGERPRINT"]
    else:
        os.environ["_MORELLO_DB_FINGERPRINT"] = old


def _synth(path, spec, isa=ISA, threads=None, **kw):
    target = get_target(isa, threads=threads)
    store = Store(path, target, **kw)
    try:
        impl, _ = synthesize(parse_spec(spec).to_spec(target.limits()), target, store=store)
    finally:
        store.close()
    return impl, store


def _fresh(spec, isa=ISA):
    target = get_target(isa)
    return synthesize(parse_spec(spec).to_spec(target.limits()), target)[0]


def _rects(path):
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT r.id, k.text, alo, ahi, blo, bhi, clo, chi, llo, lhi, vlo, vhi, rlo, rhi, points"
            " FROM rects r JOIN keys k ON k.id = r.klo ORDER BY r.id"
        ).fetchall()


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("db") / "synth.db")
    for spec in SPECS:
        _synth(path, spec)
    return path


# -- encoding -----------------------------------------------------------------------------------------
def test_size_coordinates_are_a_bijection():
    seen = {}
    for s in range(1, 5000):
        m, c = encode.size_coord(s)
        assert encode.coord_size(m, c) == s
        assert (m, c) not in seen
        seen[(m, c)] = s
    # neighbouring coordinates are neighbouring sizes of the same kind
    assert [encode.coord_size("l", c) for c in range(1, 6)] == [3, 5, 6, 7, 9]


class _Recorder:
    """A store that remembers nothing and records what the search puts: each spec it solved, the program
    and the action that made it."""

    def __init__(self):
        self.puts = []

    def get(self, spec, search):
        return False, None, NO_RANGE

    def put(self, spec, impl, action, lo, hi):
        self.puts.append((spec, impl, action))


def _recorded(text, isa=ISA):
    target = get_target(isa)
    rec = _Recorder()
    synthesize(parse_spec(text).to_spec(target.limits()), target, store=rec)
    return rec.puts


def test_keys_and_decisions_round_trip():
    """Every spec the search solves: its key decodes to its op, the action it chose writes a decision
    that reads back as the same action, and replaying that action rebuilds the same program."""
    target = get_target(ISA)
    for text in SPECS:
        replay = Search(target)
        for spec, impl, action in _recorded(text):
            key, coords, _ = encode.op_key(spec.op)
            assert encode.op_from_key(key, coords) == spec.op
            assert (impl is None) == (action is None)
            decision = encode.action_text(action, spec.op)
            assert encode.action_from_text(decision, spec.op) == action, decision
            if action is not None:
                assert db.program_signature(replay.apply(spec, action)) == db.program_signature(impl)


def test_every_offered_action_round_trips():
    from morello_build.synth.actions import decode, enumerate_actions

    target = get_target("avx512_bf16")
    for text in ("matmul 6x64x32 a=bf16 b=bf16:col", "matmul 1x2048x100 b=bf16:col c=bf16 serial"):
        spec = parse_spec(text).to_spec(target.limits())
        for sub in [
            spec,
            *(s for a in enumerate_actions(spec, target) for s in getattr(a.plan(spec, target), "subspecs", ())),
        ]:
            for action in enumerate_actions(sub, target):
                assert decode(action.encode(sub.op), sub.op) == action


def test_decision_texts_keep_their_format():
    """Decisions already in DB files must keep reading as the same actions."""
    from morello_build.ir.layout import packed, row_major
    from morello_build.ir.spec import DType, Level
    from morello_build.synth.actions import MoveOperand, Select, Tile, ToAccum

    op = parse_spec("matmul 4x8x16").to_spec(get_target(ISA).limits()).op
    for action, text in (
        (Select("fma_outer"), "K:fma_outer"),
        (Tile((1, 2, 8, 16)), "T:s:F,2,F,F"),
        (Tile((1, 4, 8, 8), parallel=True), "T:p:F,F,F,8"),
        (ToAccum(), "A"),
        (MoveOperand(2, Level.VRF), "M:2:3:-:-"),
        (MoveOperand(1, Level.L1, packed(2, 8), DType.F32), "M:1:2:0/1/;2/8/;1/1/;2/1/8:f32"),
        (MoveOperand(0, Level.GL, row_major()), "M:0:0:0/1/;1/1/;2/1/:-"),
    ):
        assert action.encode(op) == text
        assert encode.action_from_text(text, op) == action
    assert encode.action_text(None, op) == encode.NONE and encode.action_from_text(encode.NONE, op) is None
    with pytest.raises(ValueError, match="unknown decision"):
        encode.action_from_text("Q:1", op)


def test_merge_boxes_only_joins_exact_unions():
    def box(a, b, lo=(0, 0, 0), cost=1.0):
        return [a, a, b, b, 0, 0, *lo, cost, cost, 1]

    boxes = [box(0, 3), box(1, 3, (4096, 0, 0), 2.0), box(2, 3), box(4, 3), box(0, 4), box(0, 3)]
    out = sorted(map(tuple, merge_boxes(boxes)))
    # a-coordinates 0..2 at b=3 merge (4 is not adjacent; (0, 4) differs in b and cannot join a row);
    # the merged box needs the larger lower limits and spans both costs
    assert out == [
        (0, 0, 4, 4, 0, 0, 0, 0, 0, 1.0, 1.0, 1),
        (0, 2, 3, 3, 0, 0, 4096, 0, 0, 1.0, 2.0, 3),
        (4, 4, 3, 3, 0, 0, 0, 0, 0, 1.0, 1.0, 1),
    ]


# -- round trips --------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_every_rectangle_answers_its_points_like_fresh_synthesis(filled, data):
    rows = _rects(filled)
    row = data.draw(st.sampled_from(rows))
    point = [data.draw(st.integers(row[2 + 2 * i], row[3 + 2 * i])) for i in range(6)]
    spec = db.point_spec(row[1], point)
    assert spec.canonical() == spec
    ok, why = db.check_point(filled, get_target(ISA), spec)
    assert ok, f"{spec.describe()} {spec.limits}: {why}"


def test_merged_rectangles_answer_their_corners(filled):
    rows = [r for r in _rects(filled) if r[-1] > 1 or any(r[3 + 2 * i] > r[2 + 2 * i] for i in range(3))]
    assert rows, "expected some rectangles merged over several specs"
    target = get_target(ISA)
    for row in rows[:40]:
        for corner in (2, 3):
            point = [row[corner + 2 * i] for i in range(6)]
            ok, why = db.check_point(filled, target, db.point_spec(row[1], point))
            assert ok, why


def test_warm_run_hits_the_top_level_spec_and_replays(tmp_path):
    path = str(tmp_path / "w.db")
    cold, s1 = _synth(path, SPECS[1])
    assert s1.top_hit is False and s1.hits == 0
    warm, s2 = _synth(path, SPECS[1])
    assert s2.top_hit is True and s2.misses == 0
    assert db.program_signature(warm) == db.program_signature(cold) == db.program_signature(_fresh(SPECS[1]))
    text = db.stats(path, get_target(ISA))
    assert "compression ratio" in text and "hit rate 100.0%" in text and "top-level hit" in text
    ok, report = db.verify(path, get_target(ISA), sample=5)
    assert ok, report


def test_the_box_is_the_range_the_search_puts(tmp_path):
    """put(..., lo, hi) stores the box of limits the search's answer holds over (open upwards where the search
    gives no upper end); get answers anywhere in it, with that box, and nowhere else."""
    target = get_target(ISA)
    spec = parse_spec(SPECS[0]).to_spec(target.limits())
    top, impl, action = _recorded(SPECS[0])[-1]  # the search puts the top spec last
    assert top == spec
    path = str(tmp_path / "u.db")
    lo, hi = impl.peaks, (ANY, spec.limits.vrf, ANY)
    with Store(path, target) as store:
        store.put(spec, impl, action, lo, hi)
    from dataclasses import replace

    bigger = replace(spec, limits=replace(spec.limits, l1=spec.limits.l1 * 8, rf=spec.limits.rf * 2))
    with Store(path, target) as store:
        found, got, box = store.get(bigger, Search(target, store=store))
        assert found and db.program_signature(got) == db.program_signature(impl)
        assert box == (tuple(lo), (UNBOUNDED, spec.limits.vrf, UNBOUNDED))
        more_vrf = replace(spec, limits=replace(spec.limits, vrf=spec.limits.vrf + 1))
        assert store.get(more_vrf, Search(target)) == (False, None, NO_RANGE)


def test_api_and_cli_use_the_db(tmp_path, capsys):
    from morello_build.tools import api, cli

    path = str(tmp_path / "c.db")
    _, _, impl, _ = api.synthesize_program(SPECS[0], isa=ISA, db=path)
    assert cli.main(["db", "stats", "--db", path, "--isa", ISA]) == 0
    out = capsys.readouterr().out
    assert "rectangles stored" in out and "top-level miss" in out
    assert cli.main(["db", "verify", "--db", path, "--isa", ISA, "--sample", "3"]) == 0


def test_paths(monkeypatch, tmp_path):
    monkeypatch.delenv("MORELLO_DB", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert db.default_path() == str(tmp_path / "morello-build" / "synth.db")
    assert db.resolve_path(None) == db.default_path()
    assert db.resolve_path("none") is None
    assert db.resolve_path("x.db") == "x.db"
    monkeypatch.setenv("MORELLO_DB", "/tmp/elsewhere.db")
    assert db.resolve_path(None) == "/tmp/elsewhere.db"
    monkeypatch.setenv("MORELLO_DB", "none")
    assert db.resolve_path(None) is None
    assert isinstance(db.open_db("none", get_target(ISA)), db.NullStore)


# -- several processes --------------------------------------------------------------------------------
MP_SPECS = ["matmul 8x8x8", "matmul 4x8x8", "matmul 8x4x16 b=bf16:col", "matmul 3x5x6"]


def _worker(args):
    path, order = args
    out = {}
    for spec in order:
        impl, _ = _synth(path, spec, flush_every=40)  # many small transactions: maximal interleaving
        out[spec] = db.program_signature(impl)
    return out


def test_several_processes_share_one_db(tmp_path):
    path = str(tmp_path / "mp.db")
    orders = [MP_SPECS[i:] + MP_SPECS[:i] for i in range(4)]
    with mp.get_context("spawn").Pool(4) as pool:
        results = pool.map(_worker, [(path, o) for o in orders])
    expected = {s: db.program_signature(_fresh(s)) for s in MP_SPECS}
    for r in results:
        assert r == expected
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for spec in MP_SPECS:  # everything is in the file: warm runs hit at the top and replay the same
        impl, store = _synth(path, spec)
        assert store.top_hit and store.misses == 0
        assert db.program_signature(impl) == expected[spec]


def _connect_in_step(paths, barrier, results):
    from morello_build.db.sqlite import DBError, connect

    for path in paths:
        barrier.wait()
        try:
            connect(path).close()
            results.put("ok")
        except DBError as e:
            results.put(str(e))


def test_processes_creating_one_db_at_once_all_succeed(tmp_path):
    # Two builds (make -j) that find no DB both create it: SQLite refuses the second journal-mode
    # change at once with "locked", without the busy timeout; connect() must wait instead.
    ctx = mp.get_context("spawn")
    paths = [str(tmp_path / f"new{i}.db") for i in range(8)]
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_connect_in_step, args=(paths, barrier, results)) for _ in range(4)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in range(4 * len(paths))]
    for p in procs:
        p.join()
    assert outcomes == ["ok"] * len(outcomes)


def test_a_killed_writer_leaves_a_usable_db(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    path = str(tmp_path / "k.db")
    child = "import sys; from tests.test_db import _synth\n_synth(sys.argv[1], 'matmul 64x64x64', flush_every=20)\n"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-c", child, path], cwd=root)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:  # kill it once it has committed results
        if os.path.exists(path):
            try:
                with sqlite3.connect(path, timeout=5) as conn:
                    if conn.execute("SELECT count(*) FROM rects").fetchone()[0] > 100:
                        break
            except sqlite3.OperationalError:
                pass
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    impl, store = _synth(path, SPECS[0])
    assert db.program_signature(impl) == db.program_signature(_fresh(SPECS[0]))
    ok, report = db.verify(path, get_target(ISA), sample=5)
    assert ok, report


# -- damaged files and other versions -----------------------------------------------------------------
def _assert_clear_error(path, excinfo):
    msg = str(excinfo.value)
    assert str(path) in msg and "rebuild" in msg and "\n" not in msg


def test_garbage_file_is_refused_with_a_recovery(tmp_path, capsys):
    from morello_build.tools import cli

    path = tmp_path / "g.db"
    path.write_bytes(os.urandom(3000))
    with pytest.raises(db.DBError) as e:
        _synth(str(path), SPECS[0])
    _assert_clear_error(path, e)
    assert "not a database" in str(e.value)
    assert cli.main(["synth", SPECS[0], "--isa", ISA, "--db", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("morello-build: error: synthesis DB") and "\n" not in err
    assert cli.main(["db", "stats", "--db", str(path), "--isa", ISA]) == 2
    print(db.rebuild(str(path)))
    impl, _ = _synth(str(path), SPECS[0])  # recovered
    assert db.program_signature(impl) == db.program_signature(_fresh(SPECS[0]))


def test_truncated_file_is_refused(tmp_path):
    path = tmp_path / "t.db"
    _synth(str(path), "matmul 8x8x8")
    data = path.read_bytes()
    assert not os.path.exists(f"{path}-wal") or os.path.getsize(f"{path}-wal") == 0
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(db.DBError) as e:
        _synth(str(path), "matmul 8x8x8")
    _assert_clear_error(path, e)
    with pytest.raises(db.DBError):
        db.stats(str(path), get_target(ISA))


def test_empty_file_is_a_new_db(tmp_path):
    path = tmp_path / "e.db"
    path.write_bytes(b"")
    impl, store = _synth(str(path), SPECS[0])
    assert store.puts > 0


def test_other_version_results_are_not_used(tmp_path, monkeypatch):
    path = str(tmp_path / "v.db")
    _synth(path, SPECS[0])
    monkeypatch.setattr(morello_build, "__version__", "99.0")
    impl, store = _synth(path, SPECS[0])
    assert store.top_hit is False and store.hits == 0
    assert db.program_signature(impl) == db.program_signature(_fresh(SPECS[0]))
    assert "other namespaces" in db.stats(path, get_target(ISA))
    _, store = _synth(path, SPECS[0], isa="avx512")  # another target: its own namespace too
    assert store.hits == 0
    _, store = _synth(path, SPECS[0], threads=17)  # another thread count: its own namespace (but serial specs)
    assert not store.top_hit
    with monkeypatch.context() as m:  # an edited synthesizer (same version): its own namespace too
        m.setenv("_MORELLO_DB_FINGERPRINT", "edited")
        _, store = _synth(path, SPECS[0])
        assert store.hits == 0
    assert "removed" in db.prune(path, get_target(ISA))
    _, store = _synth(path, SPECS[0])
    assert store.top_hit


def test_schema_2_file_is_migrated_with_its_results_marked_2_threads(tmp_path):
    from morello_build.db.sqlite import SCHEMA, connect

    path = str(tmp_path / "old.db")
    with sqlite3.connect(path) as conn:  # a schema-2 file: ns without threads
        for stmt in SCHEMA.split(";"):
            if stmt.strip() and "EXISTS ns(" not in stmt:
                conn.execute(stmt)
        conn.execute(
            "CREATE TABLE ns(id INTEGER PRIMARY KEY, isa TEXT NOT NULL, version TEXT NOT NULL,"
            " fingerprint TEXT NOT NULL, created REAL NOT NULL, UNIQUE(isa, version, fingerprint))"
        )
        conn.execute("INSERT INTO ns VALUES(7, 'avx2', '0.9', 'f', 0)")
        conn.execute("INSERT INTO meta VALUES('schema', '2')")
    connect(path).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE name='schema'").fetchone() == ("3",)
        assert conn.execute("SELECT id, isa, threads, version FROM ns").fetchall() == [(7, "avx2", 2, "0.9")]
    _, store = _synth(path, SPECS[0], threads=2)
    assert store.puts > 0


def test_other_schema_is_refused(tmp_path):
    path = str(tmp_path / "s.db")
    _synth(path, SPECS[0])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value='999' WHERE name='schema'")
    with pytest.raises(db.DBError) as e:
        _synth(path, SPECS[0])
    _assert_clear_error(path, e)
    assert "schema 999" in str(e.value)


# -- rows that are valid SQLite but do not replay -----------------------------------------------------
def _damaged_copy(filled, tmp_path, damage):
    path = tmp_path / "d.db"
    with sqlite3.connect(filled) as src, sqlite3.connect(path) as dst:
        src.backup(dst)
    with sqlite3.connect(path) as conn:
        damage(conn)
    return str(path)


def _shuffle_decisions(seed):
    def damage(conn):
        ids, decisions = zip(*conn.execute("SELECT id, decision FROM rects ORDER BY id"))
        shuffled = list(decisions)
        random.Random(seed).shuffle(shuffled)
        conn.executemany("UPDATE rects SET decision=? WHERE id=?", zip(shuffled, ids))

    return damage


@pytest.mark.parametrize(
    "damage",
    [
        _shuffle_decisions(0),
        lambda conn: conn.execute("UPDATE decisions SET text='T:s:9,9' || id"),  # does not decode
        lambda conn: conn.execute("UPDATE rects SET decision=decision+1000"),  # no such decision
        lambda conn: conn.execute("UPDATE rects SET nlo=nlo*2, nhi=nhi*2"),  # another cost
    ],
)
def test_decisions_that_do_not_replay_are_corruption_not_a_traceback(filled, tmp_path, capsys, damage):
    """Never a traceback and never another program: either the DB's answer is what fresh synthesis finds
    (a damage the specs do not reach), or a one-line error naming the recovery."""
    from morello_build.tools import cli

    path = _damaged_copy(filled, tmp_path, damage)
    errors = 0
    for spec in SPECS:
        try:
            impl, _ = _synth(path, spec, record_run=False)
        except db.DBError as e:
            assert "rebuild" in str(e) and "\n" not in str(e)
            errors += 1
            continue
        assert impl.cost == _fresh(spec).cost  # a legal program (replayed) of the optimal cost
    assert errors
    assert cli.main(["db", "verify", "--db", path, "--isa", ISA, "--sample", "50"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("morello-build: error: synthesis DB") and err.count("\n") == 1 and "rebuild" in err


# -- a read-only DB (a shared CI cache on a read-only mount) ------------------------------------------
SMALL = "matmul 2x2x4"


def _read_only_db(tmp_path):
    """A filled DB in a directory, both made read-only (root ignores the modes: see the callers)."""
    d = tmp_path / "ro"
    d.mkdir()
    path = d / "synth.db"
    _synth(str(path), SMALL)
    path.chmod(0o444)
    d.chmod(0o555)
    return path


def test_a_read_only_db_serves_hits_and_warns_once(tmp_path, capsys, monkeypatch):
    from morello_build.tools import cli

    path = _read_only_db(tmp_path)
    try:
        if os.geteuid() == 0:  # root may write anyway: make access() say what a read-only mount says
            real = os.access
            monkeypatch.setattr(os, "access", lambda p, m: real(p, m) and not (m & os.W_OK and "ro" in str(p)))
        monkeypatch.setattr("morello_build.db.sqlite._warned_read_only", set())
        before = path.read_bytes()
        out = tmp_path / "k.hpp"
        args = ["--isa", ISA, "--db", str(path)]
        assert cli.main(["synth", SMALL, *args, "-o", str(out)]) == 0
        assert cli.main(["explain", SMALL, *args]) == 0
        first = capsys.readouterr()
        assert " 0 specs visited" in first.out  # answered by the DB
        assert cli.main(["explain", "matmul 2x2x2", *args]) == 0  # a miss: synthesized, not stored
        assert cli.main(["db", "stats", *args]) == 0
        rest = capsys.readouterr()
        assert "rectangles stored" in rest.out
        warning = f"morello-build: warning: synthesis DB {path} is read-only: using its results, but new results"
        assert (first.err + rest.err).startswith(warning) and (first.err + rest.err).count("\n") == 1
        assert path.read_bytes() == before
    finally:
        path.parent.chmod(0o755)
        path.chmod(0o644)


def test_a_read_only_directory_is_opened_immutable(tmp_path):
    """Without write access to the directory SQLite cannot create the WAL index: a real read-only open
    (root drops the capabilities that bypass file modes)."""
    import shutil
    import subprocess
    import sys

    prefix = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: file modes cannot make the DB read-only")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]
    path = _read_only_db(tmp_path)
    try:
        cmd = [*prefix, sys.executable, "-m", "morello_build", "explain", SMALL, "--isa", ISA, "--db", str(path)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
    finally:
        path.parent.chmod(0o755)
        path.chmod(0o644)
    assert r.returncode == 0 and " 0 specs visited" in r.stdout, r.stderr
    assert r.stderr.count("\n") == 1 and "is read-only" in r.stderr and "not stored" in r.stderr


def test_prune_keeps_every_targets_current_entries(tmp_path, monkeypatch):
    path = str(tmp_path / "p.db")
    _synth(path, SMALL, isa="avx2")
    _synth(path, SMALL, isa="scalar")
    with monkeypatch.context() as m:
        m.setattr(morello_build, "__version__", "0.0.1")
        _synth(path, SMALL, isa="avx2")
    report = db.prune(path, get_target("avx2"))
    assert "removed" in report and " 0 rectangles" not in report
    for isa in ("avx2", "scalar"):
        _, store = _synth(path, SMALL, isa=isa)
        assert store.top_hit, isa
    with monkeypatch.context() as m:
        m.setattr(morello_build, "__version__", "0.0.1")
        _, store = _synth(path, SMALL, isa="avx2")
        assert not store.top_hit  # the other version's entries are gone


def test_serial_specs_are_shared_by_every_thread_count(tmp_path):
    """Serial specs never get a parallel loop: a 16-thread search reuses the serial programs a 2-thread one
    stored (the 1-thread namespace) and still finds what a fresh 16-thread search finds."""
    path = str(tmp_path / "t.db")
    _synth(path, SPECS[0], threads=2)
    impl, store = _synth(path, SPECS[0], threads=16)
    assert store.hits > 0 and not store.top_hit
    target = get_target(ISA, threads=16)
    fresh, _ = synthesize(parse_spec(SPECS[0]).to_spec(target.limits()), target)
    assert db.program_signature(impl) == db.program_signature(fresh)
    assert db.verify(path, target, sample=5)[0]
    db.prune(path, target)  # keeps every current namespace, the shared serial specs included
    assert _synth(path, SPECS[0], threads=16)[1].top_hit
