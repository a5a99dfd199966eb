// Issue 20, W3: the generated small matmul against libxsmm's JIT kernel, interleaved in one process. The bench
// (bench/run.sh) times each implementation in a window of its own, one after the other; on a shared VM whose clock
// drifts by 10-20% between windows that decides a 1-2% race (W3 n32 on a Zen 3: 0.85x libxsmm in the bench).
// Here the two alternate in rounds of 5000 calls each, on the same 2 MiB-aligned A, B and C (in L1 after the first
// call), and the median of the per-round ratios is reported; both results are checked against a double-precision
// loop first.
// Zen 3 (AMD EPYC, family 25 model 1, AVX2; libxsmm 1.17 "hsw"), 2026-11-28, `serial` programs, libxsmm / ours
// (> 1: ours faster): N = 32, five runs of 41 rounds: 1.005, 1.011, 1.012, 1.016, 1.020 (ours 731-749 ns, libxsmm
// 749-771; the bench's run 20 minutes earlier: 0.89 us against 0.756, 0.85x). N = 64, four runs: 0.885, 0.901, 1.010,
// 0.970 (ours 5.9-7.4 us from run to run, libxsmm 6.0-6.7: not settled here). N = 8: 1.26; 16: 1.15; 128: 1.09.
// Emerald Rapids VM (Intel, family 6 model 207, AVX-512; libxsmm 1.17 "cpx"), 2026-11-30, N = 32, --isa native
// (avx512), 21 rounds: golden-cove profile 0.997 / 0.998 / 0.997 / 0.976 / 0.967 (ours 782-796 ns in one state of the
// VM, 398-442 in another: 1024 cycles of FMAs are ~380 ns at 2.7 GHz, both near the ports' limit), built-in table
// 1.043 / 0.976, a calibrated profile 0.970 / 0.974. With --isa avx2 (ymm) 0.52 against libxsmm's zmm kernel.
// Build and run (from the repository root; W3_N must match the spec):
//   .venv/bin/morello-build synth "matmul 32x32x32 serial" --isa avx2 --db none -o /tmp/w3_gen.hpp
//   g++ -O2 -std=c++17 -DW3_N=32 -include /tmp/w3_gen.hpp bench/experiments/w3_libxsmm_ab.cpp -lxsmm -lblas
//       -lpthread -ldl -o /tmp/w3_ab && /tmp/w3_ab                            (one command line each)
#include <libxsmm.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ab_timing.hpp"

#ifndef W3_N
#define W3_N 32
#endif
constexpr int N = W3_N;

// Largest |got - want| over Σ|a·b| of each output (the bench's tolerance is 2e-4 of it).
static double worst_error(const float* a, const float* b, const float* c) {
  double worst = 0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      double want = 0, mag = 0;
      for (int p = 0; p < N; p++) want += double(a[i * N + p]) * b[p * N + j], mag += std::fabs(double(a[i * N + p]) * b[p * N + j]);
      worst = std::max(worst, std::fabs(c[i * N + j] - want) / (mag + 1e-30));
    }
  return worst;
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 41;
  libxsmm_init();
  char* mem = static_cast<char*>(std::aligned_alloc(2 << 20, 6 << 20));
  float* a = reinterpret_cast<float*>(mem);
  float* b = reinterpret_cast<float*>(mem + (2 << 20));
  float* c = reinterpret_cast<float*>(mem + (4 << 20));
  for (int i = 0; i < N * N; i++) a[i] = float((i * 7) % 13) * 0.25f - 1.5f, b[i] = float((i * 5) % 11) * 0.5f - 2.5f;
  // libxsmm is column-major: C^T = B^T A^T, as bench/src/bench.cpp calls it.
  const libxsmm_blasint n = N, ld = N;
  const float alpha = 1.f, beta = 0.f;
  const libxsmm_smmfunction xsmm = libxsmm_smmdispatch(n, n, n, &ld, &ld, &ld, &alpha, &beta, nullptr, nullptr);
  if (!xsmm) return std::printf("libxsmm: no JIT kernel for %d^3\n", N), 1;
  morello::kernel(a, b, c);
  const double ours_error = worst_error(a, b, c);
  xsmm(b, a, c);
  const double xsmm_error = worst_error(a, b, c);
  std::printf("N = %d, libxsmm %s %s; errors (of sum |a*b|): ours %.1e, libxsmm %.1e\n", N, LIBXSMM_VERSION,
              libxsmm_get_target_arch(), ours_error, xsmm_error);
  if (ours_error > 2e-4 || xsmm_error > 2e-4) return std::printf("WRONG RESULT\n"), 1;
  std::vector<double> ours, theirs, ratio;
  for (int r = 0; r < rounds; r++) {
    ours.push_back(seconds_per_call([&] { morello::kernel(a, b, c); }, 5000) * 1e9);
    theirs.push_back(seconds_per_call([&] { xsmm(b, a, c); }, 5000) * 1e9);
    ratio.push_back(theirs.back() / ours.back());
  }
  std::printf("medians of %d rounds: ours %.1f ns, libxsmm %.1f ns, libxsmm / ours %.3f (> 1: ours faster)\n", rounds,
              median(ours), median(theirs), median(ratio));
  libxsmm_finalize();
  return 0;
}
