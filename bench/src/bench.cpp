// morello-build benchmark instrument (issue 6): generated kernels vs OpenBLAS, oneDNN, Eigen, libxsmm and a
// naive loop, in one process and one run, plus a same-process DRAM read-bandwidth reference (an AVX-512 sweep
// over the very weight buffers the GEMVs read) and an FMA peak reference (independent FMA chains).
//
// Benchmark names: "<workload>/<variant>/<impl>/t<threads>" (threads "d": the kernel's default overload).
// Time: "t_med" (seconds per call, the median over batches of >= 25 us; robust to preemption on a shared
// machine) is what report.py uses; Google Benchmark's own time is the mean. "flop_call" / "bytes_call": per call.
// Counters: "flop" and "bytes" are per-second rates (compulsory traffic: B + A + C; the references: what they
// read / compute). GEMV entries (M = 1) also carry "ref_bytes": the read bandwidth of an untimed sweep run
// right after every timed call (a paired reference under the same load); their time is the timed calls only. Every implementation's result is checked once against a double-precision reference before
// it is timed; a wrong result turns into a skipped benchmark whose error message says "WRONG RESULT".
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <dlfcn.h>
#include <immintrin.h>
#include <omp.h>
#include <unistd.h>

#include <cblas.h>
#include <oneapi/dnnl/dnnl.hpp>
#include <Eigen/Dense>
#include <libxsmm.h>

#include "common.hpp"
#include "pool.hpp"

#ifdef BENCH_HAVE_MORELLO
#include "morello_includes.inc"
#endif

