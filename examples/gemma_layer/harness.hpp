// Measurement pieces of the example: bf16 helpers, huge-page buffers, a small thread pool with the
// parallel-for the kernels' pf overload takes, a read sweep (the bandwidth reference) and interleaved timing.
// The pool and the sweep follow bench/src/pool.hpp and bench/src/bench.cpp.
#pragma once
#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace harness {

inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint16_t f32_to_bf16(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// xorshift64*: uniform floats in [-1, 1), fast enough to fill a few hundred MiB of weights.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float uniform() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return float(double((s * 2685821657736338717ull) >> 40) / double(1ull << 23) - 1.0);
  }
};

// A 2 MiB aligned, huge-page advised buffer of T (weights: fewer TLB misses, as an engine would map them).
template <class T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) : n_(n) {
    const size_t huge = size_t(2) << 20, bytes = (n * sizeof(T) + huge - 1) / huge * huge;
    p_ = static_cast<T*>(std::aligned_alloc(huge, bytes ? bytes : huge));
    if (!p_) throw std::bad_alloc();
    madvise(p_, bytes, MADV_HUGEPAGE);
    std::memset(static_cast<void*>(p_), 0, bytes);
  }
  Buffer(Buffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  ~Buffer() { std::free(p_); }
  T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// A persistent pool of N threads (the caller is one of them) with a dynamic parallel-for. Workers spin
// briefly after a job, then sleep, so that an idle pool does not take a core from the next measurement.
class Pool {
 public:
  explicit Pool(int nthreads) : nthreads_(nthreads) {
    for (int t = 1; t < nthreads_; ++t) workers_.emplace_back([this] { worker(); });
  }
  ~Pool() {
    stop_.store(true);
    gen_.fetch_add(1, std::memory_order_release);
    gen_.notify_all();
    for (auto& w : workers_) w.join();
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  int size() const { return nthreads_; }

  template <class F>
  void run(int64_t begin, int64_t end, F& fn) {
    if (end <= begin) return;
    if (nthreads_ == 1 || end - begin == 1) {
      for (int64_t i = begin; i < end; ++i) fn(i);
      return;
    }
    ctx_ = static_cast<void*>(&fn);
    call_ = [](void* c, int64_t i) { (*static_cast<F*>(c))(i); };
    end_ = end;
    next_.store(begin, std::memory_order_relaxed);
    pending_.store(int(workers_.size()), std::memory_order_relaxed);
    gen_.fetch_add(1, std::memory_order_release);
    if (sleeping_.load(std::memory_order_acquire) > 0) gen_.notify_all();
    drain();
    const uint64_t t0 = __rdtsc();
    for (;;) {
      const int p = pending_.load(std::memory_order_acquire);
      if (p == 0) break;
      if (__rdtsc() - t0 < kSpinTicks) {
        _mm_pause();
      } else {
        caller_sleeping_.store(true);
        if (pending_.load(std::memory_order_acquire) == p) pending_.wait(p, std::memory_order_acquire);
        caller_sleeping_.store(false);
      }
    }
  }

 private:
  static constexpr uint64_t kSpinTicks = 50000;  // ~20 us spinning before sleeping
  void drain() {
    for (;;) {
      const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= end_) break;
      call_(ctx_, i);
    }
  }
  void worker() {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g;
      uint64_t t0 = __rdtsc();
      while ((g = gen_.load(std::memory_order_acquire)) == seen) {
        if (__rdtsc() - t0 < kSpinTicks) {
          _mm_pause();
        } else {
          sleeping_.fetch_add(1);
          if (gen_.load(std::memory_order_acquire) == seen) gen_.wait(seen, std::memory_order_acquire);
          sleeping_.fetch_sub(1);
          t0 = __rdtsc();
        }
      }
      seen = g;
      if (stop_.load()) return;
      drain();
      pending_.fetch_sub(1, std::memory_order_acq_rel);
      if (caller_sleeping_.load()) pending_.notify_all();
    }
  }

  int nthreads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> gen_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> caller_sleeping_{false};
  void* ctx_ = nullptr;
  void (*call_)(void*, int64_t) = nullptr;
  int64_t end_ = 0;
};

