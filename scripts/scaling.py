"""Measured multi-core scaling of generated kernels against the cost model's prediction, in one process.

usage: python scripts/scaling.py SPEC [SPEC ...] [--threads 1,2,4,8,16] [--profiles host[,FILE|NAME ...]]
       [--isa native] [--dram] [--rounds 9] [--calls 3] [--jobs N] [--json OUT]

For each spec, thread count T and profile, the spec is synthesized for T threads and emitted as a header (in
``--jobs`` processes). One binary per spec holds all of its programs, and times them in interleaved rounds: each
round runs every program ``calls`` times in a fresh random order, on a pool of T threads (bench/src/pool.hpp,
through the header's ``pf`` overload), each call on the next of the rotated operand copies, timed by the wall
clock. ``--dram``: copies totalling at least max(384 MiB, twice the L3 that sysfs reports), so that every call
reads its operands from DRAM, and the same rounds time the read sweep (bench/quant/sweep.c, one contiguous slice
per thread) over the largest input at each T, the bandwidth reference; else one copy, warm, and the reference is
12 independent chains of 512-bit FMAs (256-bit without AVX-512) on each of the T threads, the compute peak. A
round's figure is the median of its calls. Before timing, every program's output is compared with the header's
reference loop (specs of at most 2^28 multiply-adds) or with the first program's, within 1e-3 of the outputs' RMS.

The report, per program: the median over rounds and the quartiles, GB/s (all operands' bytes) and GFLOP/s, the
measured speed-up over the same profile's 1-thread program and the model's (the 1-thread program's cost over
this one's), and the share of the sweep (``--dram``) or of the FMA peak at T threads. A second profile's programs
are also given as the time of the first profile's program at the same T over theirs (> 1: the second profile's is
faster).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kernel_ab import PARAM, param_rows  # scripts/, this script's directory

from morello_build.check.testing import cxx
from morello_build.codegen import emit_header
from morello_build.tools.api import synthesize_program
from morello_build.tools.measure import l3_bytes

REPO = Path(__file__).resolve().parent.parent
_SHAPE = re.compile(r"(\d+)x(\d+)x(\d+)")
_BATCH = re.compile(r"\bbatch=(\d+)")

_HARNESS = r"""
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>
#include <immintrin.h>

#include "common.hpp"
#include "pool.hpp"

extern "C" std::uint64_t morello_sweep(const char* p, std::size_t bytes, int threads, int mode);
{decls}
using Fn = void (*)(void* const*, bench::Pool&);
static const Fn kFns[] = {{{fns}}};
static const int kThreads[] = {{{threads}}};
static const int kN = sizeof(kFns) / sizeof(kFns[0]);
static const int kReference = {reference};  // the index of the reference loop in kFns, or -1
struct Param {{ int dtype; std::size_t elems; int role; std::size_t block_bytes; int block_header; int zeros; }};
static const Param kParams[] = {{{params}}};
static const int kP = sizeof(kParams) / sizeof(kParams[0]);

static std::size_t bytes_of(const Param& p) {{
  return p.elems * (p.dtype == 0 ? 4 : p.dtype == 1 || p.dtype == 4 ? 2 : 1);
}}
// splitmix64: every copy gets its own bytes (identical copies could share pages that the host merges)
static std::uint64_t next(std::uint64_t& s) {{
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}}
static float unit(std::uint64_t& s) {{ return float(std::int32_t(next(s)) >> 8) * 0x1p-23f; }}  // (-1, 1)
static std::uint16_t half(std::uint64_t& s) {{ return std::uint16_t(0x2C00 + next(s) % 0x1000); }}  // [2^-4, 1)