namespace bench {

Pool* pool2() {
  static Pool p(2);
  return &p;
}

// ---------------------------------------------------------------------------------------------------------
// Generated kernels, registered by the build (bench/CMakeLists.txt writes morello_kernels.inc).
struct MorelloKernel {
  std::string name, spec;
  DType a, b, c;
  bool (*supported)();
  void (*run)(const void* a, const void* b, void* c, int mode);  // mode 0: default overload, 1: serial pf, 2: pool
};
std::vector<MorelloKernel>& morello_kernels() {
  static std::vector<MorelloKernel> v;
  return v;
}
#define MORELLO_KERNEL(FN, SPEC, TA, TB, TC)                                                              \
  morello_kernels().push_back(MorelloKernel{                                                              \
      #FN, SPEC, dtype_of<TA>(), dtype_of<TB>(), dtype_of<TC>(), &morello::FN##_supported,                 \
      +[](const void* a, const void* b, void* c, int mode) {                                              \
        auto A = static_cast<const TA*>(a);                                                               \
        auto B = static_cast<const TB*>(b);                                                               \
        auto C = static_cast<TC*>(c);                                                                     \
        if (mode == 0)                                                                                    \
          morello::FN(A, B, C);                                                                           \
        else if (mode == 1)                                                                               \
          morello::FN(A, B, C, SerialPF{});                                                               \
        else                                                                                              \
          morello::FN(A, B, C, PoolPF{pool2()});                                                          \
      }});
void register_morello_kernels() {
#ifdef BENCH_HAVE_MORELLO
#include "morello_kernels.inc"
#endif
}

// Reads "matmul MxKxN ... b=DT:col ..." (dims and B layout; dtypes come from the C++ types).
static bool parse_spec(const std::string& spec, int64_t& M, int64_t& K, int64_t& N, bool& bcol) {
  long long m, k, n;
  if (std::sscanf(spec.c_str(), "matmul %lldx%lldx%lld", &m, &k, &n) != 3) return false;
  M = m; K = k; N = n;
  bcol = false;
  size_t p = spec.find(" b=");
  if (p != std::string::npos) {
    size_t e = spec.find(' ', p + 1);
    std::string tok = spec.substr(p + 1, e == std::string::npos ? std::string::npos : e - p - 1);
    bcol = tok.find(":col") != std::string::npos;
  }
  if (spec.find(" batch=") != std::string::npos || spec.find(" accum") != std::string::npos) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------------------
// Implementations. prepare() builds whatever the implementation needs (outside the timed region: packing,
// primitive creation, JIT) and returns the call to time; it receives the weight copy index.
struct Prepared {
  std::function<void(int)> run;
  std::string label;
  std::string error;
  std::shared_ptr<void> keep;  // objects the call uses
  int64_t batch = 0;           // calls per timed batch (calibrated on first use)
};

struct Entry {
  const Case* cs;
  std::string impl;
  int threads;     // 1, 2, or 0 = the kernel's default overload
  bool bf16x;      // consumes A rounded to bf16 (so it is checked against the bf16-A reference)
  int kind;        // 0: matmul implementation, 1: bandwidth reference, 2: FMA peak reference
  std::function<Prepared(Data*, int threads)> prepare;
};

static void set_threads(int t) {
  if (t < 1) t = 1;
  openblas_set_num_threads(t);
  omp_set_num_threads(t);
  Eigen::setNbThreads(t);
}

static void to_bf16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

// --- naive loop: the textbook triple loop (i, j, k), compiled with the same flags as everything else.
template <class TA, class TB>
static void naive(const TA* a, const TB* b, float* c, const Case& cs) {
  auto av = [](TA v) { if constexpr (std::is_same_v<TA, float>) return v; else return bf16_to_f32(v); };
  auto bv = [](TB v) { if constexpr (std::is_same_v<TB, float>) return v; else return bf16_to_f32(v); };
  const int64_t M = cs.M, K = cs.K, N = cs.N;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float s = 0;
      for (int64_t k = 0; k < K; ++k) s += av(a[i * K + k]) * bv(cs.bcol ? b[j * K + k] : b[k * N + j]);
      c[i * N + j] = s;
    }
}
static Prepared prep_naive(Data& d, int) {
  const Case& cs = *d.cs;
  Prepared p;
  p.label = "i-j-k loop";
  bool ax = cs.a == DType::BF16;
  if (cs.b == DType::F32)
    p.run = [&d, &cs](int cp) { naive(d.a_f32.as<float>(), d.b[cp].as<float>(), d.c.as<float>(), cs); };
  else if (ax)
    p.run = [&d, &cs](int cp) { naive(d.a_bf16.as<uint16_t>(), d.b[cp].as<uint16_t>(), d.c.as<float>(), cs); };
  else
    p.run = [&d, &cs](int cp) { naive(d.a_f32.as<float>(), d.b[cp].as<uint16_t>(), d.c.as<float>(), cs); };
  return p;
}

// --- OpenBLAS: sgemm / sgemv; bf16 weights: sbgemv / sbgemm (they take bf16 activations only).
static bool openblas_has_bf16() {
  return dlsym(RTLD_DEFAULT, "cblas_sbgemv") != nullptr && dlsym(RTLD_DEFAULT, "cblas_sbgemm") != nullptr;
}
static Prepared prep_openblas(Data& d, int) {
  const Case& cs = *d.cs;
  Prepared p;
  p.label = std::string("OpenBLAS ") + openblas_get_corename();
  const int M = cs.M, K = cs.K, N = cs.N;
  if (cs.b == DType::F32) {
    if (M == 1) {
      if (cs.bcol)  // y[N] = Bt[N,K] x
        p.run = [&d, N, K](int cp) {
          cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.f, d.b[cp].as<float>(), K, d.a_f32.as<float>(), 1, 0.f,
                      d.c.as<float>(), 1);
        };
      else
        p.run = [&d, N, K](int cp) {
          cblas_sgemv(CblasRowMajor, CblasTrans, K, N, 1.f, d.b[cp].as<float>(), N, d.a_f32.as<float>(), 1, 0.f,
                      d.c.as<float>(), 1);
        };
    } else {
      bool bc = cs.bcol;
      p.run = [&d, M, N, K, bc](int cp) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, bc ? CblasTrans : CblasNoTrans, M, N, K, 1.f, d.a_f32.as<float>(), K,
                    d.b[cp].as<float>(), bc ? K : N, 0.f, d.c.as<float>(), N);
      };
    }
    return p;
  }
  // bf16 weights: activations must be bf16; exact-f32-activation cases convert them in the timed call.
  // cblas.h declares cblas_sbgemv/sbgemm, but only libraries built with BUILD_BFLOAT16 export them
  // (Debian's 0.3.21 does not): look them up at run time.
  using sbgemv_t = decltype(&cblas_sbgemv);
  using sbgemm_t = decltype(&cblas_sbgemm);
  auto sbgemv = reinterpret_cast<sbgemv_t>(dlsym(RTLD_DEFAULT, "cblas_sbgemv"));
  auto sbgemm = reinterpret_cast<sbgemm_t>(dlsym(RTLD_DEFAULT, "cblas_sbgemm"));
  if (!(M == 1 ? (void*)sbgemv : (void*)sbgemm)) {
    p.error = "OpenBLAS: no bf16 GEMM/GEMV in this build (cblas_sbgemv/sbgemm not exported: built without BUILD_BFLOAT16)";
    return p;
  }
  auto xb = std::make_shared<std::vector<uint16_t>>(size_t(M) * K);
  p.keep = xb;
  const bool conv = cs.a == DType::F32;
  auto x = [&d, xb, conv, M, K]() -> const uint16_t* {
    if (!conv) return d.a_bf16.as<uint16_t>();
    to_bf16(d.a_f32.as<float>(), xb->data(), int64_t(M) * K);
    return xb->data();
  };
  if (M == 1) {
    if (cs.bcol)
      p.run = [&d, x, N, K, sbgemv](int cp) {
        sbgemv(CblasRowMajor, CblasNoTrans, N, K, 1.f, d.b[cp].as<uint16_t>(), K, x(), 1, 0.f, d.c.as<float>(), 1);
      };
    else
      p.run = [&d, x, N, K, sbgemv](int cp) {
        sbgemv(CblasRowMajor, CblasTrans, K, N, 1.f, d.b[cp].as<uint16_t>(), N, x(), 1, 0.f, d.c.as<float>(), 1);
      };
  } else {
    bool bc = cs.bcol;
    p.run = [&d, x, M, N, K, bc, sbgemm](int cp) {
      sbgemm(CblasRowMajor, CblasNoTrans, bc ? CblasTrans : CblasNoTrans, M, N, K, 1.f, x(), K,
                   d.b[cp].as<uint16_t>(), bc ? K : N, 0.f, d.c.as<float>(), N);
    };
  }
  if (conv) p.label += " (x->bf16 in the call)";
  return p;
}

