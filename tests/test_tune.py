"""``synth --tune K`` (tools/tune.py, db/tuned.py): the fastest measured candidate, stored and reused.

The timer is injected: the point here is the choice, the DB and the header, not timing (the instrument,
scripts/rank.py, measures for real; tools/measure.py's harness is built once below on a tiny spec).
"""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from morello_build.tools.api import synthesize_header
from morello_build.tools.measure import spearman

SPEC = "matmul 4x8x8 serial"


class FakeTimer:
    """Candidate ``fastest`` takes 1 us, the others ``slow`` us; counts the programs it was asked to time."""

    def __init__(self, fastest: int = 2, slow: float = 2.0):
        self.fastest, self.slow, self.calls, self.programs = fastest, slow, 0, 0

    def __call__(self, user, target, impls):
        self.calls += 1
        self.programs += len(impls)
        return [1e-6 if i == self.fastest else self.slow * 1e-6 for i in range(len(impls))]


def _header(db, k, timer):
    return synthesize_header(SPEC, isa="avx2", threads=1, db=str(db), tune=k, timer=timer)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    """A DB holding SPEC's untuned synthesis, as any build before tuning leaves it (copied per test)."""
    path = tmp_path_factory.mktemp("tune") / "base.db"
    synthesize_header(SPEC, isa="avx2", threads=1, db=str(path))
    return path


@pytest.fixture
def db(synthesized, tmp_path):
    path = tmp_path / "synth.db"
    shutil.copy(synthesized, path)
    return path


def test_tuned_choice_is_stored_and_reused_without_measuring(db):
    timer = FakeTimer()
    first = _header(db, 4, timer)
    assert timer.calls == 1 and timer.programs == 4
    assert "// Tuning: tuned on this host: candidate 2 of the 4 best by model cost" in first
    assert "2.00x faster than the model's pick" in first
    untuned = synthesize_header(SPEC, isa="avx2", threads=1, db=str(db))
    assert "Tuning:" not in untuned and untuned != first
    again = FakeTimer()
    assert _header(db, 4, again) == first and again.calls == 0  # the same bytes, nothing measured
    other = synthesize_header(SPEC, isa="avx2", threads=4, db=str(db), tune=4, timer=again)
    note = next(line for line in first.splitlines() if line.startswith("// Tuning:"))
    assert note in other and again.calls == 0  # a serial spec's choice serves every thread count
    assert _header(db, 3, again) == first and again.calls == 0  # fewer candidates: the stored K covers them
    _header(db, 6, again)
    assert again.calls == 1 and again.programs == 6  # more candidates than measured: measures again


def test_the_pick_stays_unless_beaten_by_more_than_noise_and_no_db(db):
    timer = FakeTimer(fastest=0)
    text = synthesize_header(SPEC, isa="avx2", threads=1, db=str(db), tune=3, timer=timer)
    assert "the model's pick was the fastest" in text and timer.calls == 1
    near = FakeTimer(fastest=1, slow=1.02)  # 2% faster than the pick: within MIN_GAIN, the pick stays
    text = synthesize_header(SPEC, isa="avx2", threads=1, db=None, tune=3, timer=near)
    assert "the model's pick was the fastest" in text and near.calls == 1  # no DB: measured every time


