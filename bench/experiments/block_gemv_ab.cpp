// Issue 21: two generated GEMV kernels (Mx2048x16384) and a read sweep of the same bytes, timed in interleaved rounds
// in one process, so that a change to the kernel is judged against the old one and against the memory under the same
// load (the VM's speed drifts by a third within hours). Weights: ggml's Q4_0 blocks, or Q8_0's with
// -DBLOCK_BYTES=34; with -DCHANNEL=8 or 4, i8 or i4 values with an f32 scale per column in an array of their own,
// with -DGROUPED=G i8 values with an f16 scale per group of G;
// with -DPLAIN=4, 2 or 1, f32, f16 / bf16 or one-byte values (e4m3, sfp). -DMROWS=M rows of A (default 1); any
// activations (f32; -DABF16: bf16, the kernels' A a uint16_t array). -DKDIM=K -DNDIM=N another shape (default 2048 x
// 16384; K a multiple of 32).
// COPIES weight copies are rotated call by call (20: from DRAM; 1: 18 MiB of Q4_0, from L3), each round times the
// three in a random order, a round's figure is the median of 3 calls, the report the median (and quartiles) over
// rounds. The two kernels' outputs must agree: bit for bit (a change of instructions), or, where the programs sum in
// another order (other tiles), within 1e-4 of the outputs' mean size; else it stops.
// Emerald Rapids VM (family 6 model 207), one thread, 2026-11-30: per-group scale conversion (qa) against the
// gathered scales of 2273e52 (qb): from DRAM 2446 / 2605 / 3075 against 2293 / 2588 / 2868 us (sweep 1430 / 1569 /
// 1716); from L3 2148 against 1681 (sweep 735). -DCHANNEL=8, 17c5ea3's one column a kernel, each prefetched 512 bytes
// ahead (qa), against 00a6863's stream (qb, 4 columns): 4210 against 3038 us (sweep 2974).
// Build and run (from the repository root; OLD and NEW: two checkouts, each with its .venv):
//   OLD/.venv/bin/morello-build synth "matmul 1x2048x16384 b=q4_0:col" --threads 1 --name qa -o /tmp/qa.hpp
//   NEW/.venv/bin/morello-build synth "matmul 1x2048x16384 b=q4_0:col" --threads 1 --name qb -o /tmp/qb.hpp
//   gcc -O2 -c bench/quant/sweep.c -o /tmp/sweep.o
//   g++ -O2 -std=c++17 -march=native -I/tmp bench/experiments/block_gemv_ab.cpp /tmp/sweep.o -lpthread -o /tmp/block_ab
//   taskset -c 1 /tmp/block_ab 20 41; taskset -c 1 /tmp/block_ab 1 31        (COPIES ROUNDS)
// Two threads: headers synthesized with --threads 2, -DTHREADS=2 (the sweep's), run on two cores (taskset -c 0,1).
// -DLOOSE: the kernels compute different things (f32 against aquant=i8 activations), outputs not compared.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <sys/mman.h>

#include "qa.hpp"
#include "qb.hpp"

#ifndef MROWS
#define MROWS 1
#endif
#ifndef KDIM
#define KDIM 2048
#endif
#ifndef NDIM
#define NDIM 16384
#endif
constexpr int K = KDIM, N = NDIM, M = MROWS;
#if defined(CHANNEL) || defined(GROUPED)  // CHANNEL-bit weights (8: i8, 4: i4), scales in an array of their own:
#ifdef GROUPED                            // i8 in groups of GROUPED along K, an f16 scale each, or
#define CHANNEL 8
constexpr size_t SCALES = size_t(N) * K / GROUPED;
using Scale = uint16_t;
#else  // an f32 scale per column
constexpr size_t SCALES = N;
using Scale = float;
#endif
constexpr size_t BYTES = size_t(N) * K * CHANNEL / 8;
#define BLOCK_BYTES 2  // every other byte a "d" of moderate size: random bytes all the same
#define ARGS , s.data()
#if CHANNEL == 8
#define WPTR(p) reinterpret_cast<const int8_t*>(p)
#else
#define WPTR(p) (p)
#endif
#elif defined(PLAIN)  // PLAIN bytes a value, no scales: f32 (4), f16 / bf16 (2; halves of moderate size), e4m3 / sfp (1)
constexpr size_t BYTES = size_t(N) * K * PLAIN;
#define BLOCK_BYTES (PLAIN == 4 ? 4 : 2)
#define ARGS
#if PLAIN == 4
#define WPTR(p) reinterpret_cast<const float*>(p)
#elif PLAIN == 2
#define WPTR(p) reinterpret_cast<const uint16_t*>(p)
#else
#define WPTR(p) (p)
#endif
#else
#ifndef BLOCK_BYTES
#define BLOCK_BYTES 18  // Q4_0: fp16 d, 16 bytes of nibbles; Q8_0: 34 (d, 32 int8)
#endif
constexpr size_t BYTES = size_t(N) * (K / 32) * BLOCK_BYTES;
#define ARGS
#define WPTR(p) (p)
#endif
#ifndef THREADS
#define THREADS 1  // the sweep's threads; the kernels' come from their headers (synthesized for 1 or 2 threads)
#endif
volatile long long sink;
// The bench's read sweep (bench/quant/sweep.c, compiled apart: one contiguous slice per thread).
extern "C" uint64_t morello_sweep(const char* p, size_t bytes, int threads, int mode);
static long long sweep(const uint8_t* p, size_t bytes) {
  return static_cast<long long>(morello_sweep(reinterpret_cast<const char*>(p), bytes, THREADS, 0));
}