// --- oneDNN 2.6 matmul primitive. bf16 weights need bf16 activations (2.6 has no f32 x bf16 matmul).
// packed: weights in the primitive's preferred format (format_tag::any), reordered outside the timed region.
static dnnl::engine& dnnl_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
static Prepared prep_onednn(Data& d, int threads, bool packed) {
  using namespace dnnl;
  using dt = memory::data_type;
  using tag = memory::format_tag;
  const Case& cs = *d.cs;
  Prepared p;
  set_threads(threads);  // oneDNN (OpenMP runtime) may size its blocking by the thread count at creation
  struct St {
    stream s{dnnl_engine()};
    matmul prim;
    memory src, dst;
    std::vector<memory> wei;
    std::vector<std::unordered_map<int, memory>> args;
    std::vector<uint16_t> xb;
  };
  auto st = std::make_shared<St>();
  p.keep = st;
  const bool bw = cs.b == DType::BF16;
  const dt sdt = bw ? dt::bf16 : dt::f32;
  memory::desc src_md({cs.M, cs.K}, sdt, tag::ab);
  memory::desc wei_md({cs.K, cs.N}, bw ? dt::bf16 : dt::f32, cs.bcol ? tag::ba : tag::ab);
  memory::desc dst_md({cs.M, cs.N}, dt::f32, tag::ab);
  memory::desc wei_any({cs.K, cs.N}, bw ? dt::bf16 : dt::f32, tag::any);
  matmul::primitive_desc pd;
  try {
    pd = matmul::primitive_desc(matmul::desc(src_md, packed ? wei_any : wei_md, dst_md), dnnl_engine());
  } catch (const dnnl::error& e) {
    p.error = std::string("oneDNN: no matmul implementation: ") + e.what();
    return p;
  }
  st->prim = matmul(pd);
  const bool conv = bw && cs.a == DType::F32;
  if (bw) {
    if (conv) st->xb.resize(size_t(cs.M * cs.K));
    st->src = memory(src_md, dnnl_engine(), conv ? (void*)st->xb.data() : d.a_bf16.p);
  } else {
    st->src = memory(src_md, dnnl_engine(), d.a_f32.p);
  }
  st->dst = memory(dst_md, dnnl_engine(), d.c.p);
  for (int cp = 0; cp < cs.copies; ++cp) {
    memory plain(wei_md, dnnl_engine(), d.b[cp].p);
    if (packed && pd.weights_desc() != wei_md) {
      memory pk(pd.weights_desc(), dnnl_engine());
      reorder(plain, pk).execute(st->s, plain, pk);
      st->s.wait();
      st->wei.push_back(pk);
    } else {
      st->wei.push_back(plain);
    }
    st->args.push_back({{DNNL_ARG_SRC, st->src}, {DNNL_ARG_WEIGHTS, st->wei.back()}, {DNNL_ARG_DST, st->dst}});
  }
  p.label = std::string("oneDNN ") + pd.impl_info_str();
  if (packed) p.label += pd.weights_desc() != wei_md ? " (packed weights)" : " (any==plain)";
  if (conv) p.label += " (x->bf16 in the call)";
  St* s = st.get();
  const int64_t n = cs.M * cs.K;
  p.run = [s, &d, conv, n](int cp) {
    if (conv) to_bf16(d.a_f32.as<float>(), s->xb.data(), n);
    s->prim.execute(s->s, s->args[cp]);
    s->s.wait();
  };
  return p;
}

