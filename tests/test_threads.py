"""Threads as target data: the thread count a program is synthesized for (``Target.threads``), how the cost
model prices a parallel loop over it (the busiest thread's tasks, largest tiles first) and its bounds."""

from __future__ import annotations

import dataclasses

import pytest

from morello_build.ir.grammar import parse_spec
from morello_build.ir.impl import Loop, walk
from morello_build.synth.cost import loop_weights, lower_bound
from morello_build.synth.search import synthesize
from morello_build.target import TARGETS, get_target, machine_threads


def test_default_is_the_cpus_this_process_may_run_on():
    assert get_target("avx2").threads == machine_threads() >= 1
    assert get_target("avx2", threads=16).threads == 16 and get_target("avx2", threads=2) is TARGETS["avx2"]


@pytest.mark.parametrize("bad", [0, -1, 1025, 2.0, "4", True])
def test_bad_thread_counts_are_one_line_errors(bad):
    with pytest.raises(ValueError, match="^threads must be an integer from 1 to 1024"):
        get_target("avx2", threads=bad)


def test_busiest_thread_runs_ceil_tasks_over_threads():
    assert loop_weights((16,), True, 16) == (1.0,)
    assert loop_weights((32,), True, 16) == (2.0,)
    assert loop_weights((17,), True, 16) == (2.0,)  # one thread runs two tasks: 17 cost as much as 32
    assert loop_weights((4,), True, 16) == (1.0,)  # fewer tasks than threads: one each
    assert loop_weights((8,), False, 16) == (8,)


def test_ragged_tiles_do_not_dilute_the_imbalance():
    """3 tiles of 8 rows and a remainder of 2 on 2 threads: the busiest thread runs two tasks, and they
    may both be full tiles (the remainder does not make its share cheaper)."""
    assert loop_weights((3, 1), True, 2, ((1, 8, 4, 4), (1, 2, 4, 4))) == (2.0, 0.0)
    assert loop_weights((3, 1), True, 4, ((1, 8, 4, 4), (1, 2, 4, 4))) == (1.0, 0.0)
    assert loop_weights((1, 3), True, 2, ((1, 2, 4, 4), (1, 8, 4, 4))) == (0.0, 2.0)  # order of regions: none
    assert loop_weights((2, 2), True, 2, ((1, 8, 4, 4), (1, 4, 8, 4))) == (1.0, 1.0)  # equal volumes: shared


def test_lower_bound_of_a_parallelizable_matmul_splits_over_the_threads():
    spec = parse_spec("matmul 64x64x64").to_spec(TARGETS["avx2"].limits())
    serial = parse_spec("matmul 64x64x64 serial").to_spec(TARGETS["avx2"].limits())
    many = dataclasses.replace(TARGETS["avx2"], threads=16)
    assert lower_bound(spec, many) == pytest.approx(lower_bound(spec, TARGETS["avx2"]) / 8)
    assert lower_bound(serial, many) == lower_bound(serial, TARGETS["avx2"])


def test_sixteen_threads_get_at_least_sixteen_tasks():
    """A GEMV whose columns spread evenly gets a task per thread (2 tasks for 2 threads: the goldens)."""
    target = get_target("avx2", threads=16)
    impl, _ = synthesize(parse_spec("matmul 1x32x1024 b=f32:col").to_spec(target.limits()), target)
    loop = next(x for x in walk(impl) if isinstance(x, Loop) and x.parallel)
    assert sum(r.count for r in loop.regions) >= 16


def test_cli_threads(capsys):
    from morello_build.tools.cli import main

    assert main(["explain", "matmul 2x2x2", "--isa", "scalar", "--threads", "16", "--db", "none"]) == 0
    assert "(target scalar, 16 threads," in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["synth", "matmul 2x2x2", "--threads", "0"])
    assert e.value.code == 2 and "--threads: '0' is not a thread count from 1 to 1024" in capsys.readouterr().err


