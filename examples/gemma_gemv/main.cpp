// gemma.cpp's decode GEMV with a synthesized kernel: out[n] = sum_k x[k] * W[n][k] for n < 16384, k < 2048,
// x and out f32, W bf16 (raw bits in uint16_t), stored as N rows of K values (spec b=bf16:col).
//
// Checks gemma::gemv against a straightforward loop, then times both and reports the weight traffic in
// GB/s (the 64 MiB of W dominate: the GEMV is memory-bound) and the speedup.
//   gemv_demo [--check-only] [--min-time SECONDS]      exit 0 ok, 1 mismatch, 77 CPU lacks the ISA
#include "morello/gemma_gemv.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using info = gemma::gemv_info;
static_assert(info::batch == 1 && info::m == 1, "a GEMV: one row of A");
constexpr int K = info::k;
constexpr int N = info::n;

float bf16_to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint16_t f32_to_bf16(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// What one would write by hand: one accumulator per output, k in order.
void straightforward(const float* x, const uint16_t* w, float* out) {
  for (int n = 0; n < N; ++n) {
    const uint16_t* row = w + std::size_t(n) * K;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += x[k] * bf16_to_f32(row[k]);
    out[n] = acc;
  }
}

struct SerialFor {
  template <class F>
  void operator()(std::size_t begin, std::size_t end, F&& fn) const {
    for (std::size_t i = begin; i < end; ++i) fn(i);
  }
};

// Median seconds per call, calling fn repeatedly for at least min_time seconds (and 5 calls).
template <class F>
double time_it(F&& fn, double min_time) {
  fn();  // warm up: page faults, thread pool start
  std::vector<double> times;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double>(t1 - t0).count());
    if (times.size() >= 5 && std::chrono::duration<double>(t1 - start).count() >= min_time) break;
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bool check_only = false;
  double min_time = 1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--check-only") {
      check_only = true;
    } else if (arg == "--min-time" && i + 1 < argc) {
      min_time = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--check-only] [--min-time SECONDS]\n", argv[0]);
      return 2;
    }
  }
  std::printf("spec: %s (ISA %s)\n", info::spec, info::isa);
  if (!gemma::gemv_supported()) {
    std::printf("SKIP: this CPU lacks the instructions of ISA %s\n", info::isa);
    return 77;
  }

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(K);
  for (auto& v : x) v = dist(rng);
  std::vector<uint16_t> w(std::size_t(N) * K);
  for (auto& v : w) v = f32_to_bf16(dist(rng));
  std::vector<float> want(N), got(N, std::nanf(""));

  // Check: |got - want| <= 1e-5 * sqrt(K) * sum_k |x_k||w_nk| for every n (f32 sums in different orders).
  straightforward(x.data(), w.data(), want.data());
  gemma::gemv(x.data(), w.data(), got.data());
  const double rtol = 1e-5 * std::sqrt(double(K));
  int bad = 0;
  double worst = 0.0;
  for (int n = 0; n < N; ++n) {
    double scale = 0.0;
    for (int k = 0; k < K; ++k) scale += std::fabs(x[k] * bf16_to_f32(w[std::size_t(n) * K + k]));
    const double err = std::fabs(double(got[n]) - double(want[n])), tol = rtol * scale + 1e-30;
    if (!(err <= tol) && bad++ < 5) std::printf("MISMATCH out[%d]: %.9g vs %.9g\n", n, got[n], want[n]);
    if (err / tol > worst) worst = err / tol;
  }
  std::printf("check: %s (%d outputs, max |error|/tolerance %.3g, rtol %.3g)\n", bad ? "FAIL" : "ok", N, worst, rtol);
  if (bad) return 1;
  if (check_only) return 0;

  const double weight_bytes = double(N) * K * sizeof(uint16_t);
  const double t_plain = time_it([&] { straightforward(x.data(), w.data(), want.data()); }, min_time);
  const double t_serial = time_it([&] { gemma::gemv(x.data(), w.data(), got.data(), SerialFor()); }, min_time);
  const double t_default = time_it([&] { gemma::gemv(x.data(), w.data(), got.data()); }, min_time);
  auto row = [&](const char* what, double t) {
    std::printf("  %-34s %8.3f ms  %6.1f GB/s of weights  %5.2fx\n", what, t * 1e3, weight_bytes / t * 1e-9,
                t_plain / t);
  };
  std::printf("median time per call (W = %.0f MiB of bf16 weights), speedup vs the straightforward loop:\n",
              weight_bytes / (1 << 20));
  row("straightforward loop (1 thread)", t_plain);
  row("gemma::gemv, serial parallel-for", t_serial);
  row("gemma::gemv, default threads", t_default);
  return 0;
}
