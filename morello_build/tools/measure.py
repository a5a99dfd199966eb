"""Measure programs on this host: the instrument (scripts/rank.py) and ``synth --tune`` share it.

``build_benchmark`` emits each program as a header (its own name, in namespace ``morello_rank``), compiles
each in its own translation unit (the headers' function target attributes choose the ISA: no ``-m`` flags)
and links them with one timing harness. ``time_programs`` runs that binary in several fresh processes;
each process times every program once per round, in a new random order each round (interleaved, so
drifts of a shared host hit all alike), ``rounds`` times. Warm: one set of operands, already in cache.
DRAM: ``copies`` distinct sets of operands (random data, filled per copy: identical pages may be merged by
the host), rotated call by call, so that every call finds its operands out of cache. A program's time is
the median over every sample of every process; its spread the interquartile range over the median.
Serial programs may be timed by their thread's CPU time (``clock="cpu"``), which a busy host inflates less.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from morello_build.check.testing import cxx
from morello_build.ir.epilogue import NO_EPILOGUE

NAMESPACE = "morello_rank"

_HARNESS = r"""
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include <time.h>
{decls}
using Fn = void (*)(const void*, const void*, void*);
struct Info {{
  using a_type = {a_type};
  using b_type = {b_type};
  using c_type = {c_type};
  static constexpr int batch = {batch}, m = {m}, k = {k}, n = {n};
}};
static const Fn kFns[] = {{{fns}}};
static const int kN = sizeof(kFns) / sizeof(kFns[0]);

template <class T> static void fill(std::vector<T>& v, std::mt19937& g) {{
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& x : v) {{
    float f = d(g);
    if (sizeof(T) == 4) std::memcpy(&x, &f, 4);
    else {{  // bf16: the high half of the f32
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      std::uint16_t h = std::uint16_t(u >> 16);
      std::memcpy(&x, &h, 2);
    }}
  }}
}}

