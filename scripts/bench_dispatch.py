"""What runtime ISA dispatch costs per call: the dispatch header against the native one, same run.

    python scripts/bench_dispatch.py [--rounds 41] [--db PATH] [SPEC ...]

For each spec (default: the flagship GEMV and 32^3) it synthesizes the native header and the dispatch header,
compiles one program holding both (-O2, no -m flags), checks that both give bit-identical results (on this
CPU the dispatch header runs the native level's program), then times them interleaved: in each round, both
headers (their order alternating) run a batch of calls through the default overload; it prints the median
time per call of each and their ratio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from morello_build.ir.grammar import parse_spec
from morello_build.target import native_isa
from morello_build.tools import api

SPECS = ("matmul 1x2048x16384 a=f32 b=bf16:col c=f32", "matmul 32x32x32")

_MAIN = r"""
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
%(includes)s

template <class T> void fill(std::vector<T>& v, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (auto& x : v) {
    const float f = d(rng);
    if constexpr (sizeof(T) == 2) { uint32_t u; std::memcpy(&u, &f, 4); x = uint16_t(u >> 16); } else { x = f; }
  }
}

template <class Info, class Native, class Dispatch>
int bench(const char* label, const char* variant, Native native, Dispatch dispatch, int rounds) {
  std::mt19937 rng(1);
  std::vector<typename Info::a_type> a(std::size_t(Info::batch) * Info::m * Info::k);
  std::vector<typename Info::b_type> b(std::size_t(Info::batch) * Info::k * Info::n);
  std::vector<typename Info::c_type> c1(std::size_t(Info::batch) * Info::m * Info::n), c2(c1.size());
  fill(a, rng); fill(b, rng); fill(c1, rng); c2 = c1;
  native(a.data(), b.data(), c1.data());
  dispatch(a.data(), b.data(), c2.data());
  if (std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(c1[0])) != 0) {
    std::printf("%%s: the dispatch header's result differs from the native one\n", label);
    return 1;
  }
  using clock = std::chrono::steady_clock;
  auto time_one = [&](auto fn, int calls) {
    const auto t0 = clock::now();
    for (int i = 0; i < calls; ++i) fn(a.data(), b.data(), c1.data());
    return std::chrono::duration<double, std::micro>(clock::now() - t0).count() / calls;
  };
  // A batch of about 20 ms.
  int calls = 1;
  while (time_one(native, calls) * calls < 20000.0 && calls < (1 << 24)) calls *= 2;
  std::vector<double> tn, td;
  for (int r = 0; r < rounds; ++r) {
    if (r %% 2) { td.push_back(time_one(dispatch, calls)); tn.push_back(time_one(native, calls)); }
    else { tn.push_back(time_one(native, calls)); td.push_back(time_one(dispatch, calls)); }
  }
  std::sort(tn.begin(), tn.end());
  std::sort(td.begin(), td.end());
  const double mn = tn[tn.size() / 2], md = td[td.size() / 2];
  std::printf("%%-46s native %%10.3f us  dispatch(%%s) %%10.3f us  ratio %%.4f  (%%d rounds x %%d calls)\n", label, mn,
              variant, md, md / mn, rounds, calls);
  return 0;
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 41;
  int failures = 0;
%(calls)s
  return failures;
}
"""

_CALL = """  failures += bench<nat::k%(i)d_info>("%(spec)s", dis::k%(i)d_variant(),
      [](auto a, auto b, auto c) { nat::k%(i)d(a, b, c); }, [](auto a, auto b, auto c) { dis::k%(i)d(a, b, c); },
      rounds);"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("specs", nargs="*", default=SPECS)
    p.add_argument("--rounds", type=int, default=41)
    p.add_argument("--db", default=os.environ.get("MORELLO_DB"), help="synthesis database (default: $MORELLO_DB)")
    p.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        includes, calls = [], []
        for i, spec in enumerate(args.specs):
            for ns, isa in (("nat", "native"), ("dis", "dispatch")):
                text = api.synthesize_header(spec, isa=isa, name=f"k{i}", namespace=ns, db=args.db)
                (work / f"{ns}{i}.hpp").write_text(text)
                includes.append(f'#include "{ns}{i}.hpp"')
            calls.append(_CALL % {"i": i, "spec": str(parse_spec(spec))})
        (work / "main.cpp").write_text(_MAIN % {"includes": "\n".join(includes), "calls": "\n".join(calls)})
        exe = work / "bench"
        cmd = [*args.cxx.split(), "-std=c++17", "-O2", f"-I{work}", str(work / "main.cpp"), "-o", str(exe), "-pthread"]
        subprocess.run(cmd, check=True)
        print(f"# native = {native_isa()}; {args.cxx}; MORELLO_NUM_THREADS={os.environ.get('MORELLO_NUM_THREADS', '')}")
        sys.stdout.flush()
        return subprocess.run([str(exe), str(args.rounds)]).returncode


if __name__ == "__main__":
    sys.exit(main())
