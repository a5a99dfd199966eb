// Test harness: runs a generated kernel and its reference loop on the same random data and compares.
//
// Tolerances (per output element y, reference r, both computed from identical inputs):
//   S = sum_k |a_k * b_k| (+ |c_old| with accum), K = the reduction length.
//   f32 output:  |y - r| <= 2 * (K + 2) * 2^-24 * S
//     Kernel and reference add the same products in f32, but in different orders (vector lanes,
//     split accumulators, horizontal sums vs. k in order; FMA may skip a product rounding). Each
//     order's error is at most ~(K+1) u S with u = 2^-24 (recursive summation bound, gamma_K), so
//     two results differ by at most twice that. bf16 inputs change nothing: widening is exact and
//     both sides see the same bf16 values.
//   bf16 output: the f32 bound above, plus one bf16 ulp of the result, 2^-7 * max(|y|, |r|): each side
//     rounds its own f32 value to nearest bf16 (error <= 2^-8 relative each), so two nearby f32 values
//     can round to adjacent bf16 values.
// The kernel must also be deterministic (two runs give identical bytes), give identical bytes with a
// user parallel-for (serial and multi-threaded), and not write outside C (guard zones checked).
#pragma once
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

// The threaded parallel-for the check runs besides the default one (a set's test program may choose another).
#ifndef MORELLO_CHECK_THREADED_PF
#define MORELLO_CHECK_THREADED_PF ::morello_check::ThreadsFor
#endif

namespace morello_check {

inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float widen(float x) { return x; }
inline float widen(uint16_t x) { return from_bf16(x); }

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float next() {  // uniform in [-1, 1)
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    return float(int64_t(s >> 40) - (int64_t(1) << 23)) / float(1 << 23);
  }
};
inline void fill(std::vector<float>& v, Rng& r) { for (auto& x : v) x = r.next(); }
inline void fill(std::vector<uint16_t>& v, Rng& r) { for (auto& x : v) x = to_bf16(r.next()); }

// A thread-per-task parallel-for, to exercise the pf overload with real concurrency.
struct ThreadsFor {
  template <class F>
  void operator()(std::size_t begin, std::size_t end, F&& fn) const {
    std::vector<std::thread> ts;
    for (std::size_t i = begin; i < end; ++i) ts.emplace_back([&fn, i] { fn(i); });
    for (auto& t : ts) t.join();
  }
};
// A pool-like parallel-for of T std::threads: each takes task indices from a shared counter until none
// are left (tasks outnumber or undernumber the threads; the threads may outnumber the cores).
template <int T>
struct AtomicFor {
  template <class F>
  void operator()(std::size_t begin, std::size_t end, F&& fn) const {
    std::atomic<std::size_t> next{begin};
    std::vector<std::thread> ts;
    for (int t = 0; t < T; ++t)
      ts.emplace_back([&] {
        for (std::size_t i; (i = next.fetch_add(1)) < end;) fn(i);
      });
    for (auto& t : ts) t.join();
  }
};
struct SerialFor {
  template <class F>
  void operator()(std::size_t begin, std::size_t end, F&& fn) const {
    for (std::size_t i = end; i > begin; --i) fn(i - 1);  // reverse order on purpose
  }
};

// Index of (b, m, k) in a tensor stored row- or column-major (col: last two dims swapped).
inline std::size_t index(bool col, int b, int r, int c, int R, int C) {
  return col ? (std::size_t(b) * C + c) * R + r : (std::size_t(b) * R + r) * C + c;
}

constexpr int kGuard = 64;  // elements of guard zone on each side of C

