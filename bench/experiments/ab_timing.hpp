// Timing of the interleaved A/B experiments (gemm_ab.cpp, w3_libxsmm_ab.cpp): included by path from their directory,
// so their one-line build commands need no -I for it.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

// Seconds per call over `calls` back-to-back calls of f; the barrier after each keeps the compiler from merging
// one call's stores into the next's.
template <class F>
static double seconds_per_call(F f, int calls) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; i++) {
    f();
    asm volatile("" ::: "memory");
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
