#!/usr/bin/env python3
"""Generate the kernel headers and test translation units of cpp_tests/.

For each ISA, every spec of the chosen matrix is synthesized and emitted as ``<out>/<set>_<isa>/kN.hpp``
(namespace ``t_<set>_<isa>``, kernel ``kN``), and ``<out>/<set>_<isa>.cpp`` includes them all and checks
each kernel against its reference (check.hpp). Files are written only when their bytes change, so
rebuilds recompile only what changed. Synthesis runs in parallel processes (-j), each keeping one search
(memo) per ISA and thread count.

    python gen_tests.py --out DIR --set main,threads16 --isas scalar,avx2,avx512 [--isas-of threads16=avx2] [-j 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the morello_build package of this checkout, when not installed

from morello_build.codegen import emit_header  # noqa: E402
from morello_build.ir.grammar import parse_spec  # noqa: E402
from morello_build.ir.impl import Loop, walk  # noqa: E402
from morello_build.synth.search import NoProgram, Search, keep_out_of_collections  # noqa: E402
from morello_build.target import get_target  # noqa: E402
from morello_build.tools.api import open_store  # noqa: E402
from morello_build.tools.api import search_isa as same_program_isa  # noqa: E402
from morello_build.tools.files import write_if_changed  # noqa: E402

# The matrix: f32 and bf16 (weights and activations), row/col layouts, size 1, primes, sizes that are
# not multiples of the vector width (8 or 16), the flagship GEMV, batch, accum, K=1, N=1, serial.
MAIN = [
    "matmul 1x1x1",
    "matmul 7x13x29",
    "matmul 5x13x29 a=bf16 b=bf16 c=bf16",
    "matmul 7x13x29 a=f32:col b=bf16:col c=f32:col",
    "matmul 13x7x3 a=bf16:col b=f32 c=bf16:col",
    "matmul 16x33x17 b=bf16:col",
    "matmul 1x40x5 b=bf16:col c=bf16",
    "matmul 1x100x9 b=bf16:col",
    "matmul 1x70x3 a=bf16 b=bf16:col",
    "matmul 2x45x11 a=bf16 b=bf16:col c=bf16",
    "matmul 3x300x2 b=f32:col",
    "matmul 4x9x13 batch=3",
    "matmul 6x10x20 accum",
    "matmul 6x10x20 a=bf16 c=bf16 batch=2 accum",
    "matmul 9x1x31",
    "matmul 33x17x1",
    "matmul 64x64x64",
    "matmul 24x64x48 serial",
    "matmul 30x600x70",  # k split with its first slice peeled, a loop over the next ones, a ragged one
    "matmul 4x600x20 a=bf16 b=bf16 c=bf16",  # long k, bf16 C: accumulated in f32 and rounded once
    "matmul 1x2048x256 a=bf16 b=bf16:col",
    "matmul 1x2048x16384 b=bf16:col",
]
# Under AddressSanitizer + UndefinedBehaviorSanitizer: ragged tails, every kernel family, small sizes.
SANITIZE = [
    "matmul 5x13x29 a=bf16 b=bf16 c=bf16",
    "matmul 1x40x5 b=bf16:col c=bf16",
    "matmul 1x70x3 a=bf16 b=bf16:col",
    "matmul 3x300x2 b=f32:col",
    "matmul 6x10x20 a=bf16 c=bf16 batch=2 accum",
    "matmul 33x17x1",
    "matmul 64x64x64",
]
# Under ThreadSanitizer with MORELLO_NUM_THREADS=4: programs with a parallel loop (default pool, user pf).
TSAN = [
    "matmul 64x64x64",
    "matmul 1x2048x256 a=bf16 b=bf16:col",
]
# The main matrix's specs whose programs have a parallel loop, synthesized for 16 threads (more tasks than this
# machine's cores), run through a pf of 16 std::threads and through the default pool with MORELLO_NUM_THREADS=1,
# 2, 16 (CMakeLists.txt). The other specs of MAIN get serial programs at 2 and at 16 threads alike (the same
# program main checks): a search for 16 threads of each would add a fifth of the matrix's synthesis time. Plus
# the long-k bf16-C case at M = 8 (main's M = 4 is serial even at 16 threads on AVX-512): its 16-thread program
# splits rows (N = 8: with 20 its search took 21-24 s an ISA, a seventh of the matrix's, for the same checks).
# Which main programs are parallel depends on the ISA (M = 4 is on AVX2): a MAIN spec not listed here whose
# 2-thread program on a threads16 ISA has a parallel loop is added to the set when it is generated
# (_parallel_extras).
THREADS16 = [
    "matmul 64x64x64",
    "matmul 30x600x70",
    "matmul 8x600x8 a=bf16 b=bf16 c=bf16",
    "matmul 1x2048x256 a=bf16 b=bf16:col",
    "matmul 1x2048x16384 b=bf16:col",
]
SETS = {"main": MAIN, "sanitize": SANITIZE, "tsan": TSAN, "threads16": THREADS16}
# The thread count each set's programs are synthesized for: pinned, so that the tests do not depend on
# the machine's core count (2: the programs of a 2-core machine, what CI has).
THREADS = {"threads16": 16}
# What the set's test programs define before check.hpp: the threaded pf its check runs besides the default.
PRELUDE = {"threads16": ["#define MORELLO_CHECK_THREADED_PF ::morello_check::AtomicFor<16>"]}


_SEARCHES: dict = {}  # per worker process, ISA and thread count: one memo shared by every spec it synthesizes


def _search(search_isa: str, threads: int, db: str | None):
    """This process's search for (ISA, threads). Its in-memory memo serves every later spec (a fresh Search per
    spec would replay each sub-program from the DB again: a third more time on a cold DB); the DB, when given,
    carries programs across processes, thread counts (serial specs) and runs (a rerun after a codegen-only
    change searches nothing). Returns (search, store or None)."""
    key = (search_isa, threads)
    if key not in _SEARCHES:
        target = get_target(search_isa, threads=threads)
        store = open_store(db, target) if db else None
        _SEARCHES[key] = Search(target, store=store), store
    return _SEARCHES[key]


def _has_parallel_loop(impl) -> bool:
    return any(isinstance(n, Loop) and n.parallel for n in walk(impl))


def _one(job):
    """Synthesize ``spec`` once and emit it for every ISA in ``outputs`` [(isa, ns, name, path)]."""
    spec, search_isa, threads, outputs, db = job
    t0 = time.perf_counter()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    search, store = _search(search_isa, threads, db)
    user = parse_spec(spec)
    impl = search.best(user.to_spec(search.target.limits()))
    if store is not None:
        store.flush()  # visible to the other processes now (the pool's processes are never closed)
    keep_out_of_collections()  # this process keeps the memo for its next specs
    if impl is None:
        raise NoProgram(f"no program for '{spec}' on {search_isa}")
    for isa, ns, name, path in outputs:
        write_if_changed(path, emit_header(user, impl, get_target(isa, threads=threads), name=name, namespace=ns))
    return spec, search_isa, threads, time.perf_counter() - t0, _has_parallel_loop(impl)


def _many(jobs):
    return [_one(j) for j in jobs]


def _by_search(jobs):
    """The jobs as one task per search (ISA and thread count), so that each search's memo serves all of its
    specs in one process (a task per spec built each ISA's memo in every process: a fifth more time). The
    2-thread searches first, so that with a DB the other counts find the serial specs they share
    (db/store.py); the largest first (by spec count), so the process pool finishes together."""
    tasks: dict = {}
    for job in jobs:
        tasks.setdefault((job[1], job[2]), []).append(job)
    order = sorted(tasks, key=lambda key: (key[1] != 2, -len(tasks[key])))
    return [tasks[key] for key in order]


def _run(jobs, processes: int):
    if processes > 1:
        with ProcessPoolExecutor(processes) as ex:
            return [r for rs in ex.map(_many, _by_search(jobs)) for r in rs]
    return [_one(j) for j in jobs]


def _parallel_extras(results, isas16: str, out: Path, units) -> dict:
    """Outputs by search key (spec, search ISA, threads), as main's groups, for the MAIN specs not yet in a threads16
    unit whose 2-thread program on a threads16 ISA has a parallel loop: synthesized for 16 threads and appended to
    that ISA's unit (the set checks every parallel main program, whichever the ISA makes parallel)."""
    groups: dict = {}
    for isa16 in [i for i in isas16.split(",") if i]:
        ns, entries = units[("threads16", isa16)]
        for spec, isa, threads, _, parallel in results:
            listed = spec in [e[0] for e in entries]
            if (
                parallel
                and threads == 2
                and spec in MAIN
                and not listed
                and isa == same_program_isa(parse_spec(spec), isa16)
            ):
                name = f"k{len(entries)}"
                path = out / f"threads16_{isa16}" / f"{name}.hpp"
                entries.append((spec, name, path))
                groups.setdefault((spec, isa, THREADS["threads16"]), []).append((isa16, ns, name, path))
    return groups


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", default="main", help=f"comma-separated sets of {sorted(SETS)}")
    ap.add_argument("--isas", default="scalar,avx2,avx512,avx512_bf16,highway")
    ap.add_argument("--isas-of", action="append", default=[], metavar="SET=ISAS", help="a set's own ISAs")
    ap.add_argument("--specs", help="';'-separated specs replacing the set's matrix")
    ap.add_argument("--db", help="synthesis DB file (morello_build.db) to reuse programs across runs")
    ap.add_argument("-j", "--jobs", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args(argv)
    out = Path(args.out)
    sets = [s for s in args.set.split(",") if s]
    for name in sets:
        if name not in SETS:
            ap.error(f"unknown set '{name}' (accepted: {', '.join(sorted(SETS))})")
    own_isas = dict(a.split("=", 1) for a in args.isas_of)
    groups, units = {}, {}
    for set_name in sets:
        specs = args.specs.split(";") if args.specs else SETS[set_name]
        for isa in [s for s in own_isas.get(set_name, args.isas).split(",") if s]:
            ns = f"t_{set_name}_{isa}"
            entries = []
            for i, spec in enumerate(specs):
                path = out / f"{set_name}_{isa}" / f"k{i}.hpp"
                key = (spec, same_program_isa(parse_spec(spec), isa), THREADS.get(set_name, 2))
                groups.setdefault(key, []).append((isa, ns, f"k{i}", path))
                entries.append((spec, f"k{i}", path))
            units[(set_name, isa)] = (ns, entries)
    jobs = [(s, i, t, o, args.db) for (s, i, t), o in groups.items()]
    t0 = time.perf_counter()
    results = _run(jobs, args.jobs)
    slow = sorted(results, key=lambda r: -r[3])[:3]
    print(
        f"gen_tests: {sum(len(j[3]) for j in jobs)} headers from {len(jobs)} searches "
        f"in {time.perf_counter() - t0:.1f} s "
        f"(slowest: {', '.join(f'{s} [{i}] {t:.1f}s' for s, i, _, t, _ in slow)})"
    )
    if "threads16" in sets and not args.specs:
        extra = _parallel_extras(results, own_isas.get("threads16", args.isas), out, units)
        if extra:
            t1 = time.perf_counter()
            _run([(s, i, t, o, args.db) for (s, i, t), o in extra.items()], args.jobs)
            took = time.perf_counter() - t1
            print(f"gen_tests: threads16 adds {len(extra)} parallel main program(s) in {took:.1f} s")
    for (set_name, isa), (ns, entries) in units.items():
        lines = [f"// Generated by cpp_tests/gen_tests.py: {set_name} matrix on {isa}.", *PRELUDE.get(set_name, [])]
        lines += ['#include "check.hpp"']
        lines += [f'#include "{p.parent.name}/{p.name}"' for _, _, p in entries]
        lines += ["", "int main() {", "  int failures = 0;"]
        for spec, name, _ in entries:
            u = parse_spec(spec)
            cols = ", ".join("true" if lay == "col" else "false" for lay in u.layouts)
            lines.append(f"  failures += MORELLO_CHECK_KERNEL({ns}, {name}, {cols});")
        lines += ['  std::printf("%d failure(s)\\n", failures);', "  return failures != 0;", "}", ""]
        write_if_changed(out / f"{set_name}_{isa}.cpp", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