static void fill(const Param& p, std::uint8_t* v, std::uint64_t seed) {{
  const std::size_t n = bytes_of(p);
  if (p.role == 1) return std::memset(v, 0, n), void();
  if (p.dtype == 0) {{
    for (std::size_t e = 0; e < p.elems; ++e) {{ float f = unit(seed); std::memcpy(v + 4 * e, &f, 4); }}
  }} else if (p.dtype == 1) {{  // bf16: the high half of an f32 in (-1, 1), never NaN or subnormal
    for (std::size_t e = 0; e < p.elems; ++e) {{
      std::uint16_t h = bench::f32_to_bf16(unit(seed));
      std::memcpy(v + 2 * e, &h, 2);
    }}
  }} else if (p.dtype == 4) {{
    for (std::size_t e = 0; e < p.elems; ++e) {{ std::uint16_t h = half(seed); std::memcpy(v + 2 * e, &h, 2); }}
  }} else {{
    for (std::size_t o = 0; o < n; o += 8) {{
      std::uint64_t r = next(seed);
      std::memcpy(v + o, &r, std::min<std::size_t>(8, n - o));
    }}
    if (p.zeros) for (std::size_t o = 0; o < n; ++o) v[o] &= 15;
    for (std::size_t o = 0; p.block_header && o + 4 <= n; o += p.block_bytes) {{
      std::uint16_t h = p.block_header == 1 ? half(seed) : 0x3C00;  // ggml's fp16 d; gemma.cpp's bf16 1/scale
      std::memcpy(v + o, &h, 2);
      if (p.block_header == 2) {{ std::uint16_t z = 0; std::memcpy(v + o + 2, &z, 2); }}
    }}
  }}
}}

static double seconds() {{
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}}

// The largest difference between two outputs, over the RMS of the first (NaN where both are NaN: equal).
static double worst(const Param& p, const std::uint8_t* x, const std::uint8_t* y) {{
  auto at = [&](const std::uint8_t* v, std::size_t e) {{
    if (p.dtype == 0) {{ float f; std::memcpy(&f, v + 4 * e, 4); return double(f); }}
    std::uint16_t h; std::memcpy(&h, v + 2 * e, 2); return double(bench::bf16_to_f32(h));
  }};
  double sq = 0, w = 0;
  for (std::size_t e = 0; e < p.elems; ++e) sq += at(x, e) * at(x, e);
  for (std::size_t e = 0; e < p.elems; ++e) {{
    const double a = at(x, e), b = at(y, e);
    if (std::isnan(a) && std::isnan(b)) continue;
    w = std::max(w, std::isnan(a - b) ? INFINITY : std::fabs(a - b));
  }}
  return w / std::sqrt(sq / double(p.elems) + 1e-30);
}}

// The FMA reference: 12 independent chains of 512-bit (else 256-bit) FMAs in registers, `steps` each (sink: their sum).
#define MORELLO_FMA_CHAINS(V, SET, FMA, ADD)                                                              \
  V a0 = SET(0.f), a1 = SET(1e-3f), a2 = SET(2e-3f), a3 = SET(3e-3f), a4 = SET(4e-3f), a5 = SET(5e-3f);   \
  V a6 = SET(6e-3f), a7 = SET(7e-3f), a8 = SET(8e-3f), a9 = SET(9e-3f), a10 = SET(1e-2f), a11 = SET(.011f); \
  const V m = SET(0.999f), c = SET(1e-4f);                                                                 \
  for (long k = 0; k < steps; ++k) {{                                                                      \
    a0 = FMA(a0, m, c), a1 = FMA(a1, m, c), a2 = FMA(a2, m, c), a3 = FMA(a3, m, c);                       \
    a4 = FMA(a4, m, c), a5 = FMA(a5, m, c), a6 = FMA(a6, m, c), a7 = FMA(a7, m, c);                       \
    a8 = FMA(a8, m, c), a9 = FMA(a9, m, c), a10 = FMA(a10, m, c), a11 = FMA(a11, m, c);                   \
  }}                                                                                                       \
  V s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));                                 \
  s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)))
__attribute__((target("avx512f"))) static void fma_chains512(long steps, float* sink) {{
  MORELLO_FMA_CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps);
  *sink = _mm512_reduce_add_ps(s);
}}
__attribute__((target("avx2,fma"))) static void fma_chains256(long steps, float* sink) {{
  MORELLO_FMA_CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps);
  *sink = _mm256_cvtss_f32(s);
}}

