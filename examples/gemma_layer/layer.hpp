// One Gemma 3 4B decoder layer's matrix-vector work at decode time (batch 1), with synthesized kernels:
//   qkv = Wqkv x            (1x2560x4096: 8 query heads + 4 key heads + 4 value heads of 256, one projection)
//   o   = Wo attn           (1x2048x2560: attn is a random stand-in for the attention's result)
//   h   = gelu(Wgate x) * (Wup x)    (the fused gate/up: `gated 1x2560x10240 ... act=gelu`, one kernel)
//   y   = Wdown h           (1x10240x2560)
// Attention itself (RoPE, the KV cache, softmax), the RMSNorms and the residual adds are out of scope: they
// are not matrix-vector products with weights. Weights are bf16, N rows of K values (b=bf16:col), as gemma.cpp
// stores them; activations f32.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "harness.hpp"
#include "morello/gemma_attn_out.hpp"
#include "morello/gemma_down.hpp"
#include "morello/gemma_ff_proj.hpp"
#include "morello/gemma_gelu_probe.hpp"
#include "morello/gemma_qkv.hpp"
#include "morello/gemma_gate_up.hpp"
#include "reference.hpp"

namespace layer {

constexpr int kModel = 2560, kFF = 10240, kHeads = 8, kKVHeads = 4, kHeadDim = 256;
constexpr int kQ = kHeads * kHeadDim, kKV = kKVHeads * kHeadDim, kQKV = kQ + 2 * kKV;

static_assert(gemma::qkv_info::m == 1 && gemma::qkv_info::k == kModel && gemma::qkv_info::n == kQKV, "QKV");
static_assert(gemma::attn_out_info::k == kQ && gemma::attn_out_info::n == kModel, "attention output");
static_assert(gemma::ff_proj_info::k == kModel && gemma::ff_proj_info::n == kFF, "gate or up alone");
static_assert(gemma::down_info::k == kFF && gemma::down_info::n == kModel, "down");
static_assert(gemma::gate_up_info::k == kModel && gemma::gate_up_info::n == kFF, "gate/up");

// N rows of K bf16 values, uniform in +-6/sqrt(K) (outputs of about unit size times 2: GELU's curved part).
inline harness::Buffer<uint16_t> random_weights(int K, int N, uint64_t seed) {
  harness::Buffer<uint16_t> w(size_t(K) * N);
  harness::Rng rng(seed);
  const float s = 6.0f / std::sqrt(float(K));
  for (size_t i = 0; i < w.size(); ++i) w[i] = harness::f32_to_bf16(s * rng.uniform());
  return w;
}

struct Weights {
  harness::Buffer<uint16_t> qkv, attn_out, gate, up, down;
  explicit Weights(uint64_t seed)
      : qkv(random_weights(kModel, kQKV, seed * 8 + 1)),
        attn_out(random_weights(kQ, kModel, seed * 8 + 2)),
        gate(random_weights(kModel, kFF, seed * 8 + 3)),
        up(random_weights(kModel, kFF, seed * 8 + 4)),
        down(random_weights(kFF, kModel, seed * 8 + 5)) {}
  static constexpr double bytes() {
    return 2.0 * (double(kModel) * kQKV + double(kQ) * kModel + 2.0 * kModel * kFF + double(kFF) * kModel);
  }
};

struct Activations {
  harness::Buffer<float> x{kModel}, attn{kQ};                 // inputs
  harness::Buffer<float> qkv{kQKV}, o{kModel}, h{kFF}, y{kModel};  // outputs
  harness::Buffer<float> g{kFF}, u{kFF};                      // the unfused layer's gate and up
  explicit Activations(uint64_t seed) {
    harness::Rng rng(seed);
    for (size_t i = 0; i < x.size(); ++i) x[i] = rng.uniform();
    for (size_t i = 0; i < attn.size(); ++i) attn[i] = rng.uniform();
  }
};

// The separate elementwise pass of the unfused layer: h = gelu(g) * u, in chunks on the same parallel-for.
template <class PF>
void gelu_mul(const float* g, const float* u, float* h, int n, PF& pf) {
  constexpr int kChunk = 2048;
  pf(std::size_t(0), std::size_t((n + kChunk - 1) / kChunk), [&](std::size_t t) {
    const int end = std::min(n, int(t + 1) * kChunk);
    for (int i = int(t) * kChunk; i < end; ++i) h[i] = reference::gelu(g[i]) * u[i];
  });
}

// Gate and up as two plain GEMVs, then the elementwise pass: one more trip of g and u through memory.
template <class PF>
void gate_up_unfused(const Weights& w, Activations& a, PF& pf) {
  gemma::ff_proj(a.x.data(), w.gate.data(), a.g.data(), pf);
  gemma::ff_proj(a.x.data(), w.up.data(), a.u.data(), pf);
  gelu_mul(a.g.data(), a.u.data(), a.h.data(), kFF, pf);
}

template <class PF>
void gate_up_fused(const Weights& w, Activations& a, PF& pf) {
  gemma::gate_up(a.x.data(), w.gate.data(), w.up.data(), a.h.data(), pf);  // gelu(x Wgate) * (x Wup)
}

template <class PF>
void run_fused(const Weights& w, Activations& a, PF&& pf) {
  gemma::qkv(a.x.data(), w.qkv.data(), a.qkv.data(), pf);
  gemma::attn_out(a.attn.data(), w.attn_out.data(), a.o.data(), pf);
  gate_up_fused(w, a, pf);
  gemma::down(a.h.data(), w.down.data(), a.y.data(), pf);
}

template <class PF>
void run_unfused(const Weights& w, Activations& a, PF&& pf) {
  gemma::qkv(a.x.data(), w.qkv.data(), a.qkv.data(), pf);
  gemma::attn_out(a.attn.data(), w.attn_out.data(), a.o.data(), pf);
  gate_up_unfused(w, a, pf);
  gemma::down(a.h.data(), w.down.data(), a.y.data(), pf);
}

inline bool kernels_supported() {
  return gemma::qkv_supported() && gemma::attn_out_supported() && gemma::gate_up_supported() &&
         gemma::down_supported() && gemma::ff_proj_supported() && gemma::gelu_probe_supported();
}

// A read sweep over the layer's weights: the memory-bound floor of its GEMVs.
inline void sweep(harness::Pool& pool, const Weights& w) {
  volatile uint64_t sink = harness::sweep(pool, w.qkv.data(), w.qkv.size() * 2) +
                           harness::sweep(pool, w.attn_out.data(), w.attn_out.size() * 2) +
                           harness::sweep(pool, w.gate.data(), w.gate.size() * 2) +
                           harness::sweep(pool, w.up.data(), w.up.size() * 2) +
                           harness::sweep(pool, w.down.data(), w.down.size() * 2);
  (void)sink;
}

}  // namespace layer