// The parallel-for handed to the kernels: pf(begin, end, fn) calls fn(i) for every i, on the pool.
struct PoolFor {
  Pool* pool;
  template <class I, class F>
  void operator()(I begin, I end, F&& fn) const {
    auto g = [&fn](int64_t i) { fn(static_cast<I>(i)); };
    pool->run(static_cast<int64_t>(begin), static_cast<int64_t>(end), g);
  }
};

// ---- the bandwidth reference: a vectorized sum over the bytes (AVX-512 where the CPU has it, else AVX2)
__attribute__((target("avx2"))) inline uint64_t sweep_avx2(const char* p, size_t bytes) {
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
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)),
                                     _mm256_add_epi64(_mm256_add_epi64(s4, s5), _mm256_add_epi64(s6, s7)));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256((__m256i*)lanes, s);
  uint64_t r = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < bytes; ++i) r += uint8_t(p[i]);
  return r;
}
__attribute__((target("avx512f"))) inline uint64_t sweep_avx512(const char* p, size_t bytes) {
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
  const __m512i s = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)),
                                     _mm512_add_epi64(_mm512_add_epi64(s4, s5), _mm512_add_epi64(s6, s7)));
  alignas(64) uint64_t lanes[8];  // (not _mm512_reduce_add_epi64: GCC 12 warns -Wuninitialized inside it)
  _mm512_store_si512(lanes, s);
  uint64_t r = 0;
  for (uint64_t v : lanes) r += v;
  for (; i < bytes; ++i) r += uint8_t(p[i]);
  return r;
}
inline bool has_avx512() { return __builtin_cpu_supports("avx512f"); }
inline const char* sweep_isa() { return has_avx512() ? "AVX-512" : "AVX2"; }

// Sums `bytes` bytes at p (64-byte aligned) in 1 MiB chunks handed out by the pool.
inline uint64_t sweep(Pool& pool, const void* p, size_t bytes) {
  const char* base = static_cast<const char*>(p);
  const size_t chunk = size_t(1) << 20;
  std::atomic<uint64_t> acc{0};
  const bool wide = has_avx512();
  auto fn = [&](int64_t i) {
    const size_t off = size_t(i) * chunk, n = std::min(chunk, bytes - off);
    acc.fetch_add(wide ? sweep_avx512(base + off, n) : sweep_avx2(base + off, n), std::memory_order_relaxed);
  };
  pool.run(0, int64_t((bytes + chunk - 1) / chunk), fn);
  return acc.load();
}

// ---- timing: contenders run interleaved, round after round, each call on the next weight copy, so that all
// see the same machine load (the machine may be shared) and every call reads its weights from DRAM.
struct Contender {
  std::string name;
  std::function<void(int copy)> run;
  bool openmp = false;  // after an OpenMP call, wait (untimed) until its spinning workers went to sleep
  std::vector<double> times;
  double median() const {
    std::vector<double> t = times;
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return t[t.size() / 2];
  }
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// At least min_rounds rounds and min_time seconds; returns the number of rounds.
inline int measure(std::vector<Contender>& cs, int copies, double min_time, int min_rounds = 5) {
  int copy = 0;
  for (auto& c : cs) c.run(copy = (copy + 1) % copies);  // warm-up: page faults, pools, JIT
  const auto start = std::chrono::steady_clock::now();
  int rounds = 0;
  while (rounds < min_rounds || seconds_since(start) < min_time) {
    for (auto& c : cs) {
      copy = (copy + 1) % copies;
      const auto t0 = std::chrono::steady_clock::now();
      c.run(copy);
      c.times.push_back(seconds_since(t0));
      if (c.openmp) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
    ++rounds;
  }
  return rounds;
}

// Weight copies to rotate: at least 384 MiB and twice the L3 (as bench/), so that no call hits in the cache.
inline int copies_for(size_t bytes) {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const size_t target = std::max(size_t(384) << 20, 2 * size_t(l3 > 0 ? l3 : 0));
  return int(std::max<size_t>(2, (target + bytes - 1) / bytes));
}

}  // namespace harness