int main(int argc, char** argv) {{
  const int copies = std::atoi(argv[1]), rounds = std::atoi(argv[2]), calls = std::atoi(argv[3]);
  const int sweep = std::atoi(argv[4]);  // the index of the parameter the sweep reads, or -1 (then: FMA peaks)
  // One buffer per parameter holding its copies, each 4 KiB aligned (a Buf is 2 MiB at least).
  std::vector<bench::Buf> store;
  std::vector<std::vector<void*>> args(copies);
  for (int i = 0; i < kP; ++i) {{
    const std::size_t stride = (bytes_of(kParams[i]) + 4095) / 4096 * 4096;
    store.emplace_back(stride * copies);
    for (int c = 0; c < copies; ++c) {{
      args[c].push_back(store.back().as<std::uint8_t>() + stride * c);
      fill(kParams[i], static_cast<std::uint8_t*>(args[c].back()), 1234 + 7919ull * (c * kP + i));
    }}
  }}
  std::map<int, std::unique_ptr<bench::Pool>> pools;
  for (int k = 0; k < kN; ++k)
    if (!pools.count(kThreads[k])) pools[kThreads[k]] = std::make_unique<bench::Pool>(kThreads[k]);
  // Correctness: each program's outputs (copy 0) against the reference loop's, else the first program's.
  std::vector<std::vector<std::vector<std::uint8_t>>> outs(kN + 1);
  auto run_checked = [&](int k, Fn f, bench::Pool& pool) {{
    for (int i = 0; i < kP; ++i) if (kParams[i].role == 1) fill(kParams[i], static_cast<std::uint8_t*>(args[0][i]), 0);
    f(args[0].data(), pool);
    for (int i = 0; i < kP; ++i)
      if (kParams[i].role == 1) {{
        auto* p = static_cast<std::uint8_t*>(args[0][i]);
        outs[k].emplace_back(p, p + bytes_of(kParams[i]));
      }}
  }};
  for (int k = 0; k < kN; ++k) run_checked(k, kFns[k], *pools[kThreads[k]]);
  const int ref = kReference >= 0 ? kReference : 0;
  for (int k = 0; k < kN; ++k)
    for (int i = 0, o = 0; i < kP; ++i)
      if (kParams[i].role == 1) {{
        const double w = worst(kParams[i], outs[ref][o].data(), outs[k][o].data());
        if (!(w <= 1e-3)) return std::printf("program %d: output %d is off by %.3g RMS\n", k, i, w), 1;
        ++o;
      }}
  std::printf("check ok\n");
  // Timing: the programs, then a reference per thread count (index kN + j): the read sweep over the weights (from
  // DRAM), else the FMA chains on each thread of the pool; all in a fresh random order each round.
  std::vector<int> items;
  for (int k = 0; k < kN; ++k) if (k != kReference) items.push_back(k);
  std::vector<int> ref_threads;
  for (auto& [t, _] : pools) ref_threads.push_back(t);
  for (std::size_t j = 0; j < ref_threads.size(); ++j) items.push_back(kN + int(j));
  const bool wide = __builtin_cpu_supports("avx512f");
  std::vector<float> fma_sink(64 * 16);
  auto fma_peak = [&](bench::Pool& pool) {{  // one task per thread: its flops
    auto task = [&](std::int64_t t) {{
      wide ? fma_chains512(20000, &fma_sink[16 * (t % 64)]) : fma_chains256(20000, &fma_sink[16 * (t % 64)]);
    }};
    pool.run(0, pool.size(), task);
  }};
  std::mt19937 g(42);
  int cur = 0;
  volatile std::uint64_t sink = 0;
  auto once = [&](int item) {{
    void* const* a = args[(cur++) % copies].data();
    if (item < kN) kFns[item](a, *pools[kThreads[item]]);
    else if (sweep >= 0)
      sink = sink + morello_sweep(static_cast<const char*>(a[sweep]), bytes_of(kParams[sweep]), ref_threads[item - kN],
                                  0);
    else fma_peak(*pools[ref_threads[item - kN]]);
  }};
  std::printf("peak_flops_per_thread %.0f\n", 2.0 * (wide ? 16 : 8) * 12 * 20000);
  // Warm-up, and a batch size per item: calls of at least 25 us together, so the clock's cost does not count.
  std::vector<int> batch(kN + ref_threads.size(), 1);
  for (int item : items) {{
    once(item);
    const double t0 = seconds();
    once(item);
    batch[item] = std::max(1, int(25e-6 / std::max(seconds() - t0, 1e-9)));
  }}
  for (int r = 0; r < rounds; ++r) {{
    std::shuffle(items.begin(), items.end(), g);
    for (int item : items) {{
      std::vector<double> ts;
      for (int i = 0; i < calls; ++i) {{
        const double t0 = seconds();
        for (int b = 0; b < batch[item]; ++b) once(item);
        ts.push_back((seconds() - t0) / batch[item]);
      }}
      std::sort(ts.begin(), ts.end());
      if (item < kN) std::printf("%d %.4f\n", item, 1e6 * ts[ts.size() / 2]);
      else std::printf("ref%d %.4f\n", ref_threads[item - kN], 1e6 * ts[ts.size() / 2]);
    }}
  }}
  return 0;
}}
"""


@dataclass(frozen=True)
class Variant:
    spec: str
    threads: int
    profile: str
    isa: str


@dataclass(frozen=True)
class Program:
    variant: Variant
    header: str
    cost: float
    outline: str  # the program's first lines, what tells one from another


def synthesize(v: Variant, name: str) -> Program:
    user, target, impl, _ = synthesize_program(v.spec, isa=v.isa, threads=v.threads, db=None, profile=v.profile)
    header = emit_header(user, impl, target, name=name, namespace=f"sc_{name}")
    return Program(v, header, impl.cost, outline(header))


def outline(header: str) -> str:
    """The program's first four loops (``parallel for n by 1024 / for n by 8 / ...``): what tells one from another."""
    lines = header.split("// Program", 1)[1].split("\n\n", 1)[0].split("\n")[1:]
    loops = [re.sub(r"\s*\[cost.*", "", ln).strip("/ ") for ln in lines if re.match(r"//\s+(parallel )?for ", ln)]
    return " / ".join(loops[:4])