int main(int argc, char** argv) {{
  // usage: bench COPIES ROUNDS SAMPLE_SECONDS SEED [cpu|wall]
  const int copies = std::atoi(argv[1]), rounds = std::atoi(argv[2]);
  const bool cpu = argc > 5 && std::strcmp(argv[5], "cpu") == 0;
  const double sample_s = std::atof(argv[3]);
  std::mt19937 g(unsigned(std::atoi(argv[4])));
  const std::size_t bt = Info::batch;
  const std::size_t na = bt * Info::m * Info::k, nb = bt * Info::k * Info::n, nc = bt * Info::m * Info::n;
  std::vector<std::vector<Info::a_type>> a(copies, std::vector<Info::a_type>(na));
  std::vector<std::vector<Info::b_type>> b(copies, std::vector<Info::b_type>(nb));
  std::vector<std::vector<Info::c_type>> c(copies, std::vector<Info::c_type>(nc));
  for (int i = 0; i < copies; ++i) {{ fill(a[i], g); fill(b[i], g); fill(c[i], g); }}
  // cpu: this thread's CPU time (a serial program's time without the time other processes ran instead)
  auto now = [cpu] {{
    timespec ts;
    clock_gettime(cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  }};
  int next = 0;
  auto run = [&](int k, long reps) {{
    const double t0 = now();
    for (long r = 0; r < reps; ++r) {{
      kFns[k](a[next].data(), b[next].data(), c[next].data());
      next = (next + 1) % copies;
    }}
    return now() - t0;
  }};
  std::vector<long> reps(kN);
  for (int k = 0; k < kN; ++k) {{  // warm up, then enough calls per sample to take sample_s
    long n = copies;
    double t = run(k, n);
    while (t < 1e-3 && n < (1L << 40)) t = run(k, n *= 2);
    reps[k] = std::max(long(copies), long(sample_s / (t / n)));
  }}
  std::vector<int> order(kN);
  for (int k = 0; k < kN; ++k) order[k] = k;
  for (int r = 0; r < rounds; ++r) {{
    std::shuffle(order.begin(), order.end(), g);
    for (int k : order) std::printf("%d %.6e\n", k, run(k, reps[k]) / reps[k]);
  }}
  return 0;
}}
"""

_WRAPPER = """#include "{header}"
void morello_rank_run{i}(const void* a, const void* b, void* c) {{
  {ns}::k{i}(static_cast<const {ns}::k{i}_info::a_type*>(a), static_cast<const {ns}::k{i}_info::b_type*>(b),
           static_cast<{ns}::k{i}_info::c_type*>(c));
}}
"""


@dataclass(frozen=True)
class Timing:
    seconds: float  # the median time of one call
    spread: float  # interquartile range / median, over every sample
    samples: int
    low: float  # the 10th percentile: less sensitive to a busy host, which only ever adds time
    q1: float = 0.0  # the quartiles
    q3: float = 0.0
    # The medians of the odd-numbered and of the even-numbered samples (alternate rounds): two measurements
    # of the same program, whose agreement over a candidate set bounds any model's (``repeatability``).
    halves: tuple[float, float] = (0.0, 0.0)


def _compile(cmd: list[str], timeout: float) -> None:
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if r.returncode:
        raise RuntimeError(f"compile failed: {' '.join(cmd)}\n{r.stdout[-5000:]}")


def build_benchmark(user, target, impls, workdir, *, jobs: int = 2, opt: str = "-O2", timeout: float = 900) -> Path:
    """Compile ``impls`` (programs for ``user`` on ``target``) into one benchmark binary; returns its path."""
    from morello_build.codegen import emit_header

    if user.kind != "matmul" or user.epilogue != NO_EPILOGUE:
        raise ValueError("the benchmark harness times plain matmul specs only")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    base = [*cxx().split(), "-std=c++17", opt, "-pthread", f"-I{workdir}"]
    for i, impl in enumerate(impls):
        text = emit_header(user, impl, target, name=f"k{i}", namespace=NAMESPACE)
        (workdir / f"k{i}.hpp").write_text(text)
    # ``jobs`` translation units of several headers each: the shared runtime is compiled once per unit.
    chunks = [list(range(len(impls)))[j::jobs] for j in range(jobs) if j < len(impls)]
    todo, objs = [], []
    for j, chunk in enumerate(chunks):
        src, obj = workdir / f"chunk{j}.cpp", workdir / f"chunk{j}.o"
        src.write_text("".join(_WRAPPER.format(header=f"k{i}.hpp", i=i, ns=NAMESPACE) for i in chunk))
        todo.append([*base, "-c", str(src), "-o", str(obj)])
        objs.append(str(obj))
    decls = "\n".join(f"void morello_rank_run{i}(const void*, const void*, void*);" for i in range(len(impls)))
    main = workdir / "bench_main.cpp"
    fns = ", ".join(f"morello_rank_run{i}" for i in range(len(impls)))
    ctypes = ["float" if dt.bytes == 4 else "std::uint16_t" for dt in user.operand_dtypes()]
    main.write_text(
        _HARNESS.format(
            decls=decls,
            fns=fns,
            a_type=ctypes[0],
            b_type=ctypes[1],
            c_type=ctypes[2],
            batch=user.batch,
            m=user.m,
            k=user.k,
            n=user.n,
        )
    )
    todo.append([*base, "-c", str(main), "-o", str(workdir / "bench_main.o")])
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        list(pool.map(lambda cmd: _compile(cmd, timeout), todo))
    exe = workdir / "bench"
    _compile([*base, str(workdir / "bench_main.o"), *objs, "-o", str(exe)], timeout)
    return exe


def cpu_name() -> str:
    """The host CPU's model name (/proc/cpuinfo), or the platform's processor string."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def l3_bytes() -> int:
    """The largest cache of CPU 0 (sysfs), or 32 MiB where it cannot be read."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        best = max(best, int(text.rstrip("KMG") or 0) * scale)
    return best or 32 << 20


def dram_copies(user, cache_bytes: int | None = None) -> int:
    """Operand sets to rotate through so that they span at least twice the last-level cache."""
    per_set = sum(s[0] * s[1] * s[2] * dt.bytes for s, dt in zip(user.operand_shapes(), user.operand_dtypes()))
    return max(2, -(-2 * (cache_bytes or l3_bytes()) // per_set))


def time_programs(
    exe,
    count: int,
    *,
    copies: int = 1,
    processes: int = 3,
    rounds: int = 5,
    sample_s: float = 0.005,
    clock: str = "wall",
    env=None,
) -> list[Timing]:
    """Time the ``count`` programs of benchmark ``exe``: ``processes`` fresh processes of ``rounds``
    interleaved rounds each (see the module's doc); ``copies`` > 1 rotates operand sets (DRAM). ``clock``
    "cpu" counts the calling thread's CPU time: for serial programs on a shared host, it leaves out the
    time other processes ran instead (cache and memory-bus contention still count); "wall" for parallel
    programs."""
    samples: list[list[float]] = [[] for _ in range(count)]
    for p in range(processes):
        args = [str(exe), str(copies), str(rounds), repr(sample_s), str(1234 + p), clock]
        r = subprocess.run(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ, **(env or {}))
        )
        if r.returncode:
            raise RuntimeError(f"benchmark {exe} failed ({r.returncode}): {r.stdout[-2000:]}")
        for line in r.stdout.split("\n"):
            if line.strip():
                k, t = line.split()
                samples[int(k)].append(float(t))
    return [_summary(s) for s in samples]


def default_clock(user) -> str:
    """ "cpu" for serial specs (their programs run on the calling thread), else "wall"."""
    return "cpu" if user.serial else "wall"


def _summary(samples: list[float]) -> Timing:
    xs = sorted(samples)
    med = median(xs)
    q1, q3 = xs[len(xs) // 4], xs[(3 * len(xs)) // 4]
    halves = (median(samples[0::2]), median(samples[1::2])) if len(samples) > 1 else (med, med)
    return Timing(med, (q3 - q1) / med if med else 0.0, len(xs), xs[len(xs) // 10], q1, q3, halves)


def repeatability(timings: list[Timing]) -> float:
    """Spearman's rho between the two halves of the samples (Timing.halves) over a set of programs: how
    well the measurement ranks them against itself, the most a cost model's rho can reach on that set
    (near-ties of real programs rank by noise)."""
    return spearman([t.halves[0] for t in timings], [t.halves[1] for t in timings])


def one_program_for_all(modes: dict[str, list[float]], pick: int = 0) -> dict:
    """How close one program gets to the fastest in every mode at once (``modes``: seconds per candidate, e.g.
    warm and from DRAM): for each candidate its worst ratio to a mode's fastest; the least of those (``best``,
    candidate ``best_index``) is the most any single pick among them can reach, beside the ``pick``'s own. Where
    the fastest warm and the fastest from DRAM are different programs, no cost model picks within 3% of both
    unless some candidate is."""
    fastest = {m: min(secs) for m, secs in modes.items()}
    count = len(next(iter(modes.values())))
    worst = [max(secs[i] / fastest[m] for m, secs in modes.items()) for i in range(count)]
    best = min(range(count), key=worst.__getitem__)
    return dict(best=worst[best], best_index=best, pick=worst[pick])


def spearman(xs, ys) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    rx, ry = _ranks(xs), _ranks(ys)
    n = len(xs)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return cov / (vx * vy) if vx and vy else 0.0


def misranked(costs, seconds, most: int = 3) -> list[dict]:
    """The ``most`` candidates that account for the largest shares of the model's rank error: for each, its rank
    by cost and by time (1: the cheapest, the fastest) and its share of the sum of squared rank differences
    (Spearman's rho is 1 - 6 x that sum / (n^3 - n) without ties), and rho once it and those before it are left
    out. Where one or two programs take most of the error, a model change for them is where rho is won (32^3 warm,
    Emerald Rapids: two of 30 carried 63% of it, bench/RANK.md)."""
    rc, rt = _ranks(costs), _ranks(seconds)
    d2 = [(a - b) ** 2 for a, b in zip(rc, rt)]
    total = sum(d2) or 1.0
    worst = sorted((i for i in range(len(d2)) if d2[i]), key=lambda i: -d2[i])[:most]
    out = []
    for n, i in enumerate(worst, 1):
        rest = [j for j in range(len(costs)) if j not in worst[:n]]
        rho = spearman([costs[j] for j in rest], [seconds[j] for j in rest]) if len(rest) > 2 else None
        out.append(dict(index=i, cost_rank=rc[i], time_rank=rt[i], share=d2[i] / total, rho_without_these=rho))
    return out


def _ranks(xs) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def to_json(obj) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)
