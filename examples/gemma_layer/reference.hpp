// The straightforward implementation every output is checked against, and the tolerances.
//
// A GEMV output is a sum of K products in f32; the kernels add them in another order than the plain loop, so
// each of the two is within K * 2^-24 * sum_k |a_k||w_nk| of the exact value: they may differ by twice that.
// When an implementation rounds the activations to bf16 first (oneDNN 2.6 has no f32 x bf16 matmul), each
// product may move by 2^-8 relative more. The gated output gelu(g) * u inherits the errors of g and u through
// |gelu'| <= 1.13 and adds the activation's own error (checked alone against double precision).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "harness.hpp"

namespace reference {

using harness::bf16_to_f32;

// GELU, tanh approximation (the contract of `act=gelu`), in f32 as a plain loop writes it and in double.
inline float gelu(float x) { return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x))); }
inline double gelu_exact(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}
constexpr double kGeluSlope = 1.13;  // max |d gelu / dx| (at x ~ 1.5)
// Accepted error of an f32 GELU: a few ulp of x (0.5 * x * (1 + tanh) loses tanh's relative accuracy
// in 1 + tanh for negative x, so the bound is relative to |x|, not to gelu(x)).
inline double gelu_tol(double x) { return 8.0 * std::ldexp(std::fabs(x), -24) + 1e-37; }

// out[n] = sum_k a[k] * w[n*K + k] (w: N rows of K bf16), one accumulator, k in order; abs[n] = sum |a w|.
inline void gemv(const float* a, const uint16_t* w, int K, int N, float* out, double* abs) {
  for (int n = 0; n < N; ++n) {
    const uint16_t* row = w + size_t(n) * K;
    float acc = 0.0f;
    double s = 0.0;
    for (int k = 0; k < K; ++k) {
      const float p = a[k] * bf16_to_f32(row[k]);
      acc += p;
      s += std::fabs(double(p));
    }
    out[n] = acc;
    abs[n] = s;
  }
}

// Worst |got - want| / tolerance over a vector, and the number of outputs over tolerance.
struct Check {
  std::string what;
  int n = 0, bad = 0;
  double worst = 0.0;
  void add(int i, double got, double want, double tol) {
    ++n;
    const double r = std::fabs(got - want) / tol;
    if (!(r <= 1.0) && bad++ < 3) std::printf("  MISMATCH %s[%d]: %.9g, expected %.9g (tolerance %.3g)\n",
                                               what.c_str(), i, got, want, tol);
    if (!(r <= worst)) worst = r;  // NaN counts as the worst
  }
  bool ok() const { return bad == 0; }
  void print() const {
    std::printf("  %-52s %s (%d outputs, max |error|/tolerance %.3g)\n", what.c_str(), ok() ? "ok" : "FAIL", n,
                worst);
  }
};

// Tolerance factor of one GEMV output against the plain loop (both rounded in f32; bf16 activations optional).
inline double gemv_rtol(int K, bool bf16_activations) {
  return 2.0 * K * std::ldexp(1.0, -24) + (bf16_activations ? std::ldexp(1.0, -8) : 0.0);
}

inline Check check_gemv(const std::string& what, const float* a, const uint16_t* w, int K, int N, const float* got,
                        bool bf16_activations) {
  std::vector<float> want(N);
  std::vector<double> abs(N);
  gemv(a, w, K, N, want.data(), abs.data());
  const double rtol = gemv_rtol(K, bf16_activations);
  Check c{what};
  for (int n = 0; n < N; ++n) c.add(n, got[n], want[n], rtol * abs[n] + 1e-30);
  return c;
}

// got[n] = gelu(x . gate_n) * (x . up_n)
inline Check check_gated(const std::string& what, const float* x, const uint16_t* gate, const uint16_t* up, int K,
                         int N, const float* got, bool bf16_activations) {
  std::vector<float> g(N), u(N);
  std::vector<double> ga(N), ua(N);
  gemv(x, gate, K, N, g.data(), ga.data());
  gemv(x, up, K, N, u.data(), ua.data());
  const double rtol = gemv_rtol(K, bf16_activations);
  Check c{what};
  for (int n = 0; n < N; ++n) {
    const double want = double(gelu(g[n])) * u[n], tg = rtol * ga[n], tu = rtol * ua[n];
    const double tol = kGeluSlope * std::fabs(u[n]) * tg + std::fabs(gelu(g[n])) * tu + tg * tu +
                       std::fabs(u[n]) * 2.0 * gelu_tol(g[n]) + std::ldexp(std::fabs(want), -21) + 1e-30;
    c.add(n, got[n], want, tol);
  }
  return c;
}

// GELU values got[i] = gelu(x[i]) against double precision.
inline Check check_gelu(const std::string& what, const float* x, const float* got, int n) {
  Check c{what};
  for (int i = 0; i < n; ++i) c.add(i, got[i], gelu_exact(x[i]), gelu_tol(x[i]));
  return c;
}

// Inputs for the GELU check: a dense grid over [-12, 12] (the curved part and both tails), then small,
// large and signed-zero values.
inline std::vector<float> gelu_inputs(int n) {
  std::vector<float> x(n);
  const float extra[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f, 30.0f, -30.0f, 1e4f, -1e4f, 1e6f, -1e6f};
  const int ne = int(sizeof extra / sizeof extra[0]), grid = n - ne;
  for (int i = 0; i < grid; ++i) x[i] = -12.0f + 24.0f * float(i) / float(grid - 1);
  for (int i = 0; i < ne; ++i) x[grid + i] = extra[i];
  return x;
}

}  // namespace reference