def label(profile: str) -> str:
    return Path(profile).stem if profile.endswith(".json") else profile


@dataclass(frozen=True)
class Entry:
    """What the binary times: a program through the bench's pool of its thread count (``pool``), or through the
    header's own default overload (``default``: its process-wide pool, sized to the CPUs the process may use)."""

    program: int
    pool: str


def compile_binary(programs: list[Program], params, entries: list[Entry], work: Path, reference: bool) -> Path:
    """One binary timing the entries (kernel i: entry i; the last: the first program's reference loop if asked)."""
    sources, fns, threads = [], [], []
    for i, p in enumerate(programs):
        (work / f"k{i}.hpp").write_text(p.header)
        (work / f"k{i}.cpp").write_text(
            f'#include "k{i}.hpp"\n#include "pool.hpp"\n'
            f"void run{i}(void* const* a, bench::Pool& p) {{ sc_k{i}::k{i}_call(a, bench::PoolPF{{&p}}); }}\n"
            f"void run{i}_default(void* const* a, bench::Pool&) {{ sc_k{i}::k{i}_call(a); }}\n"
        )
        sources.append(work / f"k{i}.cpp")
    for e in entries:
        fns.append(f"run{e.program}" + ("_default" if e.pool == "default" else ""))
        threads.append(str(programs[e.program].variant.threads))
    if reference:
        (work / "ref.cpp").write_text(
            '#include "k0.hpp"\n#include "pool.hpp"\n'
            "void run_ref(void* const* a, bench::Pool&) { sc_k0::k0_reference_call(a); }\n"
        )
        sources.append(work / "ref.cpp")
        fns.append("run_ref")
        threads.append("1")
    (work / "main.cpp").write_text(
        _HARNESS.format(
            decls="\n".join(f"void {f}(void* const*, bench::Pool&);" for f in fns),
            fns=", ".join(fns),
            threads=", ".join(threads),
            reference=len(entries) if reference else -1,
            params=param_rows(params),
        )
    )
    base = [*cxx().split(), "-std=c++20", "-O2", f"-I{work}", f"-I{REPO / 'bench' / 'src'}"]
    jobs = [[*base, "-c", str(s), "-o", str(s.with_suffix(".o"))] for s in [*sources, work / "main.cpp"]]
    jobs.append(["gcc", "-O2", "-c", str(REPO / "bench" / "quant" / "sweep.c"), "-o", str(work / "sweep.o")])
    with ThreadPoolExecutor(os.cpu_count()) as ex:
        for r in ex.map(lambda cmd: subprocess.run(cmd, capture_output=True, text=True), jobs):
            if r.returncode:
                sys.exit(f"scaling: compiling failed: {r.stderr.strip().splitlines()[0] if r.stderr else r.args}")
    objs = [str(s.with_suffix(".o")) for s in [*sources, work / "main.cpp"]] + [str(work / "sweep.o")]
    subprocess.run([*base, *objs, "-lpthread", "-o", str(work / "scaling")], check=True)
    return work / "scaling"