def test_an_old_db_without_the_table_keeps_working(db):
    with sqlite3.connect(db) as conn:
        assert "tuned" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    timer = FakeTimer()
    assert "Tuning:" in _header(db, 3, timer) and timer.calls == 1
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT k, host FROM tuned").fetchall()[0][0] == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tune", "x"], "morello-build: error: --tune 'x' is not a number of candidates from 0 (off) to 64"),
        (["--tune", "65"], "morello-build: error: --tune '65' is not a number of candidates"),
        (["--tune", "-1"], "morello-build: error: --tune '-1' is not a number of candidates"),
        (["--tune", "2", "--isa", "dispatch"], "--tune measures programs for one ISA"),
    ],
)
def test_cli_errors(args, message, capsys):
    from morello_build.tools.cli import main

    rc = main(["synth", SPEC, "--db", "none", *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [5, 5, 9]) == pytest.approx(1.0)


def test_misranked_names_the_candidates_that_carry_the_rank_error():
    """Six programs the model ranks as measured but for one (cost rank 6, time rank 1): it carries the largest
    share of the squared rank differences, and rho over the others is 1."""
    from morello_build.tools.measure import misranked

    costs, secs = [1, 2, 3, 4, 5, 6], [2.0, 3.0, 4.0, 5.0, 6.0, 1.0]
    worst = misranked(costs, secs, most=2)
    assert [w["index"] for w in worst][0] == 5 and (worst[0]["cost_rank"], worst[0]["time_rank"]) == (6, 1)
    assert worst[0]["share"] == pytest.approx(25 / 30) and worst[0]["rho_without_these"] == pytest.approx(1.0)
    assert sum(w["share"] for w in misranked(costs, secs, most=6)) == pytest.approx(1.0)
    assert misranked(costs, [c * 2.0 for c in costs]) == []  # ranked as measured: no error to name


def test_repeatability_ranks_the_two_halves_of_the_samples():
    """A timing's halves are the medians of alternate samples (rounds); over programs that differ they rank
    alike (1), over ties that only noise separates they do not: the ceiling of any model's rho."""
    from morello_build.tools.measure import _summary, repeatability

    t = _summary([1.0, 2.0, 1.1, 2.1, 0.9, 1.9])
    assert t.halves == (1.0, 2.0) and t.seconds == pytest.approx(1.5)
    distinct = [_summary([k, k + 0.01, k - 0.01, k]) for k in (1.0, 2.0, 3.0, 4.0)]
    assert repeatability(distinct) == pytest.approx(1.0)
    ties = [_summary([1.0 + e, 1.0 - e]) for e in (0.01, -0.02, 0.03, -0.04)]  # halves in opposite orders
    assert repeatability(ties) == pytest.approx(-1.0)


def test_one_program_for_all_modes_is_the_least_worst_ratio():
    from morello_build.tools.measure import one_program_for_all

    # 0 is fastest warm, 2 from DRAM; 1 is within 5% of both, the best any single pick can do.
    e = one_program_for_all({"warm": [1.0, 1.05, 1.3], "dram": [2.4, 2.1, 2.0]})
    assert e == dict(best=pytest.approx(1.05), best_index=1, pick=pytest.approx(1.2))
    assert one_program_for_all({"warm": [3.0, 1.0]}, pick=1) == dict(best=1.0, best_index=1, pick=1.0)


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a C++ compiler")
def test_the_benchmark_harness_times_every_program(tmp_path):
    from morello_build.ir.grammar import parse_spec
    from morello_build.synth.candidates import enumerate_candidates
    from morello_build.target import get_target
    from morello_build.tools import measure

    user, target = parse_spec(SPEC), get_target("avx2", threads=1)
    cands = enumerate_candidates(user, target, 2, depth=1)
    exe = measure.build_benchmark(user, target, [c.impl for c in cands], tmp_path, jobs=1, opt="-O0")
    for copies, clock in ((1, "cpu"), (3, "wall")):
        timings = measure.time_programs(exe, 2, copies=copies, processes=1, rounds=2, sample_s=1e-4, clock=clock)
        assert [t.samples for t in timings] == [2, 2] and all(t.seconds > 0 for t in timings)


def test_prune_forgets_the_tuned_choices_of_stale_namespaces(db):
    from morello_build import db as dbmod

    path = db
    _header(path, 2, FakeTimer(fastest=1))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE ns SET fingerprint='old'")  # as if the synthesizer's code had changed
    dbmod.prune(str(path))
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM tuned").fetchone()[0] == 0


def test_a_switch_needs_the_quartiles_apart():
    from morello_build.tools.measure import Timing
    from morello_build.tools.tune import _clearly_faster

    pick = Timing(1.0, 0.2, 10, 0.85, q1=0.9, q3=1.1)
    assert _clearly_faster(Timing(0.8, 0.1, 10, 0.75, q1=0.78, q3=0.85), pick)
    assert not _clearly_faster(Timing(0.9, 0.2, 10, 0.75, q1=0.8, q3=0.95), pick)  # overlapping: noise
    assert not _clearly_faster(Timing(0.98, 0.0, 10, 0.98, q1=0.98, q3=0.98), pick)  # within MIN_GAIN
    assert _clearly_faster(0.9, 1.0) and not _clearly_faster(0.99, 1.0)  # plain seconds


def test_python_api_passes_tune_and_checks_it():
    from morello_build.tools.errors import UserError
    from morello_build.tools.pyapi import _headers_from

    seen = []

    def header_fn(spec, **kw):
        seen.append(kw.get("tune", 0))
        return "// header"

    _headers_from(header_fn, [SPEC], "avx2", None, None, ["k"], ["ns"], tune=3)
    _headers_from(header_fn, [SPEC], "avx2", None, None, ["k"], ["ns"])
    assert seen == [3, 0]
    with pytest.raises(UserError, match="--tune '-2' is not a number of candidates"):
        _headers_from(header_fn, [SPEC], "avx2", None, None, ["k"], ["ns"], tune=-2)


def test_db_stats_and_verify_cover_the_tuned_choices(db):
    from morello_build import db as dbmod
    from morello_build.target import get_target

    target = get_target("avx2", threads=1)
    assert "tuned choices:     none" in dbmod.stats(str(db), target)
    _header(db, 3, FakeTimer(fastest=1))
    assert "tuned choices:     1 (measured by --tune on 1 host CPU(s)" in dbmod.stats(str(db), target)
    ok, report = dbmod.verify(str(db), target, sample=1)
    assert ok and "1 of 1 tuned choices replay" in report
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE tuned SET cost = cost * 2")  # a damaged entry
    ok, report = dbmod.verify(str(db), target, sample=1)
    assert not ok and f"MISMATCH tuned choice for '{SPEC}'" in report
