"""Time one spec's programs with each candidate microkernel forced, in one process, interleaved rounds.

usage: python scripts/kernel_ab.py SPEC --isa ISA [--profile P] [--kernels dot_int,dot_int4,...] [--copies 4]
       [--rounds 15] [--calls 5]

Each variant is the search's best program with the catalog restricted to one of ``--kernels`` (the others
of that list removed; every other kernel kept) and, as ``auto``, the full catalog's choice. The programs
are synthesized for one thread (serial), emitted as headers, compiled into one binary and timed: each
round runs every variant ``calls`` times in a fresh random order on ``copies`` rotated operand sets
(random data: f32 and bf16 values in (-1, 1), valid scale halves and zero points), one figure per variant and round
(the median of its calls' thread CPU times); the result is the median over rounds, with the quartiles.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from morello_build.check.testing import cxx
from morello_build.codegen import emit_header
from morello_build.ir.impl import Kernel
from morello_build.synth.actions import policy
from morello_build.target import kernels as catalog
from morello_build.tools.api import synthesize_program

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
using Fn = void (*)(void* const*);
static const Fn kFns[] = {{{fns}}};
static const int kN = sizeof(kFns) / sizeof(kFns[0]);
struct Param {{ int dtype; std::size_t elems; int role; std::size_t block_bytes; int block_header; int zeros; }};
static const Param kParams[] = {{{params}}};
static const int kP = sizeof(kParams) / sizeof(kParams[0]);
static std::size_t bytes_of(const Param& p) {{
  return p.elems * (p.dtype == 0 ? 4 : p.dtype == 1 || p.dtype == 4 ? 2 : 1);
}}
static double now() {{
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}}
static std::uint16_t half(std::mt19937& g) {{ return std::uint16_t(0x2C00 + g() % 0x1000); }}  // [2^-4, 1)

int main(int argc, char** argv) {{
  const int copies = std::atoi(argv[1]), rounds = std::atoi(argv[2]), calls = std::atoi(argv[3]);
  std::mt19937 g(1234);
  std::vector<std::vector<std::vector<std::uint8_t>>> bufs(copies);
  std::vector<std::vector<void*>> args(copies);
  for (int c = 0; c < copies; ++c) {{
    for (int i = 0; i < kP; ++i) {{
      const Param& p = kParams[i];
      std::vector<std::uint8_t> v(bytes_of(p));
      if (p.dtype == 0) {{
        std::uniform_real_distribution<float> d(-1.f, 1.f);
        for (std::size_t e = 0; e < p.elems; ++e) {{
          float f = p.role == 1 ? 0.f : d(g);
          std::memcpy(&v[4 * e], &f, 4);
        }}
      }} else if (p.dtype == 1) {{  // bf16: the high half of an f32 in (-1, 1). Random bits would hold NaNs and
        // subnormals, which Intel cores multiply by microcode assists (1x2048x128 on a Xeon: 5x the time)
        std::uniform_real_distribution<float> d(-1.f, 1.f);
        for (std::size_t e = 0; e < p.elems; ++e) {{
          float f = d(g);
          std::uint32_t u;
          std::memcpy(&u, &f, 4);
          std::uint16_t h = std::uint16_t(u >> 16);
          std::memcpy(&v[2 * e], &h, 2);
        }}
      }} else if (p.dtype == 4) {{  // f16 scales or weights
        for (std::size_t e = 0; e < p.elems; ++e) {{ std::uint16_t h = half(g); std::memcpy(&v[2 * e], &h, 2); }}
      }} else {{
        for (auto& x : v) x = std::uint8_t(g() & (p.zeros ? 15 : 255));
        if (p.block_header == 1)
          for (std::size_t o = 0; o + 2 <= v.size(); o += p.block_bytes) {{
            std::uint16_t h = half(g);
            std::memcpy(&v[o], &h, 2);
          }}
      }}
      bufs[c].push_back(std::move(v));
    }}
    for (auto& v : bufs[c]) args[c].push_back(v.data());
  }}
  int next = 0;
  for (int k = 0; k < kN; ++k) for (int r = 0; r < 2 * copies; ++r) kFns[k](args[(next++) % copies].data());
  std::vector<int> order(kN);
  for (int k = 0; k < kN; ++k) order[k] = k;
  for (int r = 0; r < rounds; ++r) {{
    std::shuffle(order.begin(), order.end(), g);
    for (int k : order) {{
      std::vector<double> ts;
      for (int i = 0; i < calls; ++i) {{
        double t0 = now();
        kFns[k](args[(next++) % copies].data());
        ts.push_back(now() - t0);
      }}
      std::sort(ts.begin(), ts.end());
      std::printf("%d %.3f\n", k, 1e6 * ts[ts.size() / 2]);
    }}
  }}
  return 0;
}}
"""
PARAM = re.compile(r'\{"(\w+)", (\d), (\d+)u, (\d), (\d+)u, (\d)\}')  # a header's NAME_param rows