template <class Info, class Kernel, class KernelPf, class Ref>
int check(const char* label, bool a_col, bool b_col, bool c_col, Kernel kernel, KernelPf kernel_pf, Ref ref,
          bool supported, uint64_t seed = 1) {
  using A = typename Info::a_type;
  using B = typename Info::b_type;
  using C = typename Info::c_type;
  if (!supported) {
    std::printf("SKIP %s: CPU lacks %s\n", label, Info::isa);
    return 0;
  }
  const int Bt = Info::batch, M = Info::m, K = Info::k, N = Info::n;
  Rng rng(seed);
  std::vector<A> a(std::size_t(Bt) * M * K);
  std::vector<B> b(std::size_t(Bt) * K * N);
  std::vector<C> c0(std::size_t(Bt) * M * N);
  fill(a, rng);
  fill(b, rng);
  fill(c0, rng);
  // C with guard zones on both sides, filled with a pattern that must survive.
  const std::size_t nc = c0.size();
  std::vector<C> out(nc + 2 * kGuard), ref_out(c0);
  std::vector<C> guard(kGuard);
  fill(guard, rng);
  auto reset = [&] {
    std::copy(guard.begin(), guard.end(), out.begin());
    std::copy(c0.begin(), c0.end(), out.begin() + kGuard);
    std::copy(guard.begin(), guard.end(), out.begin() + kGuard + nc);
  };
  ref(a.data(), b.data(), ref_out.data());
  reset();
  kernel(a.data(), b.data(), out.data() + kGuard);
  std::vector<C> first(out.begin() + kGuard, out.begin() + kGuard + nc);
  int failures = 0;
  if (std::memcmp(out.data(), guard.data(), kGuard * sizeof(C)) ||
      std::memcmp(out.data() + kGuard + nc, guard.data(), kGuard * sizeof(C))) {
    std::printf("FAIL %s: wrote outside C\n", label);
    ++failures;
  }
  double worst = 0;
  for (int bb = 0; bb < Bt && failures < 5; ++bb)
    for (int i = 0; i < M && failures < 5; ++i)
      for (int j = 0; j < N && failures < 5; ++j) {
        const std::size_t ci = index(c_col, bb, i, j, M, N);
        double s = Info::accum ? std::fabs(double(widen(c0[ci]))) : 0.0;
        for (int p = 0; p < K; ++p)
          s += std::fabs(double(widen(a[index(a_col, bb, i, p, M, K)])) * double(widen(b[index(b_col, bb, p, j, K, N)])));
        const double y = widen(first[ci]), r = widen(ref_out[ci]);
        double tol = 2.0 * (K + 2) * std::ldexp(1.0, -24) * s;
        if (sizeof(C) == 2) tol += std::ldexp(1.0, -7) * std::fmax(std::fabs(y), std::fabs(r));
        tol += 1e-30;
        const double err = std::fabs(y - r);
        if (!(err <= tol)) {  // also catches NaN
          std::printf("FAIL %s: c[b=%d][m=%d][n=%d] = %.9g, reference %.9g (|err| %.3g > tol %.3g)\n", label, bb,
                      i, j, y, r, err, tol);
          ++failures;
        }
        if (s > 0) worst = std::fmax(worst, err / tol);
      }
  // Determinism: again with the default mechanism, a serial pf (reverse order) and a threaded pf.
  reset();
  kernel(a.data(), b.data(), out.data() + kGuard);
  if (std::memcmp(out.data() + kGuard, first.data(), nc * sizeof(C))) {
    std::printf("FAIL %s: second run differs\n", label);
    ++failures;
  }
  reset();
  kernel_pf(a.data(), b.data(), out.data() + kGuard, SerialFor());
  if (std::memcmp(out.data() + kGuard, first.data(), nc * sizeof(C))) {
    std::printf("FAIL %s: serial parallel-for run differs\n", label);
    ++failures;
  }
  reset();
  kernel_pf(a.data(), b.data(), out.data() + kGuard, MORELLO_CHECK_THREADED_PF());
  if (std::memcmp(out.data() + kGuard, first.data(), nc * sizeof(C))) {
    std::printf("FAIL %s: threaded parallel-for run differs\n", label);
    ++failures;
  }
  std::printf("%s %s (%s): worst error %.3f of tolerance\n", failures ? "FAIL" : "ok  ", label, Info::spec, worst);
  return failures;
}

}  // namespace morello_check

// CHECK_KERNEL(ns, name, a_col, b_col, c_col): compare ns::name with ns::name_reference.
#define MORELLO_CHECK_KERNEL(NS, NAME, ACOL, BCOL, CCOL)                                                 \
  ::morello_check::check<NS::NAME##_info>(                                                               \
      #NS "::" #NAME, ACOL, BCOL, CCOL,                                                                  \
      [](const NS::NAME##_info::a_type* a, const NS::NAME##_info::b_type* b, NS::NAME##_info::c_type* c) { \
        NS::NAME(a, b, c);                                                                               \
      },                                                                                                 \
      [](const NS::NAME##_info::a_type* a, const NS::NAME##_info::b_type* b, NS::NAME##_info::c_type* c,   \
         auto pf) { NS::NAME(a, b, c, pf); },                                                            \
      [](const NS::NAME##_info::a_type* a, const NS::NAME##_info::b_type* b, NS::NAME##_info::c_type* c) { \
        NS::NAME##_reference(a, b, c);                                                                   \
      },                                                                                                 \
      NS::NAME##_supported())
