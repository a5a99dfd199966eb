// Issue 20, W1 with K x N weights on 1 thread: what bounds a 1x2048x16384 GEMV whose bf16 weights are K rows of
// N (b=bf16, row-major), and which loop shape reads them fastest? Hand-written AVX-512, 1 thread, weights from
// DRAM (two 64 MiB copies on huge pages, alternated), contenders interleaved in shuffled rounds, medians:
//   sweep:         one contiguous read of all the weights with the same loads and FMAs (the reference);
//   k<KB>r<R>:     the generated program's shape: KB rows of B at a time (KB streams), C in R zmm registers
//                  (16R columns), C loaded and stored per tile (C is 64 KiB: from L2);
//   c<NC>-k<KB>r<R>: the same inside column chunks of NC (C's chunk stays in L1; B read in 2·NC-byte runs).
// With -DWITH_GENERATED, also the generated program of `morello-build synth` (the command below).
// Zen 4, 2026-11-27: k8r8 / k8r4 0.80-0.87 of the sweep, k8r16 (the search's pick) 0.77-0.81, k16 0.62-0.74,
// k1-k4 0.25-0.65 (C's round trips through L2 cost as much as the weights), C kept in L1 0.31-0.65 (a run of
// 8 KiB per row restarts the prefetchers); software prefetches 0.34-0.61. No shape reached 0.9.
// Zen 4, later the same day (three runs; the sweep 26-31 GB/s): k8r16 0.70-0.78, k8r8 0.78-0.89, k8r4 0.78-0.86,
// k8r16-h4 (k8r16's C tile, each row read in 128-byte slices) 0.80-0.82, h2 (256-byte) 0.76-0.77: a row's burst
// per visit decides, not the C tile size (cost gl_burst_line; a bare read of 8 streams in such bursts shows
// no penalty, so it comes with this loop, not from the prefetchers; the mechanism is not established); the
// search now picks 128 columns. k8r*-ahead2k (the next k tile's rows prefetched into L2 during each row's last
// 2 KiB): no gain (0.74-0.83, as their rows<> in the same runs).
// Build and run (from the repository root):
//   .venv/bin/morello-build synth "matmul 1x2048x16384 a=f32 b=bf16 c=f32 serial" -o /tmp/kxn_gen.hpp --name gen
//   g++ -O3 -march=native -std=c++17 -DWITH_GENERATED -include /tmp/kxn_gen.hpp bench/experiments/kxn_tiles.cpp
//       -o /tmp/kxn_tiles                                                      (one command line)
//   /tmp/kxn_tiles [ROUNDS]
#include <immintrin.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

constexpr long K = 2048, N = 16384;