// --- Eigen: C = A * B with mapped row-major/col-major matrices; bf16 via .cast<float>() (what a user writes).
static Prepared prep_eigen(Data& d, int) {
  using namespace Eigen;
  using RM = Matrix<float, Dynamic, Dynamic, RowMajor>;
  using CM = Matrix<float, Dynamic, Dynamic, ColMajor>;
  using RMb = Matrix<Eigen::bfloat16, Dynamic, Dynamic, RowMajor>;
  using CMb = Matrix<Eigen::bfloat16, Dynamic, Dynamic, ColMajor>;
  const Case& cs = *d.cs;
  Prepared p;
  p.label = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
            std::to_string(EIGEN_MINOR_VERSION) + (cs.b == DType::BF16 ? " (B.cast<float>())" : "");
  const int64_t M = cs.M, K = cs.K, N = cs.N;
  const bool bc = cs.bcol;
  if (cs.b == DType::F32) {
    p.run = [&d, M, K, N, bc](int cp) {
      Map<const RM> A(d.a_f32.as<float>(), M, K);
      Map<RM> C(d.c.as<float>(), M, N);
      if (bc)
        C.noalias() = A * Map<const CM>(d.b[cp].as<float>(), K, N);
      else
        C.noalias() = A * Map<const RM>(d.b[cp].as<float>(), K, N);
    };
  } else {
    // A is the exact f32 activation (bf16 cases hold bf16 values widened to f32): exact either way.
    p.run = [&d, M, K, N, bc](int cp) {
      Map<const RM> A(d.a_f32.as<float>(), M, K);
      Map<RM> C(d.c.as<float>(), M, N);
      auto* bp = reinterpret_cast<const Eigen::bfloat16*>(d.b[cp].as<uint16_t>());
      if (bc)
        C.noalias() = A * Map<const CMb>(bp, K, N).cast<float>();
      else
        C.noalias() = A * Map<const RMb>(bp, K, N).cast<float>();
    };
  }
  return p;
}

// --- libxsmm 1.17 JIT (column-major): C^T[N,M] = B^T[N,K] * A^T[K,M] -> kernel(B, A, C), m=N n=M k=K.
// Single-threaded by design (it is a small-matrix library: the caller parallelizes).
static Prepared prep_libxsmm(Data& d, int) {
  const Case& cs = *d.cs;
  Prepared p;
  const libxsmm_blasint m = cs.N, n = cs.M, k = cs.K, lda = cs.N, ldb = cs.K, ldc = cs.N;
  const float alpha = 1.f, beta = 0.f;
  libxsmm_smmfunction f = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, nullptr, nullptr);
  if (!f) {
    p.error = "libxsmm: no JIT kernel for this shape";
    return p;
  }
  p.label = std::string("libxsmm ") + LIBXSMM_VERSION + " " + libxsmm_get_target_arch();
  p.run = [&d, f](int cp) { f(d.b[cp].as<float>(), d.a_f32.as<float>(), d.c.as<float>()); };
  return p;
}

// --- generated kernels
static Prepared prep_morello(Data& d, int threads, const MorelloKernel* k) {
  Prepared p;
  if (!k->supported()) {
    p.error = "morello: " + k->name + "_supported() is false on this CPU";
    return p;
  }
  p.label = k->name + ": " + k->spec;
  const void* a = k->a == DType::BF16 ? d.a_bf16.p : d.a_f32.p;
  int mode = threads == 0 ? 0 : threads == 1 ? 1 : 2;
  p.run = [&d, a, mode, k](int cp) { k->run(a, d.b[cp].p, d.c.p, mode); };
  return p;
}

