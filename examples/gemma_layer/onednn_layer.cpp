// oneDNN's version of the layer (see onednn_layer.hpp).
#include "onednn_layer.hpp"

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

namespace onednn {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// What this oneDNN can do with bf16 weights, best first: f32 activations (3.x), bf16 activations converted in
// the call (2.x, needs AVX-512 on x86), else the weights widened to f32 once (AVX2 CPUs: twice the bytes).
enum class Mode { f32_bf16, bf16_bf16, f32_f32 };
const char* mode_label(Mode m) {
  return m == Mode::f32_bf16    ? ""
         : m == Mode::bf16_bf16 ? ", x->bf16 in the call"
                                : ", weights widened to f32 (this oneDNN has no bf16 matmul for this CPU): it "
                                  "reads twice the bytes";
}

// One GEMV out[N] = W[N rows of K] . in[K], optionally with the gate's post-ops (gelu_tanh, then * mul[N]).
struct Gemv {
  dnnl::matmul prim;
  std::vector<std::unordered_map<int, dnnl::memory>> args;  // per weight copy
  std::vector<dnnl::memory> keep;                            // packed or widened weights
  std::string impl;
  bool packed = false;

  static dnnl::matmul::primitive_desc make_pd(int K, int N, Mode m, const dnnl::primitive_attr& attr) {
    const dt a = m == Mode::bf16_bf16 ? dt::bf16 : dt::f32, w = m == Mode::f32_f32 ? dt::f32 : dt::bf16;
    return dnnl::matmul::primitive_desc(
        dnnl::matmul::desc({{1, K}, a, tag::ab}, {{K, N}, w, tag::any}, {{1, N}, dt::f32, tag::ab}), attr, engine());
  }

  // mode: the first call probes it (in order), later calls use it. in: f32, or bf16 for Mode::bf16_bf16.
  Gemv(int K, int N, const std::vector<const uint16_t*>& weights, void* in_f32, void* in_bf16, float* out, float* mul,
       Mode& mode, bool probe) {
    dnnl::memory::desc dst_md({1, N}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    if (mul) {
      dnnl::post_ops po;
      po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
      po.append_binary(dnnl::algorithm::binary_mul, dst_md);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd;
    for (Mode m : {Mode::f32_bf16, Mode::bf16_bf16, Mode::f32_f32}) {
      if (!probe && m != mode) continue;
      try {
        pd = make_pd(K, N, m, attr);
        mode = m;
        break;
      } catch (const dnnl::error&) {
        if (m == Mode::f32_f32 || !probe) throw;
      }
    }
    prim = dnnl::matmul(pd);
    impl = pd.impl_info_str();
    dnnl::stream s(engine());
    dnnl::memory src(pd.src_desc(), engine(), mode == Mode::bf16_bf16 ? in_bf16 : in_f32);
    dnnl::memory dst(dst_md, engine(), out);
    for (const uint16_t* w : weights) {
      dnnl::memory::desc plain_md({K, N}, dt::bf16, tag::ba);
      dnnl::memory plain(plain_md, engine(), const_cast<uint16_t*>(w));
      if (mode == Mode::f32_f32) {  // widen once (exactly), outside the timed call
        plain_md = dnnl::memory::desc({K, N}, dt::f32, tag::ba);
        dnnl::memory wide(plain_md, engine());
        float* p = static_cast<float*>(wide.get_data_handle());
        for (size_t i = 0; i < size_t(K) * N; ++i) p[i] = harness::bf16_to_f32(w[i]);
        plain = wide;
        keep.push_back(wide);
      }
      dnnl::memory wei = plain;
      if (pd.weights_desc() != plain_md) {  // pack once, outside the timed call
        wei = dnnl::memory(pd.weights_desc(), engine());
        dnnl::reorder(plain, wei).execute(s, plain, wei);
        s.wait();
        keep.push_back(wei);
        packed = true;
      }
      args.push_back({{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
      if (mul) args.back()[DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1] = dnnl::memory(dst_md, engine(), mul);
    }
    if (mode == Mode::f32_f32 && packed) keep.erase(keep.begin());  // the packed copies suffice
  }
  void run(dnnl::stream& s, int copy) { prim.execute(s, args[size_t(copy)]); }
};

void to_bf16(const float* in, uint16_t* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = harness::f32_to_bf16(in[i]);
}

}  // namespace

struct Layer::Impl {
  layer::Activations& a;
  int threads;
  dnnl::stream s{engine()};
  std::vector<uint16_t> xb = std::vector<uint16_t>(layer::kModel), attnb = std::vector<uint16_t>(layer::kQ),
                        hb = std::vector<uint16_t>(layer::kFF);
  Mode mode = Mode::f32_bf16;
  std::unique_ptr<Gemv> qkv, attn_out, up, gate, down;
  std::string label;

  Impl(const std::vector<const layer::Weights*>& copies, layer::Activations& acts, int nthreads)
      : a(acts), threads(nthreads) {
    using layer::kFF, layer::kModel, layer::kQ, layer::kQKV;
    omp_set_num_threads(threads);  // oneDNN may size its blocking by the thread count at creation
    auto pick = [&](auto member) {
      std::vector<const uint16_t*> v;
      for (const layer::Weights* w : copies) v.push_back((w->*member).data());
      return v;
    };
    // The first GEMV probes what this oneDNN can do (Mode); the others follow it.
    auto gemv = [&](int K, int N, auto member, float* in, uint16_t* in_bf16, float* out, float* mul, bool probe) {
      return std::make_unique<Gemv>(K, N, pick(member), in, in_bf16, out, mul, mode, probe);
    };
    qkv = gemv(kModel, kQKV, &layer::Weights::qkv, a.x.data(), xb.data(), a.qkv.data(), nullptr, true);
    attn_out = gemv(kQ, kModel, &layer::Weights::attn_out, a.attn.data(), attnb.data(), a.o.data(), nullptr, false);
    up = gemv(kModel, kFF, &layer::Weights::up, a.x.data(), xb.data(), a.u.data(), nullptr, false);
    gate = gemv(kModel, kFF, &layer::Weights::gate, a.x.data(), xb.data(), a.h.data(), a.u.data(), false);
    down = gemv(kFF, kModel, &layer::Weights::down, a.h.data(), hb.data(), a.y.data(), nullptr, false);
    const dnnl_version_t* v = dnnl_version();
    label = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + " " + gate->impl +
            (gate->packed ? ", packed weights" : "") + mode_label(mode);
  }

  void run(int copy) {
    omp_set_num_threads(threads);
    const bool bf16 = mode == Mode::bf16_bf16;
    if (bf16) {
      to_bf16(a.x.data(), xb.data(), layer::kModel);
      to_bf16(a.attn.data(), attnb.data(), layer::kQ);
    }
    qkv->run(s, copy);
    attn_out->run(s, copy);
    up->run(s, copy);
    gate->run(s, copy);  // h = gelu(x Wgate) * u
    if (bf16) {
      s.wait();
      to_bf16(a.h.data(), hb.data(), layer::kFF);
    }
    down->run(s, copy);
    s.wait();
  }
};

Layer::Layer(const std::vector<const layer::Weights*>& copies, layer::Activations& acts, int threads)
    : impl_(std::make_unique<Impl>(copies, acts, threads)) {}
Layer::~Layer() = default;
void Layer::run(int copy) { impl_->run(copy); }
const std::string& Layer::label() const { return impl_->label; }
bool Layer::bf16_activations() const { return impl_->mode == Mode::bf16_bf16; }

}  // namespace onednn