def param_rows(params) -> str:
    """The harness's kParams initializer from a header's PARAM rows (the last field: a zero-point array)."""
    return ", ".join(f"{{{d}, {e}, {r}, {bb}, {bh}, {int(n.endswith('zeros'))}}}" for n, d, e, r, bb, bh in params)


def program(spec: str, isa: str, profile: str, keep: str | None, rivals: tuple[str, ...] = ()):
    """(target, user, impl) with the catalog's ``rivals`` other than ``keep`` removed (None: the full catalog)."""
    saved = catalog.CATALOG
    if keep is not None:
        catalog.CATALOG = tuple(k for k in saved if k.name == keep or k.name not in rivals)
    _clear()
    try:
        user, target, impl, _ = synthesize_program(spec, isa=isa, threads=1, db=None, profile=profile)
    finally:
        catalog.CATALOG = saved
        _clear()
    return target, user, impl


def _clear() -> None:
    """Forget the kernel actions the policy cached per target and per op (the catalog's)."""
    policy._selects.cache_clear()
    policy._offered.cache_clear()


def kernels_of(impl) -> str:
    """The microkernels of the program's matmul leaves with their tile (rows x columns)."""
    out = set()

    def walk(n):
        if isinstance(n, Kernel) and n.spec.op.kind == "matmul":
            _, m, _, cols = n.spec.op.iter_shape
            out.add(f"{n.name} {m}x{cols}")
        for c in n.children:
            walk(c)

    walk(impl)
    return ", ".join(sorted(out))


def time_headers(work: Path, headers: list[str], copies: int, rounds: int, calls: int, wall: bool = False):
    """Compile the generated headers (kernel ``k<i>`` in namespace ``ab<i>``, the same parameters) into one binary of
    _HARNESS in ``work`` and run it: {variant: its figure of each round} (µs; the thread's CPU time, or wall time
    where ``wall``: a header's own pool running threads beside the caller)."""
    for i, text in enumerate(headers):
        (work / f"k{i}.hpp").write_text(text)
        (work / f"k{i}.cpp").write_text(
            f'#include "k{i}.hpp"\nvoid run{i}(void* const* a) {{ ab{i}::k{i}_call(a); }}\n'
        )
    decls = "\n".join(f"void run{i}(void* const*);" for i in range(len(headers)))
    fns = ", ".join(f"run{i}" for i in range(len(headers)))
    harness = _HARNESS.replace("CLOCK_THREAD_CPUTIME_ID", "CLOCK_MONOTONIC") if wall else _HARNESS
    (work / "main.cpp").write_text(harness.format(decls=decls, fns=fns, params=param_rows(PARAM.findall(headers[0]))))
    base = [*cxx().split(), "-std=c++17", "-O2", "-pthread", f"-I{work}"]
    srcs = [*(work / f"k{i}.cpp" for i in range(len(headers))), work / "main.cpp"]
    for src in srcs:
        subprocess.run([*base, "-c", str(src), "-o", str(src.with_suffix(".o"))], check=True)
    subprocess.run([*base, *(str(s.with_suffix(".o")) for s in srcs), "-o", str(work / "bench")], check=True)
    run = [str(work / "bench"), str(copies), str(rounds), str(calls)]
    out = subprocess.run(run, check=True, capture_output=True, text=True).stdout
    times: dict[int, list[float]] = {i: [] for i in range(len(headers))}
    for line in out.split("\n"):
        if line.strip():
            k, t = line.split()
            times[int(k)].append(float(t))
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("--isa", required=True)
    ap.add_argument("--profile", default="builtin")
    ap.add_argument("--kernels", default="dot_int,dot_int4")
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=5)
    args = ap.parse_args()
    variants = []
    rivals = tuple(args.kernels.split(","))
    for keep in [None, *rivals]:
        target, user, impl = program(args.spec, args.isa, args.profile, keep, rivals)
        name = keep or "auto"
        label = f"{name}: {kernels_of(impl)} (cost {impl.cost:,.0f})"
        if keep is not None and keep not in (k.split()[0] for k in kernels_of(impl).split(", ")):
            print(f"{name}: not applicable ({kernels_of(impl)})")
            continue
        variants.append((label, target, user, impl))
    work = Path(tempfile.mkdtemp(prefix="kernel_ab"))
    headers = [
        emit_header(user, impl, target, name=f"k{i}", namespace=f"ab{i}")
        for i, (_, target, user, impl) in enumerate(variants)
    ]
    times = time_headers(work, headers, args.copies, args.rounds, args.calls)
    print(f"{args.spec} --isa {args.isa} --profile {args.profile}: one thread, {args.copies} rotated copies")
    for i, (label, *_rest) in enumerate(variants):
        ts = sorted(times[i])
        q = len(ts) // 4
        print(f"  {ts[len(ts) // 2]:9.1f} us  [{ts[q]:.1f}, {ts[-1 - q]:.1f}]  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