static double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static inline __m512 load_bf16(const uint16_t* p) {
  const __m512i w = _mm512_maskz_cvtepu16_epi32(__mmask16(0xFFFF), _mm256_loadu_si256((const __m256i*)p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(__mmask16(0xFFFF), w, 16));
}

// c[n0 .. n0+16R) += a[k0 .. k0+KB) x B[k0 .. k0+KB, n0 .. n0+16R), C in registers for the tile
template <int KB, int R>
static inline void tile(const float* a, const uint16_t* b, float* c, long k0, long n0) {
  __m512 acc[R];
  _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) acc[r] = k0 ? _mm512_loadu_ps(c + n0 + 16 * r) : _mm512_setzero_ps();
  _Pragma("GCC unroll 16") for (int kk = 0; kk < KB; ++kk) {
    const uint16_t* row = b + (k0 + kk) * N + n0;
    const __m512 av = _mm512_set1_ps(a[k0 + kk]);
    _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(av, load_bf16(row + 16 * r), acc[r]);
  }
  _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) _mm512_storeu_ps(c + n0 + 16 * r, acc[r]);
}
template <int KB, int R>
__attribute__((noinline)) void rows(const float* a, const uint16_t* b, float* c) {
  for (long k0 = 0; k0 < K; k0 += KB)
    for (long n0 = 0; n0 < N; n0 += 16 * R) tile<KB, R>(a, b, c, k0, n0);
}
// rows<KB, R>, and during each row's last P bytes a prefetch into L2 of the first P bytes of the row KB later (the
// next k tile's streams start warm instead of each restarting the hardware prefetchers)
template <int KB, int R, int P>
__attribute__((noinline)) void rows_ahead(const float* a, const uint16_t* b, float* c) {
  for (long k0 = 0; k0 < K; k0 += KB)
    for (long n0 = 0; n0 < N; n0 += 16 * R) {
      if (k0 + KB < K && n0 + P / 2 >= N)
        for (int kk = 0; kk < KB; ++kk)
          for (int l = 0; l < 16 * R; l += 32)
            _mm_prefetch(reinterpret_cast<const char*>(b + (k0 + KB + kk) * N + n0 + l + P / 2 - N), _MM_HINT_T1);
      tile<KB, R>(a, b, c, k0, n0);
    }
}
// rows<KB, R>'s C tile of R zmm, but each row read in H slices of R/H zmm (bursts of 32R/H bytes per row)
template <int KB, int R, int H>
__attribute__((noinline)) void sliced(const float* a, const uint16_t* b, float* c) {
  for (long k0 = 0; k0 < K; k0 += KB)
    for (long n0 = 0; n0 < N; n0 += 16 * R) {
      __m512 acc[R];
      _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r)
          acc[r] = k0 ? _mm512_loadu_ps(c + n0 + 16 * r) : _mm512_setzero_ps();
      _Pragma("GCC unroll 16") for (int h = 0; h < H; ++h) {
        _Pragma("GCC unroll 16") for (int kk = 0; kk < KB; ++kk) {
          const uint16_t* row = b + (k0 + kk) * N + n0;
          const __m512 av = _mm512_set1_ps(a[k0 + kk]);
          _Pragma("GCC unroll 16") for (int r = h * R / H; r < (h + 1) * R / H; ++r)
            acc[r] = _mm512_fmadd_ps(av, load_bf16(row + 16 * r), acc[r]);
        }
      }
      _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) _mm512_storeu_ps(c + n0 + 16 * r, acc[r]);
    }
}
template <int NC, int KB, int R>
__attribute__((noinline)) void chunks(const float* a, const uint16_t* b, float* c) {
  for (long c0 = 0; c0 < N; c0 += NC)
    for (long k0 = 0; k0 < K; k0 += KB)
      for (long n0 = c0; n0 < c0 + NC; n0 += 16 * R) tile<KB, R>(a, b, c, k0, n0);
}
__attribute__((noinline)) void sweep(const float* a, const uint16_t* b, float* c) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  const __m512 av = _mm512_set1_ps(a[0]);
  for (long i = 0; i < K * N; i += 64) {
    s0 = _mm512_fmadd_ps(av, load_bf16(b + i), s0);
    s1 = _mm512_fmadd_ps(av, load_bf16(b + i + 16), s1);
    s2 = _mm512_fmadd_ps(av, load_bf16(b + i + 32), s2);
    s3 = _mm512_fmadd_ps(av, load_bf16(b + i + 48), s3);
  }
  _mm512_storeu_ps(c, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

using Fn = void (*)(const float*, const uint16_t*, float*);
struct Contender {
  const char* name;
  Fn fn;
  std::vector<double> secs;
};

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 11;
  std::mt19937 g(1);
  std::vector<uint16_t*> weights(2);
  for (auto& p : weights) {
    p = static_cast<uint16_t*>(std::aligned_alloc(2 << 20, K * N * 2));
    madvise(p, K * N * 2, MADV_HUGEPAGE);
    for (long i = 0; i < K * N; ++i) p[i] = uint16_t(0x3f80 + (g() & 0x7f));  // bf16 in [1, 2)
  }
  std::vector<float> a(K), c(N), want(N);
  for (auto& x : a) x = float(g() % 1000) / 1000.f;
  std::vector<Contender> cs = {
      {"sweep", sweep, {}},
#ifdef WITH_GENERATED
      {"generated", [](const float* x, const uint16_t* w, float* y) { morello::gen(x, w, y); }, {}},
#endif
      {"k8r16", rows<8, 16>, {}},         {"k8r8", rows<8, 8>, {}},           {"k8r4", rows<8, 4>, {}},
      {"k16r4", rows<16, 4>, {}},         {"k4r8", rows<4, 8>, {}},           {"k1r8", rows<1, 8>, {}},
      {"c4k-k8r8", chunks<4096, 8, 8>, {}}, {"c4k-k1r8", chunks<4096, 1, 8>, {}},
      {"k8r16-ahead2k", rows_ahead<8, 16, 2048>, {}}, {"k8r8-ahead2k", rows_ahead<8, 8, 2048>, {}},
      {"k8r16-h2", sliced<8, 16, 2>, {}}, {"k8r16-h4", sliced<8, 16, 4>, {}},
  };
  rows<1, 1>(a.data(), weights[0], want.data());  // the plain order of sums, as the check's reference
  for (size_t i = 1; i < cs.size(); ++i) {
    cs[i].fn(a.data(), weights[0], c.data());
    for (long j = 0; j < N; ++j)
      if (std::fabs(c[j] - want[j]) > 1e-3f * std::fabs(want[j])) {
        std::printf("%s: c[%ld] = %g, want %g\n", cs[i].name, j, c[j], want[j]);
        return 1;
      }
  }
  std::vector<int> order(cs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  int copy = 0;
  for (int r = 0; r < rounds; ++r) {
    std::shuffle(order.begin(), order.end(), g);
    for (int i : order)
      for (int call = 0; call < 3; ++call, copy ^= 1) {
        const double t = now();
        cs[i].fn(a.data(), weights[copy], c.data());
        cs[i].secs.push_back(now() - t);
      }
  }
  double ref = 0;
  for (auto& x : cs) {
    std::sort(x.secs.begin(), x.secs.end());
    const double med = x.secs[x.secs.size() / 2];
    if (ref == 0) ref = med;
    std::printf("%-12s %7.0f us  %5.1f GB/s  %.2f of the sweep  (p25 %.0f, p75 %.0f)\n", x.name, med * 1e6,
                K * N * 2 / med / 1e9, ref / med, x.secs[x.secs.size() / 4] * 1e6, x.secs[3 * x.secs.size() / 4] * 1e6);
  }
  return 0;
}