def param_bytes(param: tuple) -> int:
    """A header's parameter (name, dtype, elems, role, ...)'s bytes: dtype 0 f32, 1 bf16 and 4 f16, else bytes."""
    _, dtype, elems, *_ = param
    return int(elems) * (4 if dtype == "0" else 2 if dtype in "14" else 1)


def copies_for(params, dram: bool) -> int:
    """Operand sets to rotate: with ``dram``, at least max(384 MiB, twice the L3) in all, as the bench's
    (bench.cpp copies_for); else one, warm."""
    if not dram:
        return 1
    per_copy = sum(map(param_bytes, params))
    return max(2, -(-max(384 << 20, 2 * l3_bytes()) // per_copy))


def measure(spec: str, programs: list[Program], args, work: Path) -> dict:
    params = PARAM.findall(programs[0].header)
    m, k, n = map(int, _SHAPE.search(spec).groups())
    batch = int(b.group(1)) if (b := _BATCH.search(spec)) else 1
    macs = batch * m * k * n
    inputs = [i for i, p in enumerate(params) if p[3] == "0"]
    sweep = max(inputs, key=lambda i: param_bytes(params[i])) if args.dram else -1
    # the header's own pool where the program was synthesized for every CPU the process may use
    cpus = len(os.sched_getaffinity(0))
    entries = [Entry(i, "pool") for i in range(len(programs))]
    entries += [Entry(i, "default") for i, p in enumerate(programs) if p.variant.threads == cpus]
    binary = compile_binary(programs, params, entries, work, reference=macs <= 1 << 28)
    copies = copies_for(params, args.dram)
    run = [str(binary), str(copies), str(args.rounds), str(args.calls), str(sweep)]
    env = {k: v for k, v in os.environ.items() if k != "MORELLO_NUM_THREADS"}
    out = subprocess.run(run, capture_output=True, text=True, env=env)
    if out.returncode or "check ok" not in out.stdout:
        last = (out.stdout + out.stderr).strip().splitlines() or [f"the binary exited with status {out.returncode}"]
        sys.exit(f"scaling: {spec}: {last[-1]}")
    times: dict[str, list[float]] = {}
    for line in out.stdout.split("\n"):
        if line.strip() and line != "check ok":
            key, t = line.split()
            times.setdefault(key, []).append(float(t))
    peak_flops = times.pop("peak_flops_per_thread")[0]
    total_bytes = sum(map(param_bytes, params))
    rows = []
    for i, e in enumerate(entries):
        p = programs[e.program]
        ts = sorted(times[str(i)])
        q = len(ts) // 4
        row = {
            "threads": p.variant.threads,
            "profile": label(p.variant.profile),
            "pool": e.pool,
            "us": statistics.median(ts),
            "q1": ts[q],
            "q3": ts[-1 - q],
            "cost": p.cost,
            "program": p.outline,
        }
        row["GB/s"] = total_bytes / row["us"] / 1e3
        row["GFLOP/s"] = 2 * macs / row["us"] / 1e3
        ref = statistics.median(times[f"ref{p.variant.threads}"])
        if sweep >= 0:
            row["sweep_us"] = ref
            row["share of sweep"] = ref / row["us"]
        else:  # the FMA chains on every thread
            row["peak GFLOP/s"] = p.variant.threads * peak_flops / ref / 1e3
            row["share of peak"] = row["GFLOP/s"] / row["peak GFLOP/s"]
        rows.append(row)
    for row in rows:
        same = [r for r in rows if r["profile"] == row["profile"] and r["pool"] == "pool"]
        one = next((r for r in same if r["threads"] == 1), None)
        if one:
            row["speed-up"] = one["us"] / row["us"]
            row["model speed-up"] = one["cost"] / row["cost"]
        first = next(r for r in rows if r["threads"] == row["threads"] and r["pool"] == row["pool"])
        if first is not row:
            row[f"{first['profile']} / this"] = first["us"] / row["us"]
    return {"spec": spec, "copies": copies, "rounds": args.rounds, "rows": rows}


def print_report(result: dict, dram: bool) -> None:
    mode = f"from DRAM ({result['copies']} rotated copies)" if dram else "warm (one copy)"
    print(f"\n{result['spec']}: {mode}, medians of {result['rounds']} rounds [quartiles]")
    for r in result["rows"]:
        if dram:
            extra = f", {r['share of sweep']:.2f} of the sweep ({r['sweep_us']:.1f} us)"
        else:
            extra = f", {r['share of peak']:.2f} of the FMA peak ({r['peak GFLOP/s']:.0f} GFLOP/s)"
        ab = next((f", {k} {v:.3f}" for k, v in r.items() if k.endswith(" / this")), "")
        up = f"speed-up {r['speed-up']:.2f} (model {r['model speed-up']:.2f})" if "speed-up" in r else ""
        print(
            f"  t{r['threads']:<3} {r['profile']:<10} {r['pool']:<7} {r['us']:10.2f} us [{r['q1']:.2f}, {r['q3']:.2f}]"
            f"  {r['GB/s']:7.1f} GB/s {r['GFLOP/s']:8.1f} GFLOP/s  {up}{extra}{ab}  | {r['program']}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--threads", default="1,2,4,8,16", help="thread counts, comma-separated (default 1,2,4,8,16)")
    ap.add_argument("--profiles", default="host", help="cost profiles, comma-separated (default: host)")
    ap.add_argument("--isa", default="native")
    ap.add_argument("--dram", action="store_true", help="rotate operand copies so that each call reads DRAM")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="parallel syntheses (default: the CPUs)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    try:
        threads = sorted({int(t) for t in args.threads.split(",")})
    except ValueError:
        return print(f"scaling: --threads '{args.threads}' is not a comma-separated list of integers") or 2
    if 1 not in threads or min(threads) < 1:
        return print("scaling: --threads must include 1 (the speed-ups are over it) and be positive") or 2
    profiles = args.profiles.split(",")
    per_spec = [[Variant(s, t, p, args.isa) for p in profiles for t in threads] for s in args.specs]
    names = [f"k{i}" for vs in per_spec for i in range(len(vs))]  # k0, k1, ... in each spec's binary
    with ProcessPoolExecutor(max(1, args.jobs)) as ex:
        programs = list(ex.map(synthesize, [v for vs in per_spec for v in vs], names))
    results = []
    for spec in args.specs:
        with tempfile.TemporaryDirectory(prefix="scaling") as work:
            results.append(measure(spec, [p for p in programs if p.variant.spec == spec], args, Path(work)))
        print_report(results[-1], args.dram)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
