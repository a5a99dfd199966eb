// Issue 20: two generated GEMM headers of one square f32 spec (row-major A, B, C), interleaved in one process: rounds
// of 20 calls each, the median of the per-round ratios; the outputs compared first (they must agree within 1e-4,
// relative, where the two programs sum in another order). For comparing two profiles' programs of a W2 spec.
// Emerald Rapids VM (Intel, family 6 model 207), 2026-11-30, `matmul 512x512x512 serial`, built-in table (qa) against
// a calibrated profile (qb): 3279 against 3265 us (qa/qb 1.007), 1808 against 1781 (1.014), 2923 against 2910 (0.998):
// the VM's speed changed by 1.8x between the runs, the ratio did not.
// Build and run (from the repository root; N must match the spec):
//   .venv/bin/morello-build synth "matmul 512x512x512 serial" --profile builtin --name qa -o /tmp/qa.hpp
//   .venv/bin/morello-build synth "matmul 512x512x512 serial" --profile cal.json --name qb -o /tmp/qb.hpp
//   g++ -O2 -std=c++17 -DN_DIM=512 -I/tmp bench/experiments/gemm_ab.cpp -lpthread -o /tmp/gemm_ab && taskset -c 1 /tmp/gemm_ab 31
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ab_timing.hpp"
#include "qa.hpp"
#include "qb.hpp"

#ifndef N_DIM
#define N_DIM 512
#endif
constexpr int N = N_DIM;

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 31;
  if (rounds < 1) return std::fprintf(stderr, "usage: gemm_ab ROUNDS (at least 1)\n"), 2;
  std::vector<float> a(N * N), b(N * N), c0(N * N), c1(N * N);
  for (int i = 0; i < N * N; ++i) a[i] = float((i * 7) % 13) * 0.25f - 1.5f, b[i] = float((i * 5) % 11) * 0.5f - 2.5f;
  morello::qa(a.data(), b.data(), c0.data());
  morello::qb(a.data(), b.data(), c1.data());
  double worst = 0;
  for (int i = 0; i < N * N; ++i) worst = std::max(worst, std::fabs(double(c0[i]) - c1[i]) / (std::fabs(double(c0[i])) + 1));
  if (worst > 1e-4) return std::printf("the two kernels' outputs differ: %.2g (relative)\n", worst), 1;
  std::vector<double> ta, tb, ratio;
  for (int r = 0; r < rounds; ++r) {
    ta.push_back(seconds_per_call([&] { morello::qa(a.data(), b.data(), c0.data()); }, 20) * 1e6);
    tb.push_back(seconds_per_call([&] { morello::qb(a.data(), b.data(), c1.data()); }, 20) * 1e6);
    ratio.push_back(ta.back() / tb.back());
  }
  std::printf("medians of %d rounds: qa %.0f us, qb %.0f us, qa / qb %.3f (> 1: qb faster)\n", rounds, median(ta),
              median(tb), median(ratio));
}
