// One Gemma 3 4B decoder layer's decode GEMVs with synthesized kernels (see layer.hpp): checks every output
// against straightforward loops, then times the layer against the same layer unfused and against oneDNN.
//
//   gemma_layer [--check-only | --bench] [--min-time SECONDS] [--threads LIST]
//     (default)     check, then the median time per layer for 1 and 2 threads (--threads 1,2), weight GB/s
//     --check-only  the checks alone (the ctest); exit 0 ok, 1 mismatch, 77 CPU lacks the kernels' ISA
//     --bench       check, then the fused gate/up GEMV alone against a read sweep over its two weight
//                   matrices and against two GEMVs plus a separate GELU*up pass
//     --min-time    seconds of interleaved rounds per thread count (default 3)
// Threads: the kernels' pf overload on a pool of N std::threads (harness::Pool); oneDNN: omp_set_num_threads.
// The default overload (not timed) uses MORELLO_NUM_THREADS or every CPU the process may use.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "harness.hpp"
#include "layer.hpp"
#include "reference.hpp"
#ifdef GEMMA_LAYER_HAVE_ONEDNN
#include "onednn_layer.hpp"
#endif

namespace {

using harness::Contender;
using reference::Check;

struct Options {
  bool check_only = false, bench = false;
  double min_time = 3.0;
  std::vector<int> threads{1, 2};
};

struct SerialFor {
  template <class F>
  void operator()(std::size_t begin, std::size_t end, F&& fn) const {
    for (std::size_t i = begin; i < end; ++i) fn(i);
  }
};

void print_kernels() {
  std::printf("kernels (bf16 weights as N rows of K, f32 activations):\n");
  auto row = [](const char* what, const char* spec, const char* isa, int threads) {
    std::printf("  %-9s %-54s ISA %s, synthesized for %d threads\n", what, spec, isa, threads);
  };
  using namespace gemma;
  row("qkv", qkv_info::spec, qkv_info::isa, qkv_info::threads);
  row("attn_out", attn_out_info::spec, attn_out_info::isa, attn_out_info::threads);
  row("gate_up", gate_up_info::spec, gate_up_info::isa, gate_up_info::threads);
  row("down", down_info::spec, down_info::isa, down_info::threads);
  row("ff_proj", ff_proj_info::spec, ff_proj_info::isa, ff_proj_info::threads);
  std::printf("  (ff_proj: gate and up one at a time, for the unfused layer)\n");
}

// ---- checks -------------------------------------------------------------------------------------------------
std::vector<Check> check_layer(const std::string& impl, const layer::Weights& w, const layer::Activations& a,
                               bool bf16_activations) {
  using namespace layer;
  const bool b = bf16_activations;
  return {
      reference::check_gemv(impl + ": qkv", a.x.data(), w.qkv.data(), kModel, kQKV, a.qkv.data(), b),
      reference::check_gemv(impl + ": attn_out", a.attn.data(), w.attn_out.data(), kQ, kModel, a.o.data(), b),
      reference::check_gated(impl + ": gelu(gate)*up", a.x.data(), w.gate.data(), w.up.data(), kModel, kFF,
                             a.h.data(), b),
      reference::check_gemv(impl + ": down (on its own gated result)", a.h.data(), w.down.data(), kFF, kModel,
                            a.y.data(), b),
  };
}

bool report(const std::vector<Check>& checks) {
  bool ok = true;
  for (const Check& c : checks) {
    c.print();
    ok = ok && c.ok();
  }
  return ok;
}

bool same_outputs(const layer::Activations& a, const layer::Activations& b) {
  auto eq = [](const harness::Buffer<float>& x, const harness::Buffer<float>& y) {
    return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  return eq(a.qkv, b.qkv) && eq(a.o, b.o) && eq(a.h, b.h) && eq(a.y, b.y);
}

bool check_gelu() {
  const std::vector<float> x = reference::gelu_inputs(4096);
  std::vector<float> plain(x.size());
  for (size_t i = 0; i < x.size(); ++i) plain[i] = reference::gelu(x[i]);
  std::vector<Check> checks{reference::check_gelu("GELU of the plain loops (tanhf) vs double", x.data(),
                                                  plain.data(), int(x.size()))};
  static_assert(gemma::gelu_probe_info::k == 1 && gemma::gelu_probe_info::n == 4096, "C = gelu(1 * B)");
  std::vector<float> got(x.size());
  const float one = 1.0f;
  gemma::gelu_probe(&one, x.data(), got.data());
  checks.push_back(reference::check_gelu("GELU epilogue (matmul 1x1x4096 act=gelu) vs double", x.data(),
                                         got.data(), int(x.size())));
  return report(checks);
}

bool run_checks(const layer::Weights& w) {
  std::printf("check: every output against the plain loops (tolerance: see reference.hpp)\n");
  harness::Pool pool(2);
  layer::Activations a(7), b(7);
  layer::run_fused(w, a, SerialFor());
  bool ok = report(check_layer("fused", w, a, false));
  layer::run_fused(w, b, harness::PoolFor{&pool});
  const bool same2 = same_outputs(a, b);
  std::printf("  %-52s %s\n", "fused on 2 threads: bitwise the 1-thread result", same2 ? "ok" : "FAIL");
  ok = ok && same2;
  layer::run_unfused(w, b, SerialFor());
  ok = report(check_layer("unfused", w, b, false)) && ok;
#ifdef GEMMA_LAYER_HAVE_ONEDNN
  onednn::Layer dn({&w}, b, 2);
  dn.run(0);
  ok = report(check_layer("oneDNN", w, b, dn.bf16_activations())) && ok;
#else
  std::printf("  oneDNN: not built (CMake did not find it)\n");
#endif
  ok = check_gelu() && ok;
  std::printf("check: %s\n", ok ? "ok" : "FAIL");
  return ok;
}

// ---- timing -------------------------------------------------------------------------------------------------
void print_table(int threads, int rounds, const std::vector<Contender>& cs, double bytes, size_t base,
                 size_t sweep) {
  const double tb = cs[base].median(), ts = cs[sweep].median();
  std::printf("\n%d thread%s, median of %d interleaved rounds:\n", threads, threads > 1 ? "s" : "", rounds);
  std::printf("  %-58s %9s %9s %9s %9s\n", "", "ms", "GB/s", "/ fused", "of sweep");
  for (const Contender& c : cs) {
    const double t = c.median();
    std::printf("  %-58s %9.3f %9.1f %8.2fx %9.3f\n", c.name.c_str(), t * 1e3, bytes / t * 1e-9, t / tb, ts / t);
  }
}

int time_layer(const Options& o, const std::vector<std::unique_ptr<layer::Weights>>& w) {
  const int copies = int(w.size());
  std::printf("\ntime per layer: %.1f MiB of bf16 weights, %d copies rotated (every call reads from DRAM);\n"
              "GB/s of weights; '/ fused': time / the fused layer's; 'of sweep': read-sweep time / time\n",
              layer::Weights::bytes() / (1 << 20), copies);
  layer::Activations a(7);
  for (int t : o.threads) {
    harness::Pool pool(t);
    harness::PoolFor pf{&pool};
    std::string notes;
    std::vector<Contender> cs;
    cs.push_back({"morello, fused gate/up (gated)",
                  [&](int c) { layer::run_fused(*w[size_t(c)], a, pf); }});
    cs.push_back({"(a) morello unfused: gate, up GEMVs + GELU*up loop",
                  [&](int c) { layer::run_unfused(*w[size_t(c)], a, pf); }});
#ifdef GEMMA_LAYER_HAVE_ONEDNN
    std::vector<const layer::Weights*> ptrs;
    for (const auto& p : w) ptrs.push_back(p.get());
    onednn::Layer dn(ptrs, a, t);
    cs.push_back({"(b) oneDNN, post-ops gelu_tanh * up", [&](int c) { dn.run(c); }, true});
    notes = "  (b): " + dn.label() + "\n";
#endif
    cs.push_back({std::string("read sweep over the layer's weights (") + harness::sweep_isa() + ")",
                  [&](int c) { layer::sweep(pool, *w[size_t(c)]); }});
    const int rounds = harness::measure(cs, copies, o.min_time);
    print_table(t, rounds, cs, layer::Weights::bytes(), 0, cs.size() - 1);
    std::printf("%s", notes.c_str());
  }
#ifndef GEMMA_LAYER_HAVE_ONEDNN
  std::printf("\n(b) oneDNN: not built (CMake did not find it; Debian: apt install libdnnl-dev ocl-icd-opencl-dev)\n");
#endif
  return 0;
}

// The fused gate/up GEMV alone (issue 22's benchmark): goal >= 0.95 of the sweep, faster than unfused.
int bench_gate_up(const Options& o) {
  using layer::kFF, layer::kModel;
  struct Pair {
    harness::Buffer<uint16_t> gate, up;
  };
  const double bytes = 2.0 * 2.0 * kModel * kFF;
  const int copies = harness::copies_for(size_t(bytes));
  std::vector<Pair> w;
  for (int c = 0; c < copies; ++c)
    w.push_back({layer::random_weights(kModel, kFF, 100 + 2 * c), layer::random_weights(kModel, kFF, 101 + 2 * c)});
  layer::Activations a(11);
  std::printf("\nfused gate/up GEMV: h = gelu(x Wgate) * (x Wup), 1x2560x10240, 2 x %.1f MiB bf16, %d copies\n",
              bytes / 2 / (1 << 20), copies);
  auto unfused = [&](int c, auto& pf) {
    gemma::ff_proj(a.x.data(), w[size_t(c)].gate.data(), a.g.data(), pf);
    gemma::ff_proj(a.x.data(), w[size_t(c)].up.data(), a.u.data(), pf);
    layer::gelu_mul(a.g.data(), a.u.data(), a.h.data(), kFF, pf);
  };
  auto fused = [&](int c, auto& pf) {
    gemma::gate_up(a.x.data(), w[size_t(c)].gate.data(), w[size_t(c)].up.data(), a.h.data(), pf);
  };
  SerialFor serial;
  fused(0, serial);
  if (!report({reference::check_gated("bench: fused gate/up on copy 0", a.x.data(), w[0].gate.data(),
                                      w[0].up.data(), kModel, kFF, a.h.data(), false)}))
    return 1;
  bool goals = true;
  for (int t : o.threads) {
    harness::Pool pool(t);
    harness::PoolFor pf{&pool};
    std::vector<Contender> cs;
    cs.push_back({"morello gated (fused)",
                  [&](int c) { fused(c, pf); }});
    cs.push_back({"2 x morello GEMV + GELU*up pass", [&](int c) { unfused(c, pf); }});
    cs.push_back({std::string("read sweep over both matrices (") + harness::sweep_isa() + ")", [&](int c) {
                    volatile uint64_t s = harness::sweep(pool, w[size_t(c)].gate.data(), size_t(bytes / 2)) +
                                          harness::sweep(pool, w[size_t(c)].up.data(), size_t(bytes / 2));
                    (void)s;
                  }});
    const int rounds = harness::measure(cs, copies, o.min_time);
    print_table(t, rounds, cs, bytes, 0, 2);
    const double of_sweep = cs[2].median() / cs[0].median(), speedup = cs[1].median() / cs[0].median();
    std::printf("  goal: fused >= 0.95 of the sweep: %.3f %s; fused faster than unfused: %.2fx %s\n", of_sweep,
                of_sweep >= 0.95 ? "MET" : "NOT MET", speedup, speedup > 1.0 ? "MET" : "NOT MET");
    goals = goals && of_sweep >= 0.95 && speedup > 1.0;
  }
  std::printf("\ngoals %s\n", goals ? "MET" : "NOT MET");
  return 0;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--check-only") {
      o.check_only = true;
    } else if (arg == "--bench") {
      o.bench = true;
    } else if (arg == "--min-time" && i + 1 < argc) {
      o.min_time = std::atof(argv[++i]);
    } else if (arg == "--threads" && i + 1 < argc) {
      o.threads.clear();
      std::stringstream ss(argv[++i]);
      for (std::string t; std::getline(ss, t, ',');) o.threads.push_back(std::max(1, std::atoi(t.c_str())));
    } else {
      return false;
    }
  }
  return !o.threads.empty();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines appear in order with stderr, and before a crash
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: %s [--check-only | --bench] [--min-time SECONDS] [--threads 1,2]\n", argv[0]);
    return 2;
  }
  std::printf("Gemma 3 4B decoder layer, decode GEMVs (d_model %d, ff %d, %d query heads, %d KV heads of %d)\n",
              layer::kModel, layer::kFF, layer::kHeads, layer::kKVHeads, layer::kHeadDim);
  print_kernels();
  if (!layer::kernels_supported()) {
    std::printf("SKIP: this CPU lacks the instructions of the kernels' ISA (%s)\n", gemma::qkv_info::isa);
    return 77;
  }
  const int copies = o.check_only || o.bench ? 1 : harness::copies_for(size_t(layer::Weights::bytes()));
  std::vector<std::unique_ptr<layer::Weights>> w;
  for (int c = 0; c < copies; ++c) w.push_back(std::make_unique<layer::Weights>(uint64_t(c + 1)));
  if (!run_checks(*w[0])) return 1;
  if (o.check_only) return 0;
  return o.bench ? bench_gate_up(o) : time_layer(o, w);
}
