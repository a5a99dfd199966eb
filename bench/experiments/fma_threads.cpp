// Do a machine's CPUs each bring a core's FMA throughput? (bench/SCALING.md: GEMMs ran 5.7-8.6x faster on 16 vCPUs
// than on one.) Threads pinned to given CPUs each run 12 independent chains of 512-bit FMAs (256-bit without
// AVX-512) for a fixed number of steps, started together by a spin barrier; each times itself. Printed: the FMA rate
// of one CPU alone, of CPU 0 beside each other CPU j (a pair that halves both shares a core: SMT siblings the guest
// does not show), and of every CPU at once (a fall there but not in pairs: the clock drops with many cores busy).
// Build and run: g++ -O2 -std=c++17 bench/experiments/fma_threads.cpp -lpthread -o /tmp/fma_threads && /tmp/fma_threads
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

constexpr long kSteps = 40'000'000;  // ~0.1-0.2 s a run at 2 FMAs a cycle

#define CHAINS(V, SET, FMA, ADD)                                                                            \
  V a0 = SET(0.f), a1 = SET(1e-3f), a2 = SET(2e-3f), a3 = SET(3e-3f), a4 = SET(4e-3f), a5 = SET(5e-3f);    \
  V a6 = SET(6e-3f), a7 = SET(7e-3f), a8 = SET(8e-3f), a9 = SET(9e-3f), a10 = SET(1e-2f), a11 = SET(.011f); \
  const V m = SET(0.999f), c = SET(1e-4f);                                                                  \
  for (long k = 0; k < steps; ++k) {                                                                        \
    a0 = FMA(a0, m, c), a1 = FMA(a1, m, c), a2 = FMA(a2, m, c), a3 = FMA(a3, m, c);                        \
    a4 = FMA(a4, m, c), a5 = FMA(a5, m, c), a6 = FMA(a6, m, c), a7 = FMA(a7, m, c);                        \
    a8 = FMA(a8, m, c), a9 = FMA(a9, m, c), a10 = FMA(a10, m, c), a11 = FMA(a11, m, c);                    \
  }                                                                                                         \
  V s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));                                  \
  s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)))

__attribute__((target("avx512f"))) static float chains512(long steps) {
  CHAINS(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps);
  return _mm512_reduce_add_ps(s);
}
__attribute__((target("avx2,fma"))) static float chains256(long steps) {
  CHAINS(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps);
  return _mm256_cvtss_f32(s);
}

static const bool kWide = __builtin_cpu_supports("avx512f");

// GFLOP/s of each thread, one pinned to each of `cpus`, all started together.
static std::vector<double> rates(const std::vector<int>& cpus) {
  std::atomic<int> ready{0};
  std::vector<double> out(cpus.size());
  std::vector<std::thread> ts;
  for (size_t i = 0; i < cpus.size(); ++i)
    ts.emplace_back([&, i] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpus[i], &set);
      pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
      ready.fetch_add(1);
      while (ready.load() < int(cpus.size())) _mm_pause();
      const auto t0 = std::chrono::steady_clock::now();
      volatile float sink = kWide ? chains512(kSteps) : chains256(kSteps);
      (void)sink;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      out[i] = 2.0 * (kWide ? 16 : 8) * 12 * kSteps / s / 1e9;
    });
  for (auto& t : ts) t.join();
  return out;
}

static double best_of(int runs, const std::vector<int>& cpus, std::vector<double>* each = nullptr) {
  double best = 0;
  for (int r = 0; r < runs; ++r) {
    auto v = rates(cpus);
    const double low = *std::min_element(v.begin(), v.end());
    if (low > best) best = low, each ? (void)(*each = v) : (void)0;
  }
  return best;
}

int main() {
  const int n = int(sysconf(_SC_NPROCESSORS_ONLN));
  const double alone = best_of(3, {0});
  std::printf("%d CPUs, %s FMAs; CPU 0 alone: %.1f GFLOP/s\n", n, kWide ? "512-bit" : "256-bit", alone);
  for (int j = 1; j < n; ++j) {
    std::vector<double> v;
    best_of(2, {0, j}, &v);
    std::printf("CPU 0 beside CPU %2d: %.2f and %.2f of alone\n", j, v[0] / alone, v[1] / alone);
  }
  for (int k : {n / 4, n / 2, n}) {
    if (k < 2) continue;
    std::vector<int> cpus(k);
    for (int i = 0; i < k; ++i) cpus[i] = i;
    std::vector<double> v;
    best_of(2, cpus, &v);
    std::sort(v.begin(), v.end());
    std::printf("CPUs 0-%d at once: slowest %.2f, median %.2f, fastest %.2f of alone\n", k - 1, v[0] / alone,
                v[v.size() / 2] / alone, v.back() / alone);
  }
}
