// Which loop shape lets the fused gate/up GEMV (1x2560x10240, bf16 weights as N rows of K) read its weights at
// the speed of a plain read sweep? Hand-written AVX2, 1 thread, contenders interleaved with rotated weight
// copies (the harness of examples/gemma_layer):
//   rows1x4: one row at a time, 4 accumulators (the shape of the generated dot_bf16_widen programs);
//   rows8:   4 gate rows and 4 up rows in one loop over k (8 streams in flight, one accumulator each).
// With -DWITH_GENERATED, also the generated gemma::gate_up of a built examples/gemma_layer (scripts/run-layer.sh).
// Build and run (from the repository root):
//   g++ -O2 -std=c++20 -I examples/gemma_layer -I build/gemma_layer/morello/include -DWITH_GENERATED
//       bench/experiments/gate_up_shapes.cpp -o /tmp/gate_up_shapes -lpthread      (one command line)
//   /tmp/gate_up_shapes [SECONDS]
#include <immintrin.h>

#include <cstdio>
#include <cstdlib>

#include "harness.hpp"
#ifdef WITH_GENERATED
#include "morello/gemma_gate_up.hpp"
#endif

namespace {

constexpr int K = 2560, N = 10240;

__attribute__((target("avx2,fma"))) inline __m256 widen_lo(__m256i w) {  // even k: bf16 in the low halves
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
__attribute__((target("avx2,fma"))) inline __m256 widen_hi(__m256i w) {  // odd k
  return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(int(0xFFFF0000u))));
}
__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}

// a: per 16 values of k, 8 even then 8 odd (as the generated kernels lay A out).
__attribute__((target("avx2,fma"))) float row_4acc(const float* a, const uint16_t* w) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int k = 0; k < K; k += 64)
    for (int j = 0; j < 4; ++j) {
      const __m256i b = _mm256_loadu_si256((const __m256i*)(w + k + 16 * j));
      acc[j] = _mm256_fmadd_ps(_mm256_load_ps(a + k + 16 * j), widen_lo(b), acc[j]);
      acc[j] = _mm256_fmadd_ps(_mm256_load_ps(a + k + 16 * j + 8), widen_hi(b), acc[j]);
    }
  return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

__attribute__((target("avx2,fma"))) void rows8(const float* a, const uint16_t* const* w, float* out) {
  __m256 acc[8];
  for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
  for (int k = 0; k < K; k += 16) {
    const __m256 ae = _mm256_load_ps(a + k), ao = _mm256_load_ps(a + k + 8);
    for (int r = 0; r < 8; ++r) {
      const __m256i b = _mm256_loadu_si256((const __m256i*)(w[r] + k));
      acc[r] = _mm256_fmadd_ps(ae, widen_lo(b), acc[r]);
      acc[r] = _mm256_fmadd_ps(ao, widen_hi(b), acc[r]);
    }
  }
  for (int r = 0; r < 8; ++r) out[r] = hsum(acc[r]);
}

}  // namespace

int main(int argc, char** argv) {
  const double min_time = argc > 1 ? std::atof(argv[1]) : 10.0;
  const size_t n = size_t(K) * N;
  const int copies = harness::copies_for(4 * n);
  std::vector<harness::Buffer<uint16_t>> g, u;
  for (int c = 0; c < copies; ++c) {
    g.emplace_back(n);
    u.emplace_back(n);
    harness::Rng r{uint64_t(c)};
    for (size_t i = 0; i < n; ++i) g[c][i] = harness::f32_to_bf16(r.uniform()), u[c][i] = harness::f32_to_bf16(r.uniform());
  }
  harness::Buffer<float> a(K), og(N), ou(N);
  for (int i = 0; i < K; ++i) a[i] = 0.01f * float(i % 7);
  harness::Pool pool(1);
  std::vector<harness::Contender> cs;
  cs.push_back({"rows1x4: one row at a time, 4 accumulators", [&](int c) {
                  for (int j = 0; j < N; ++j) og[j] = row_4acc(a.data(), g[c].data() + size_t(j) * K);
                  for (int j = 0; j < N; ++j) ou[j] = row_4acc(a.data(), u[c].data() + size_t(j) * K);
                }});
  cs.push_back({"rows8: 4 gate + 4 up rows in one k loop", [&](int c) {
                  for (int j = 0; j < N; j += 4) {
                    const uint16_t* p[8];
                    float o[8];
                    for (int r = 0; r < 4; ++r) p[r] = g[c].data() + size_t(j + r) * K, p[4 + r] = u[c].data() + size_t(j + r) * K;
                    rows8(a.data(), p, o);
                    for (int r = 0; r < 4; ++r) og[j + r] = o[r], ou[j + r] = o[4 + r];
                  }
                }});
#ifdef WITH_GENERATED
  cs.push_back({"generated gemma::gate_up (gelu * up included)", [&](int c) {
                  struct Serial {
                    void operator()(std::size_t b, std::size_t e, const std::function<void(std::size_t)>& fn) const {
                      for (std::size_t i = b; i < e; ++i) fn(i);
                    }
                  };
                  gemma::gate_up(a.data(), g[c].data(), u[c].data(), og.data(), Serial());
                }});
#endif
  cs.push_back({std::string("read sweep (") + harness::sweep_isa() + ")", [&](int c) {
                  volatile uint64_t s = harness::sweep(pool, g[c].data(), 2 * n) + harness::sweep(pool, u[c].data(), 2 * n);
                  (void)s;
                }});
  const int rounds = harness::measure(cs, copies, min_time);
  std::printf("1 thread, %d copies of 2 x %.0f MiB, median of %d interleaved rounds:\n", copies, 2.0 * n / (1 << 20), rounds);
  for (const auto& c : cs)
    std::printf("  %-44s %7.3f ms %6.1f GB/s  of sweep %.3f\n", c.name.c_str(), c.median() * 1e3, 4.0 * n / c.median() * 1e-9,
                cs.back().median() / c.median());
}