int main(int argc, char** argv) {
  const int copies = argc > 1 ? atoi(argv[1]) : 20, rounds = argc > 2 ? atoi(argv[2]) : 41;
  if (copies < 1 || rounds < 1) {
    std::fprintf(stderr, "usage: block_ab COPIES ROUNDS (both at least 1)\n");
    return 2;
  }
  std::mt19937 rng(7);
  std::vector<float> a(M * K), c[2] = {std::vector<float>(M * N), std::vector<float>(M * N)};
  for (auto& x : a) x = std::uniform_real_distribution<float>(-1, 1)(rng);
#ifdef ABF16  // bf16 activations: a's values truncated to their top 16 bits
  std::vector<uint16_t> a16(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &a[i], 4);
    a16[i] = uint16_t(u >> 16);
  }
#define APTR a16.data()
#else
#define APTR a.data()
#endif
  // Weight copies 2 MiB-aligned and advised as transparent huge pages, as numpy does for the bench's arrays (of 4 MiB
  // and more), unless HUGE=0 in the environment: on 4 KiB pages the prefetchers stop at every page.
  struct Copy {
    uint8_t* p;
    uint8_t* data() { return p; }
    uint8_t& operator[](size_t i) { return p[i]; }
  };
  const size_t huge = size_t(2) << 20, alloc = (BYTES + huge - 1) / huge * huge;
  const bool advise = !getenv("HUGE") || atoi(getenv("HUGE"));
  std::vector<Copy> w(copies);
  for (auto& copy : w) {
    copy.p = static_cast<uint8_t*>(std::aligned_alloc(huge, alloc));
    if (!copy.p) {
      std::fprintf(stderr, "block_ab: out of memory for %d weight copies of %zu bytes\n", copies, BYTES);
      return 2;
    }
    if (advise) madvise(copy.p, alloc, MADV_HUGEPAGE);
  }
  for (auto& copy : w)
    for (size_t i = 0; i < BYTES; i += BLOCK_BYTES) {
#if defined(PLAIN) && PLAIN == 4  // f32 values in [-1, 1)
      const float v = std::uniform_real_distribution<float>(-1, 1)(rng);
      std::memcpy(&copy[i], &v, 4);
#else
      const uint16_t d = uint16_t(0x2C00 + rng() % 0x1000);  // positive halves of moderate size
      std::memcpy(&copy[i], &d, 2);
      for (int j = 2; j < BLOCK_BYTES; ++j) copy[i + j] = uint8_t(rng());
#if defined(PLAIN) && PLAIN == 1
      copy[i] &= 0x77;  // no e4m3 NaN (S.1111.111)
#endif
#endif
    }
#if defined(CHANNEL)
  std::vector<Scale> s(SCALES);  // moderate positive scales: f32, or halves 2^-7 to 2^-5
  for (auto& x : s) x = sizeof(Scale) == 4 ? Scale(std::uniform_real_distribution<float>(0.001f, 0.01f)(rng))
                                           : Scale(0x2000 + rng() % 0x800);
#endif
  morello::qa(APTR, WPTR(w[0].data()), c[0].data() ARGS);
  morello::qb(APTR, WPTR(w[0].data()), c[1].data() ARGS);
#ifndef LOOSE
  if (std::memcmp(c[0].data(), c[1].data(), sizeof(float) * M * N)) {
    double worst = 0, mean = 0;  // a different order of sums: differences against the outputs' mean size
    for (int j = 0; j < M * N; ++j) mean += std::fabs(c[0][j]) / N / M;
    for (int j = 0; j < M * N; ++j) worst = std::max(worst, double(std::fabs(c[0][j] - c[1][j])) / mean);
    std::printf("the two kernels' outputs differ: at most %.2g of their mean size\n", worst);
    if (worst > 1e-4) return 1;
  }
#endif
  std::vector<double> t[3];
  int order[3] = {0, 1, 2}, cp = 0;
  for (int r = 0; r < rounds; ++r) {
    std::shuffle(order, order + 3, rng);
    for (int o : order) {
      const auto call = [&](int copy) {
        if (o == 0) morello::qa(APTR, WPTR(w[copy].data()), c[0].data() ARGS);
        else if (o == 1) morello::qb(APTR, WPTR(w[copy].data()), c[1].data() ARGS);
        else sink = sweep(w[copy].data(), BYTES);
      };
      if (THREADS > 1) {  // the previous one's threads stop spinning (on 2 cores a spinner takes one), this one's wake
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
        call(cp);
      }
      double ts[3];
      for (double& x : ts) {
        cp = (cp + 1) % copies;
        const auto t0 = std::chrono::steady_clock::now();
        call(cp);
        x = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      }
      std::sort(ts, ts + 3);
      t[o].push_back(ts[1]);
    }
  }
  const char* names[3] = {"qa   ", "qb   ", "sweep"};
  for (int o = 0; o < 3; ++o) {
    std::sort(t[o].begin(), t[o].end());
    const size_t n = t[o].size();
    std::printf("%s median %.0f us (p25 %.0f, p75 %.0f)\n", names[o], t[o][n / 2], t[o][n / 4], t[o][3 * n / 4]);
  }
}