// --- same-process read bandwidth reference: an AVX-512 (else AVX2) sweep over the weight copies, one contiguous
// 4 KiB-aligned slice per thread, run by the same pool as the kernels' (1 thread: inline). The same sweep as
// bench/quant/sweep.c (mode 0) and as an independent sweep. (Until issue 20 it handed out 1 MiB chunks
// dynamically, so how much each thread read depended on the run: see bench/README.md "The read reference".)
__attribute__((target("avx2"))) static uint64_t sweep_avx2(const char* p, size_t bytes) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  size_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i*)(p + i)));
    s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i*)(p + i + 32)));
    s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i*)(p + i + 64)));
    s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i*)(p + i + 96)));
    s4 = _mm256_add_epi64(s4, _mm256_load_si256((const __m256i*)(p + i + 128)));
    s5 = _mm256_add_epi64(s5, _mm256_load_si256((const __m256i*)(p + i + 160)));
    s6 = _mm256_add_epi64(s6, _mm256_load_si256((const __m256i*)(p + i + 192)));
    s7 = _mm256_add_epi64(s7, _mm256_load_si256((const __m256i*)(p + i + 224)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)),
                               _mm256_add_epi64(_mm256_add_epi64(s4, s5), _mm256_add_epi64(s6, s7)));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256((__m256i*)lanes, s);
  uint64_t r = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < bytes; ++i) r += uint8_t(p[i]);
  return r;
}
__attribute__((target("avx512f"))) static uint64_t sweep_avx512(const char* p, size_t bytes) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  size_t i = 0;
  for (; i + 512 <= bytes; i += 512) {
    s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + i));
    s1 = _mm512_add_epi64(s1, _mm512_load_si512(p + i + 64));
    s2 = _mm512_add_epi64(s2, _mm512_load_si512(p + i + 128));
    s3 = _mm512_add_epi64(s3, _mm512_load_si512(p + i + 192));
    s4 = _mm512_add_epi64(s4, _mm512_load_si512(p + i + 256));
    s5 = _mm512_add_epi64(s5, _mm512_load_si512(p + i + 320));
    s6 = _mm512_add_epi64(s6, _mm512_load_si512(p + i + 384));
    s7 = _mm512_add_epi64(s7, _mm512_load_si512(p + i + 448));
  }
  __m512i s = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)),
                               _mm512_add_epi64(_mm512_add_epi64(s4, s5), _mm512_add_epi64(s6, s7)));
  uint64_t r = uint64_t(_mm512_reduce_add_epi64(s));
  for (; i < bytes; ++i) r += uint8_t(p[i]);
  return r;
}
static bool has_avx512() { return __builtin_cpu_supports("avx512f"); }
static uint64_t sweep(const char* p, size_t bytes) { return has_avx512() ? sweep_avx512(p, bytes) : sweep_avx2(p, bytes); }
static Prepared prep_bw(Data& d, int threads) {
  Prepared p;
  p.label = std::string(has_avx512() ? "AVX-512" : "AVX2") + " read sweep over the " + std::to_string(d.cs->copies) +
            " weight copies";
  const size_t bytes = d.cs->b_bytes();
  const int nt = threads >= 2 ? 2 : 1;
  const size_t per = (bytes / size_t(nt) + 4095) & ~size_t(4095);
  p.run = [&d, bytes, per, nt](int cp) {
    const char* base = d.b[cp].as<char>();
    std::atomic<uint64_t> acc{0};
    auto fn = [&](int64_t i) {
      const size_t b = per * size_t(i), e = std::min(bytes, b + per);
      if (b < e) acc.fetch_add(sweep(base + b, e - b), std::memory_order_relaxed);
    };
    if (nt == 2)
      pool2()->run(0, 2, fn);
    else
      fn(0);
    benchmark::DoNotOptimize(acc.load());
  };
  return p;
}

// --- FMA peak reference: 16 independent FMA chains in zmm registers (fp32; AVX2: 12 in ymm, leaving room
// for the constants), or vdpbf16ps chains (bf16).
constexpr int64_t kPeakTasks = 64, kPeakIters = 4096;
__attribute__((target("avx2,fma"))) static float fma_task_avx2() {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(float(i));
  const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < kPeakIters * 2; ++it) {  // half the lanes of zmm: twice the iterations
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
  }
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  return lanes[0] + lanes[7];
}
__attribute__((target("avx512f"))) static float fma_task() {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(float(i));
  const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < kPeakIters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}
__attribute__((target("avx512f,avx512bf16"))) static float dpbf16_task() {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(float(i));
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x0001);
  for (int64_t it = 0; it < kPeakIters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  }
  __m512 s = a[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}
static bool has_bf16() { return __builtin_cpu_supports("avx512bf16"); }
static Prepared prep_peak(int threads, bool bf16) {
  Prepared p;
  if (bf16 && !has_bf16()) {
    p.error = "CPU lacks the ISA of this reference";
    return p;
  }
  const bool zmm = has_avx512();
  p.label = bf16 ? "16 vdpbf16ps zmm chains" : zmm ? "16 vfmadd231ps zmm chains" : "12 vfmadd231ps ymm chains";
  p.run = [threads, bf16, zmm](int) {
    std::atomic<int> sink{0};
    auto task = [&] { return bf16 ? dpbf16_task() : zmm ? fma_task() : fma_task_avx2(); };
    auto fn = [&](int64_t) { sink.fetch_add(int(task()), std::memory_order_relaxed); };
    if (threads >= 2)
      pool2()->run(0, kPeakTasks, fn);
    else
      for (int64_t i = 0; i < kPeakTasks; ++i) fn(i);
    benchmark::DoNotOptimize(sink.load());
  };
  return p;
}