def test_python_api_threads(tmp_path, monkeypatch):
    """threads= reaches the header, and pyapi's header cache keeps one entry per thread count."""
    from morello_build.tools import api, pyapi

    monkeypatch.setenv("MORELLO_CACHE_DIR", str(tmp_path))
    assert "synthesized for 16 threads" in api.synthesize_header("matmul 2x2x2", isa="scalar", threads=16)
    for n in (3, 5):
        text = pyapi._synthesize("matmul 2x2x2", "scalar", n, None, "kernel", "morello")
        assert f"static constexpr int threads = {n};" in text
    assert len(list((tmp_path / "headers").iterdir())) == 2


def test_a_parallel_loops_threads_read_main_memory_no_faster_than_the_machine():
    """gl_line_shared (CostTable; calibrate measures it) slows each thread of a parallel loop's main-memory
    transfers down to the machine's bandwidth (cost.contention), so a DRAM-bound GEMV on 16 threads is no longer
    costed 16x faster than on one (a 16-vCPU Emerald Rapids VM ran the flagship 7.0-8.3x faster). The built-in
    tables leave it 0: no slowdown, the programs and costs of before."""
    from morello_build.synth.cost import CLASSES, contention
    from morello_build.synth.search import Search

    spec = "matmul 1x2048x16384 b=bf16:col"

    def best(threads: int, shared: float):
        target = get_target("avx512", threads=threads, profile="builtin")
        target = dataclasses.replace(target, costs=dataclasses.replace(target.costs, gl_line_shared=shared))
        return target, Search(target).best(parse_spec(spec).to_spec(target.limits()))

    _, one = best(1, 0.0)
    _, free = best(16, 0.0)
    gl_line = TARGETS["avx512"].costs.gl_line
    target, bound = best(16, gl_line / 8)  # the machine reads as fast as 8 threads alone
    assert contention((16,), True, target) == 2.0 and contention((4,), True, target) == 1.0
    assert contention((16,), False, target) == 1.0 and contention((16,), True, TARGETS["avx512"]) == 1.0
    assert one.cost / free.cost > 14
    transfer = CLASSES.index("transfer")
    assert bound.parts[transfer] == pytest.approx(2 * free.parts[transfer], rel=0.01)
    assert 7 < one.cost / bound.cost < 10  # 9.2x on 16 threads, where it was 15.9x


def test_the_slowest_thread_finishes_a_share_of_a_task_late_so_finer_tasks_lose_less():
    """CostTable.tail_percent: the busiest thread of a parallel loop runs ceil(tasks / threads) tasks and the slowest
    thread's lateness of one more (a 16-vCPU Emerald Rapids VM ran the flagship GEMV 1.37x faster in 128 tasks than in
    16 on 16 threads). Measured on tail_threads threads, it counts (P - 1) / (tail_threads - 1) on a loop of P (the
    chance its threads include the slow one: pairs of that VM's vCPUs ran alike); none under 10% or on one thread; 0
    (the built-in tables) changes nothing."""
    from morello_build.synth.loops import lateness
    from morello_build.target.costs import CostTable

    assert loop_weights((16,), True, 16, tail=0.5) == (1.5,)  # 16 tasks: one and a half tasks' time
    assert loop_weights((128,), True, 16, tail=0.5) == (8.5,)  # 128 tasks of an eighth: 8.5 / 8 = 1.06 of 16's one
    assert loop_weights((16,), False, 16, tail=0.5) == (16,)
    assert loop_weights((16,), True, 16) == (1,)
    vm = CostTable(tail_percent=105, tail_threads=16)
    assert lateness(16, 16, vm) == pytest.approx(1.05) and lateness(64, 16, vm) == pytest.approx(1.05)
    assert lateness(8, 16, vm) == pytest.approx(1.05 * 7 / 15)  # 8 tasks: 8 threads of 16
    assert lateness(2, 16, vm) == 0.0  # 1.05 / 15 = 7%: under the floor, as the VM's 2-thread pairs ran
    assert lateness(1, 16, vm) == lateness(16, 1, vm) == 0.0  # one thread waits for no one
    assert lateness(16, 16, CostTable()) == 0.0
    assert lateness(2, 2, CostTable(tail_percent=30)) == pytest.approx(0.3)  # tail_threads unknown: all of it
