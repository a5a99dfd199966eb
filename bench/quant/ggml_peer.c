// ggml peer of the quantized-weights benchmark: y[M,N] = x[M,K] * W[N,K]^T through ggml's own library (a ggml
// graph with one ggml_mul_mat per weight copy, computed by the CPU backend, which quantizes x to Q8_0 inside the
// call, as llama.cpp does). With `repack`, the weights live in the CPU backend's "extra" (repack) buffer type:
// ggml_backend_tensor_set converts Q4_0 to the interleaved Q4_0x8 layout that llama.cpp uses at load time.
// Built by bench/quant/run.py against the ggml of bench/quant/build_ggml.sh, loaded with ctypes.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

typedef struct {
  ggml_backend_t be;
  struct ggml_context *wctx, *gctx;
  ggml_backend_buffer_t wbuf, gbuf;
  int ncopies, nm;
  struct ggml_tensor **x, **w, **y;  // x[m], w[copy], y[m * ncopies + copy]
  struct ggml_cgraph** gf;           // gf[m * ncopies + copy]
  char label[128];
} ggml_peer;

static ggml_backend_buffer_type_t repack_buft(ggml_backend_t be) {
  ggml_backend_dev_t dev = ggml_backend_get_device(be);
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
  ggml_backend_dev_get_extra_bufts_t get =
      (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
  if (!get) return NULL;
  for (ggml_backend_buffer_type_t* b = get(dev); b && *b; ++b)
    if (strstr(ggml_backend_buft_name(*b), "REPACK")) return *b;
  return NULL;
}

// type: 8 = Q8_0, 2 = Q4_0 (ggml_type values); one graph per (M in Ms, copy), the weight copies shared.
// Returns NULL when ggml cannot do it (no repack buffer type).
ggml_peer* ggml_peer_new(int type, int nm, const int64_t* Ms, int64_t K, int64_t N, int ncopies, int repack) {
  ggml_peer* p = calloc(1, sizeof *p);
  p->be = ggml_backend_cpu_init();
  p->ncopies = ncopies;
  p->nm = nm;
  ggml_backend_buffer_type_t buft = repack ? repack_buft(p->be) : ggml_backend_cpu_buffer_type();
  if (!buft) {
    ggml_backend_free(p->be);
    free(p);
    return NULL;
  }
  struct ggml_init_params wp = {ggml_tensor_overhead() * (size_t)(ncopies + 1), NULL, true};
  p->wctx = ggml_init(wp);
  p->w = calloc((size_t)ncopies, sizeof *p->w);
  for (int c = 0; c < ncopies; ++c) p->w[c] = ggml_new_tensor_2d(p->wctx, (enum ggml_type)type, K, N);
  p->wbuf = ggml_backend_alloc_ctx_tensors_from_buft(p->wctx, buft);
  ggml_backend_buffer_set_usage(p->wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
  const size_t ng = (size_t)nm * (size_t)ncopies;
  struct ggml_init_params gp = {ggml_tensor_overhead() * (ng + (size_t)nm + 2) + ggml_graph_overhead() * ng, NULL, true};
  p->gctx = ggml_init(gp);
  p->x = calloc((size_t)nm, sizeof *p->x);
  p->y = calloc(ng, sizeof *p->y);
  p->gf = calloc(ng, sizeof *p->gf);
  for (int m = 0; m < nm; ++m) {
    p->x[m] = ggml_new_tensor_2d(p->gctx, GGML_TYPE_F32, K, Ms[m]);
    for (int c = 0; c < ncopies; ++c) {
      const size_t g = (size_t)m * (size_t)ncopies + (size_t)c;
      p->y[g] = ggml_mul_mat(p->gctx, p->w[c], p->x[m]);
      p->gf[g] = ggml_new_graph(p->gctx);
      ggml_build_forward_expand(p->gf[g], p->y[g]);
    }
  }
  p->gbuf = ggml_backend_alloc_ctx_tensors(p->gctx, p->be);
  strncpy(p->label, ggml_backend_buft_name(buft), sizeof p->label - 1);
  return p;
}

const char* ggml_peer_label(ggml_peer* p) { return p->label; }
size_t ggml_peer_weight_bytes(ggml_peer* p) { return ggml_nbytes(p->w[0]); }
// The copy's bytes as ggml holds them (host memory for the CPU and repack buffers): the read sweep's input.
const void* ggml_peer_weight_ptr(ggml_peer* p, int copy) { return p->w[copy]->data; }

// Copies one weight copy in ggml's row layout (N rows of K/32 blocks); the repack buffer converts it here.
void ggml_peer_set_weights(ggml_peer* p, int copy, const void* src) {
  ggml_backend_tensor_set(p->w[copy], src, 0, ggml_nbytes(p->w[copy]));
}
void ggml_peer_set_x(ggml_peer* p, int m, const float* x) { ggml_backend_tensor_set(p->x[m], x, 0, ggml_nbytes(p->x[m])); }
void ggml_peer_get_y(ggml_peer* p, int m, int copy, float* y) {
  struct ggml_tensor* t = p->y[(size_t)m * (size_t)p->ncopies + (size_t)copy];
  ggml_backend_tensor_get(t, y, 0, ggml_nbytes(t));
}

int ggml_peer_run(ggml_peer* p, int m, int copy, int threads) {
  ggml_backend_cpu_set_n_threads(p->be, threads);
  return (int)ggml_backend_graph_compute(p->be, p->gf[(size_t)m * (size_t)p->ncopies + (size_t)copy]);
}

void ggml_peer_free(ggml_peer* p) {
  if (!p) return;
  ggml_backend_buffer_free(p->gbuf);
  ggml_backend_buffer_free(p->wbuf);
  ggml_free(p->gctx);
  ggml_free(p->wctx);
  ggml_backend_free(p->be);
  free(p->w);
  free(p->x);
  free(p->y);
  free(p->gf);
  free(p);
}
