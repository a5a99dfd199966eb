// W6: the fused gate/up GEMV of issue 22, h = gelu(x·Wgate) ⊙ (x·Wup), 1x2560x10240, bf16 weights stored N×K
// (Gemma 3 4B's FFN): the generated `gated` kernel against two generated GEMVs plus a separate GELU·up pass,
// and against the read sweep over both weight matrices, in interleaved rounds (each round runs the three, each
// call on the next weight copy; copies rotated so that every call reads its weights from DRAM). One benchmark
// per thread count, "W6/gate_up.bf16/interleaved/t<T>"; its counters are the medians over the rounds of one
// repetition (seconds per call): fused_s, unfused_s, sweep_s (report.py: the medians over the repetitions).
// Included by bench.cpp inside namespace bench, after its sweep (one contiguous slice per thread, as bw_ref).
#pragma once

#ifdef BENCH_HAVE_W6
namespace w6 {  // inside namespace bench

constexpr int64_t K = 2560, N = 10240;
constexpr size_t kMatBytes = size_t(K) * N * 2;

struct Weights {
  Buf gate, up;
};
struct State {
  std::vector<Weights> w;
  std::vector<float> x, g, u, h;
};

inline float gelu(float v) {  // tanh approximation, as the kernels' and Gemma's
  return 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
}

static State& state(int copies) {
  static std::unique_ptr<State> s;
  if (s) return *s;
  s.reset(new State);
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  auto uniform = [&seed] {  // xorshift64*: fast enough for a few hundred MiB
    seed ^= seed >> 12, seed ^= seed << 25, seed ^= seed >> 27;
    return float(double((seed * 2685821657736338717ull) >> 40) / double(1ull << 23) - 1.0);
  };
  for (int c = 0; c < copies; ++c) {  // distinct random data per copy (identical pages may be merged)
    Weights w{Buf(kMatBytes), Buf(kMatBytes)};
    for (Buf* b : {&w.gate, &w.up})
      for (size_t i = 0; i < size_t(K) * N; ++i) b->as<uint16_t>()[i] = f32_to_bf16(uniform());
    s->w.push_back(std::move(w));
  }
  s->x.resize(K), s->g.resize(N), s->u.resize(N), s->h.resize(N);
  for (float& v : s->x) v = uniform();
  return *s;
}

// The fused output of copy 0 against double-precision sums, through GELU's slope (|gelu'| < 1.13).
static std::string check(State& s) {
  const float* x = s.x.data();
  for (int64_t n = 0; n < N; ++n) {
    const uint16_t* g = s.w[0].gate.as<uint16_t>() + n * K;
    const uint16_t* u = s.w[0].up.as<uint16_t>() + n * K;
    double sg = 0, su = 0, ag = 0, au = 0;
    for (int64_t k = 0; k < K; ++k) {
      sg += double(x[k]) * bf16_to_f32(g[k]), su += double(x[k]) * bf16_to_f32(u[k]);
      ag += std::fabs(double(x[k]) * bf16_to_f32(g[k])), au += std::fabs(double(x[k]) * bf16_to_f32(u[k]));
    }
    const double ref = double(gelu(float(sg))) * su;
    const double tol = 2e-4 * (1.13 * ag * std::fabs(su) + au * std::fabs(gelu(float(sg)))) + 1e-6;
    if (!(std::fabs(s.h[n] - ref) <= tol))
      return "WRONG RESULT at h[" + std::to_string(n) + "]: " + std::to_string(s.h[n]) + " vs " + std::to_string(ref);
  }
  return "";
}

static double median_of(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

static void run(benchmark::State& st, int threads, bool quick) {
  const int copies = copies_for(2 * kMatBytes, true);
  State& s = state(copies);
  SerialPF serial;
  PoolPF pool{pool2()};
  auto fused = [&](int c) {
    const Weights& w = s.w[size_t(c)];
    if (threads == 1)
      morello::w6_gate_up(s.x.data(), w.gate.as<uint16_t>(), w.up.as<uint16_t>(), s.h.data(), serial);
    else
      morello::w6_gate_up(s.x.data(), w.gate.as<uint16_t>(), w.up.as<uint16_t>(), s.h.data(), pool);
  };
  auto unfused = [&](int c) {
    const Weights& w = s.w[size_t(c)];
    float *g = s.g.data(), *u = s.u.data(), *h = s.h.data();
    auto pass = [g, u, h](int64_t i) {  // the elementwise GELU·up pass, in blocks of 1024 outputs
      for (int64_t j = i * 1024; j < std::min(N, (i + 1) * 1024); ++j) h[j] = gelu(g[j]) * u[j];
    };
    if (threads == 1) {
      morello::w6_proj(s.x.data(), w.gate.as<uint16_t>(), g, serial);
      morello::w6_proj(s.x.data(), w.up.as<uint16_t>(), u, serial);
      for (int64_t i = 0; i < N / 1024; ++i) pass(i);
    } else {
      morello::w6_proj(s.x.data(), w.gate.as<uint16_t>(), g, pool);
      morello::w6_proj(s.x.data(), w.up.as<uint16_t>(), u, pool);
      pool2()->run(0, N / 1024, pass);
    }
  };
  auto sweep_both = [&](int c) {  // both matrices, one contiguous slice of each per thread
    const size_t per = (kMatBytes / size_t(threads) + 4095) & ~size_t(4095);
    std::atomic<uint64_t> acc{0};
    auto fn = [&](int64_t i) {
      const size_t b = per * size_t(i), e = std::min(kMatBytes, b + per);
      if (b < e)
        acc.fetch_add(sweep(s.w[size_t(c)].gate.as<char>() + b, e - b) + sweep(s.w[size_t(c)].up.as<char>() + b, e - b),
                      std::memory_order_relaxed);
    };
    if (threads == 2)
      pool2()->run(0, 2, fn);
    else
      fn(0);
    benchmark::DoNotOptimize(acc.load());
  };
  unfused(0);
  fused(0);
  if (std::string err = check(s); !err.empty()) {
    st.SkipWithError(err.c_str());
    for (auto _ : st) {
    }
    return;
  }
  using clock = std::chrono::steady_clock;
  const double min_s = quick ? 0.3 : 3.0;
  const int min_rounds = quick ? 5 : 15;
  std::vector<double> tf, tu, ts;
  int cp = 0;
  for (auto _ : st) {
    const auto start = clock::now();
    while (int(tf.size()) < min_rounds || std::chrono::duration<double>(clock::now() - start).count() < min_s) {
      const std::function<void(int)> fns[3] = {fused, unfused, sweep_both};
      std::vector<double>* outs[3] = {&tf, &tu, &ts};
      for (int i = 0; i < 3; ++i) {
        cp = (cp + 1) % copies;
        const auto t0 = clock::now();
        fns[i](cp);
        outs[i]->push_back(std::chrono::duration<double>(clock::now() - t0).count());
      }
    }
    st.SetIterationTime(median_of(tf));
  }
  st.counters["fused_s"] = median_of(tf);
  st.counters["unfused_s"] = median_of(tu);
  st.counters["sweep_s"] = median_of(ts);
  st.counters["rounds"] = double(tf.size());
  st.counters["bytes_call"] = 2.0 * kMatBytes;
  st.SetLabel(std::to_string(copies) + " weight copies; sweep " + (has_avx512() ? "AVX-512" : "AVX2"));
}

inline void register_all(bool quick) {
  for (int t : {1, 2})
    benchmark::RegisterBenchmark(("W6/gate_up.bf16/interleaved/t" + std::to_string(t)).c_str(),
                                 [t, quick](benchmark::State& st) { run(st, t, quick); })
        ->Unit(benchmark::kMillisecond)
        ->Iterations(1)
        ->UseManualTime();
}

}  // namespace w6
#endif