// ---------------------------------------------------------------------------------------------------------
// Per-case data and per-entry preparation are cached: Google Benchmark calls a benchmark function several
// times (iteration estimate, repetitions); entries of one case are registered together, so the data of the
// previous case is freed when the next case starts.
static std::unique_ptr<Data> g_data;
static std::map<const Entry*, Prepared> g_prepared;

static Data& data_for(const Case* cs) {
  if (!g_data || g_data->cs != cs) {
    g_prepared.clear();
    g_data.reset();
    if (cs) g_data = std::make_unique<Data>(*cs);
  }
  return *g_data;
}

static double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

static bool paired(const Entry* e) { return e->kind == 0 && e->cs && e->cs->M == 1; }
// bw_ref is timed in the paired schedule too: an untimed sweep of copy cp (in place of a kernel call), then the
// timed sweep of the copy half a rotation away, so that it measures what the paired sweeps measure (issue 20).
static bool paired_ref(const Entry* e) { return e->kind == 1 && e->cs; }

static void run_entry(benchmark::State& st, const Entry* e) {
  Prepared* pp;
  double flops = 0, bytes = 0;
  if (e->kind == 2) {
    data_for(e->cs);  // per-case peaks keep the case's data; the global ones free it
    auto it = g_prepared.find(e);
    if (it == g_prepared.end()) it = g_prepared.emplace(e, e->prepare(nullptr, e->threads)).first;
    pp = &it->second;
    const bool ymm = e->impl != "dpbf16_peak" && !has_avx512();  // 12 chains x 8 lanes, 2x the iterations
    flops = double(kPeakTasks) * kPeakIters * (ymm ? 12 * 8 * 2 : 16 * 16) * (e->impl == "dpbf16_peak" ? 4 : 2);
  } else {
    Data& d = data_for(e->cs);
    auto it = g_prepared.find(e);
    if (it == g_prepared.end()) {
      Prepared p = e->prepare(&d, e->threads);
      if (p.error.empty() && e->kind == 0) {  // check once against the reference before timing
        set_threads(e->threads);
        d.poison_c();
        p.run(0);
        p.error = d.check(e->bf16x);
      }
      it = g_prepared.emplace(e, std::move(p)).first;
    }
    pp = &it->second;
    if (e->kind == 0) {
      flops = e->cs->flops();
      bytes = e->cs->bytes();
    } else {
      bytes = double(e->cs->b_bytes());
    }
  }
  if (!pp->error.empty()) {
    st.SkipWithError(pp->error.c_str());
    return;
  }
  set_threads(e->threads);
  const int nc = e->cs && e->kind != 2 ? e->cs->copies : 1;
  int cp = 0;
  auto& run = pp->run;
  using clk = std::chrono::steady_clock;
  auto secs = [](clk::duration d) { return std::chrono::duration<double>(d).count(); };
  // Robust time: the loop is cut into batches of `batch` calls lasting >= ~25 us each; "t_med" is the median
  // over batches of the time per call. On the shared machine a preempted batch is an outlier that the median
  // drops, while Google Benchmark's own time is the mean over all iterations (preemption included).
  std::vector<double> per_call;
  if (paired(e)) {
    // GEMVs: after each timed call, an untimed read sweep of the copy half a rotation away (neither the one just
    // read, whose tail may still sit in L3, nor the next ones): a paired bandwidth reference taken under the same
    // machine load. (For OpenMP peers at 2 threads their spinning workers may slow this sweep down.)
    Prepared ref = prep_bw(*g_data, e->threads == 0 ? 2 : e->threads);
    std::vector<double> ref_t;
    for (auto _ : st) {
      auto t0 = clk::now();
      run(cp);
      auto t1 = clk::now();
      ref.run((cp + nc / 2) % nc);
      auto t2 = clk::now();
      st.SetIterationTime(secs(t1 - t0));
      per_call.push_back(secs(t1 - t0));
      ref_t.push_back(secs(t2 - t1));
      if (++cp == nc) cp = 0;
    }
    if (!ref_t.empty()) st.counters["ref_bytes"] = double(e->cs->b_bytes()) / median(ref_t);
  } else if (paired_ref(e)) {
    for (auto _ : st) {
      run(cp);  // stands for the kernel call of a paired entry
      auto t0 = clk::now();
      run((cp + nc / 2) % nc);
      auto t1 = clk::now();
      st.SetIterationTime(secs(t1 - t0));
      per_call.push_back(secs(t1 - t0));
      if (++cp == nc) cp = 0;
    }
  } else {
    int64_t batch = pp->batch;
    if (batch == 0) {  // calibrate once per entry: calls per >= 25 us
      batch = 1;
      for (;;) {
        auto t0 = clk::now();
        for (int64_t i = 0; i < batch; ++i) {
          run(cp);
          if (++cp == nc) cp = 0;
        }
        if (secs(clk::now() - t0) >= 25e-6 || batch >= (int64_t(1) << 20)) break;
        batch *= 2;
      }
      pp->batch = batch;
    }
    int64_t k = 0;
    auto tb = clk::now();
    for (auto _ : st) {
      run(cp);
      if (++cp == nc) cp = 0;
      if (++k == batch) {
        auto now = clk::now();
        per_call.push_back(secs(now - tb) / double(batch));
        tb = now;
        k = 0;
      }
    }
  }
  if (!per_call.empty()) {
    st.counters["t_med"] = median(per_call);
    st.counters["t_min"] = *std::min_element(per_call.begin(), per_call.end());
    st.counters["batches"] = double(per_call.size());
  }
  st.counters["flop_call"] = flops;
  st.counters["bytes_call"] = bytes;
  st.counters["flop"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["bytes"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(pp->label);
}

static std::vector<std::unique_ptr<Case>> g_cases;
static std::vector<std::unique_ptr<Entry>> g_entries;

static void add(const Case* cs, std::string impl, int threads, bool bf16x, int kind,
                std::function<Prepared(Data*, int)> prep) {
  g_entries.push_back(std::unique_ptr<Entry>(new Entry{cs, std::move(impl), threads, bf16x, kind, std::move(prep)}));
  const Entry* e = g_entries.back().get();
  std::string name = (cs ? cs->id() : std::string("REF/peak")) + "/" + e->impl + "/t" +
                     (threads == 0 ? std::string("d") : std::to_string(threads));
  auto* b = benchmark::RegisterBenchmark(name.c_str(), run_entry, e)->Unit(benchmark::kMicrosecond);
  if (paired(e) || paired_ref(e))
    b->UseManualTime();
  else
    b->UseRealTime();
}

static size_t l3_bytes() {
  const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return v > 0 ? size_t(v) : 0;
}

static int copies_for(size_t bytes, bool rotate) {
  if (!rotate) return 1;
  // At least 384 MiB (12x a 32 MiB L3: with 2 threads on two CCDs, 64 MiB of L3 between them, and a non-LRU
  // replacement, 128 MiB of rotation still let a third of the lines hit and reported more than DRAM
  // bandwidth), and at least twice the L3 this machine reports (480 MiB on some Xeons).
  const size_t target = std::max(size_t(384) << 20, 2 * l3_bytes());
  return int(std::max<size_t>(2, (target + bytes - 1) / bytes));
}

#include "gate_up.hpp"  // W6 (uses sweep, pool2, copies_for)

static void register_all(bool quick) {
  register_morello_kernels();
  for (int t : {1, 2}) add(nullptr, "fma_f32_peak", t, false, 2, [t](Data*, int) { return prep_peak(t, false); });
  for (int t : {1, 2}) add(nullptr, "dpbf16_peak", t, false, 2, [t](Data*, int) { return prep_peak(t, true); });

  auto mk = [](std::string w, std::string v, int64_t M, int64_t K, int64_t N, DType a, DType b, bool bcol, bool rot) {
    g_cases.push_back(std::unique_ptr<Case>(new Case{w, v, M, K, N, a, b, bcol, 1}));
    g_cases.back()->copies = copies_for(g_cases.back()->b_bytes(), rot);
    return g_cases.back().get();
  };
  std::vector<Case*> cases;
  // W1: the flagship decode GEMV, bf16 weights (64 MiB, > L3), rotated copies.
  cases.push_back(mk("W1", "f32act.col", 1, 2048, 16384, DType::F32, DType::BF16, true, true));
  cases.push_back(mk("W1", "bf16act.col", 1, 2048, 16384, DType::BF16, DType::BF16, true, true));
  if (!quick) {
    cases.push_back(mk("W1", "f32act.row", 1, 2048, 16384, DType::F32, DType::BF16, false, true));
    cases.push_back(mk("W1", "bf16act.row", 1, 2048, 16384, DType::BF16, DType::BF16, false, true));
  }
  // W2: square SGEMM
  for (int n : quick ? std::vector<int>{256, 512} : std::vector<int>{256, 512, 1024, 2048})
    cases.push_back(mk("W2", "n" + std::to_string(n), n, n, n, DType::F32, DType::F32, false, false));
  // W3: small matmuls (in cache)
  for (int n : quick ? std::vector<int>{8, 32} : std::vector<int>{8, 16, 32, 64, 128})
    cases.push_back(mk("W3", "n" + std::to_string(n), n, n, n, DType::F32, DType::F32, false, false));
  // W4: fp32 GEMV y = W x, W row-major N x K (our "matmul 1xKxN b=col"), rotated copies
  for (int n : quick ? std::vector<int>{2048} : std::vector<int>{2048, 4096})
    cases.push_back(mk("W4", "n" + std::to_string(n), 1, n, n, DType::F32, DType::F32, true, true));

  for (Case* cs : cases) {
    const bool gemv = cs->M == 1, bw16 = cs->b == DType::BF16;
    const bool bx = cs->a == DType::BF16;
    if (!gemv)  // the FMA peak again, next to this case in time (the machine's load drifts during a run)
      for (int t : {1, 2}) add(cs, "fma_peak", t, false, 2, [t](Data*, int) { return prep_peak(t, false); });
    if (cs->flops() <= 2.0 * 512 * 512 * 512 * 1.01) add(cs, "naive", 1, bx, 0, [](Data* d, int th) { return prep_naive(*d, th); });
    if (!bw16 || openblas_has_bf16())
      for (int t : {1, 2}) add(cs, "openblas", t, bw16, 0, [](Data* d, int th) { return prep_openblas(*d, th); });
    for (int t : {1, 2})
      add(cs, "onednn", t, bw16, 0, [](Data* d, int th) { return prep_onednn(*d, th, false); });
    for (int t : {1, 2})
      add(cs, "onednn_packed", t, bw16, 0, [](Data* d, int th) { return prep_onednn(*d, th, true); });
    add(cs, "eigen", 1, false, 0, [](Data* d, int th) { return prep_eigen(*d, th); });
    if (!gemv) add(cs, "eigen", 2, false, 0, [](Data* d, int th) { return prep_eigen(*d, th); });
    if (!gemv && !bw16) add(cs, "libxsmm", 1, false, 0, [](Data* d, int th) { return prep_libxsmm(*d, th); });
    for (const MorelloKernel& k : morello_kernels()) {
      int64_t M, K, N;
      bool bcol;
      if (!parse_spec(k.spec, M, K, N, bcol)) continue;
      if (M != cs->M || K != cs->K || N != cs->N || bcol != cs->bcol || k.a != cs->a || k.b != cs->b ||
          k.c != DType::F32)
        continue;
      const MorelloKernel* kp = &k;
      if (k.spec.find(" serial") != std::string::npos)  // synthesized for one thread: 1-thread rows only
        add(cs, "morello_serial", 1, false, 0, [kp](Data* d, int th) { return prep_morello(*d, th, kp); });
      else
        for (int t : {1, 2, 0})
          add(cs, "morello", t, false, 0, [kp](Data* d, int th) { return prep_morello(*d, th, kp); });
    }
    // bw_ref last (issue 20): right after the generated kernels, on buffers in the state they saw (it ran first,
    // on freshly written buffers, minutes before the paired sweeps: how the VM backs a page can change meanwhile)
    if (gemv)
      for (int t : {1, 2}) add(cs, "bw_ref", t, false, 1, [](Data* d, int th) { return prep_bw(*d, th); });
  }
#ifdef BENCH_HAVE_W6
  w6::register_all(quick);
#endif
}

}  // namespace bench

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick")
      quick = true;
    else
      args.push_back(argv[i]);
  }
  int n = int(args.size());
  libxsmm_init();
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
  benchmark::AddCustomContext("libxsmm_target", libxsmm_get_target_arch());
  benchmark::AddCustomContext("openblas_bf16", bench::openblas_has_bf16()
                                                   ? "cblas_sbgemv/sbgemm available"
                                                   : "none: cblas_sbgemv/sbgemm not exported (built without "
                                                     "BUILD_BFLOAT16), so OpenBLAS is absent from W1");
  {
    const dnnl_version_t* v = dnnl_version();
    benchmark::AddCustomContext("onednn_version", std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                                                      std::to_string(v->patch) + " (" + v->hash + ")");
  }
  bench::register_all(quick);
  benchmark::AddCustomContext("morello_kernels", std::to_string(bench::morello_kernels().size()));
  benchmark::AddCustomContext("bench_mode", quick ? "quick" : "full");
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  bench::g_prepared.clear();
  bench::g_data.reset();
  libxsmm_finalize();
  return 0;
}
