// Shared pieces of the benchmark: cases (workloads), buffers, bf16 helpers, the checked reference.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include <sys/mman.h>

namespace bench {

enum class DType { F32, BF16 };
inline const char* dtype_name(DType t) { return t == DType::F32 ? "f32" : "bf16"; }
inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::BF16; }

// Round-to-nearest-even float -> bf16 raw bits (inputs here are finite).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// 64-byte aligned, huge-page advised buffer (the same for every implementation).
struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  Buf() = default;
  explicit Buf(size_t n) : bytes(n) {
    size_t rounded = (n + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    p = std::aligned_alloc(n >= (2u << 20) ? (2u << 20) : 64, rounded ? rounded : 64);
    if (n >= (2u << 20)) madvise(p, rounded, MADV_HUGEPAGE);
    std::memset(p, 0, rounded ? rounded : 64);
  }
  Buf(Buf&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; o.bytes = 0; }
  Buf& operator=(Buf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(bytes, o.bytes);
    return *this;
  }
  Buf(const Buf&) = delete;
  ~Buf() { std::free(p); }
  template <class T> T* as() const { return static_cast<T*>(p); }
};

// One measured problem: C[M,N] = A[M,K] * B[K,N]; B stored N x K when bcol ("b=...:col").
struct Case {
  std::string workload;  // W1..W4
  std::string variant;   // e.g. "f32act.col" or "n256"
  int64_t M, K, N;
  DType a, b;
  bool bcol;
  int copies;  // weight copies rotated between calls (so that every call reads B from DRAM)
  std::string id() const { return workload + "/" + variant; }
  double flops() const { return 2.0 * M * N * K; }
  size_t b_bytes() const { return static_cast<size_t>(K * N) * dtype_size(b); }
  // compulsory traffic of one call: B + A + C
  double bytes() const { return double(b_bytes()) + double(M * K) * dtype_size(a) + double(M * N) * 4; }
};

struct Data {
  const Case* cs;
  Buf a_f32;   // A as f32 (for bf16-activation cases: the bf16 values widened, so exact)
  Buf a_bf16;  // A rounded to bf16 (what bf16-only peers consume)
  std::vector<Buf> b;  // copies of B, dtype cs->b, layout per cs->bcol
  Buf c;               // C, f32
  // sampled reference entries (index into C) and values, for exact-f32 A and for bf16 A
  std::vector<int64_t> check_idx;
  std::vector<double> ref_f32x, ref_bf16x, ref_abs;

  explicit Data(const Case& c_) : cs(&c_) {
    const Case& c = c_;
    uint64_t s = 0x9E3779B97F4A7C15ull ^ uint64_t(c.M * 131 + c.K * 7 + c.N);
    auto rnd = [&s]() {  // xorshift64*, uniform in [-1, 1)
      s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
      return float(double((s * 2685821657736338717ull) >> 40) / double(1ull << 23) - 1.0);
    };
    a_f32 = Buf(size_t(c.M * c.K) * 4);
    a_bf16 = Buf(size_t(c.M * c.K) * 2);
    for (int64_t i = 0; i < c.M * c.K; ++i) {
      float v = rnd();
      uint16_t h = f32_to_bf16(v);
      a_bf16.as<uint16_t>()[i] = h;
      a_f32.as<float>()[i] = c.a == DType::BF16 ? bf16_to_f32(h) : v;
    }
    for (int cp = 0; cp < c.copies; ++cp) {
      b.emplace_back(c.b_bytes());
      if (c.b == DType::F32) {
        float* p = b.back().as<float>();
        for (int64_t i = 0; i < c.K * c.N; ++i) p[i] = rnd();
      } else {
        uint16_t* p = b.back().as<uint16_t>();
        for (int64_t i = 0; i < c.K * c.N; ++i) p[i] = f32_to_bf16(rnd());
      }
    }
    this->c = Buf(size_t(c.M * c.N) * 4);
    const int64_t total = cs->M * cs->N;
    if (total <= (1 << 16)) {
      for (int64_t i = 0; i < total; ++i) check_idx.push_back(i);
    } else {
      for (int64_t i = 0; i < 4096; ++i) check_idx.push_back(int64_t((uint64_t(i) * 2654435761ull) % uint64_t(total)));
      check_idx.push_back(0);
      check_idx.push_back(total - 1);
    }
    for (int64_t idx : check_idx) {
      int64_t i = idx / cs->N, j = idx % cs->N;
      double r1 = 0, r2 = 0, ab = 0;
      for (int64_t k = 0; k < cs->K; ++k) {
        double bv = bval(0, k, j);
        r1 += double(a_f32.as<float>()[i * cs->K + k]) * bv;
        double a2 = bf16_to_f32(a_bf16.as<uint16_t>()[i * cs->K + k]);
        r2 += a2 * bv;
        ab += std::fabs(a2 * bv) + std::fabs(double(a_f32.as<float>()[i * cs->K + k]) * bv);
      }
      ref_f32x.push_back(r1);
      ref_bf16x.push_back(r2);
      ref_abs.push_back(ab / 2);
    }
  }
  double bval(int copy, int64_t k, int64_t j) const {
    int64_t off = cs->bcol ? j * cs->K + k : k * cs->N + j;
    return cs->b == DType::F32 ? double(b[copy].as<float>()[off]) : double(bf16_to_f32(b[copy].as<uint16_t>()[off]));
  }
  void poison_c() {
    float* p = c.as<float>();
    for (int64_t i = 0; i < cs->M * cs->N; ++i) p[i] = std::nanf("");
  }
  // Empty string when C (computed from copy 0) matches; otherwise a description of the first mismatch.
  std::string check(bool bf16x) const {
    const auto& ref = bf16x ? ref_bf16x : ref_f32x;
    const float* p = c.as<float>();
    for (size_t t = 0; t < check_idx.size(); ++t) {
      double got = p[check_idx[t]];
      double tol = 2e-4 * ref_abs[t] + 1e-6;
      if (!(std::fabs(got - ref[t]) <= tol)) {
        return "WRONG RESULT at C[" + std::to_string(check_idx[t] / cs->N) + "," +
               std::to_string(check_idx[t] % cs->N) + "]: got " + std::to_string(got) + ", expected " +
               std::to_string(ref[t]);
      }
    }
    return "";
  }
};

}  // namespace bench
