// A tiny persistent thread pool with a parallel-for, used for the 2-thread runs of the generated kernels
// (through their `pf(begin, end, fn)` overload) and of the bandwidth / FMA references.
// The calling thread takes part; workers spin briefly after a job, then sleep on an atomic wait, so an idle
// pool does not steal the second core from single-threaded peers.
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>
#include <immintrin.h>

namespace bench {

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

  // Runs fn(i) for i in [begin, end), tasks handed out dynamically to all threads; returns when all are done.
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
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    gen_.fetch_add(1, std::memory_order_release);
    if (sleeping_.load(std::memory_order_acquire) > 0) gen_.notify_all();
    drain();
    // Spin briefly, then sleep: on a loaded 2-core machine a spinning caller would keep the worker off the CPU.
    const uint64_t t0 = __rdtsc();
    for (;;) {
      int p = pending_.load(std::memory_order_acquire);
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
  static constexpr uint64_t kSpinTicks = 50000;  // ~20 us of TSC ticks spinning before sleeping / yielding
  void drain() {
    for (;;) {
      int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= end_) break;
      call_(ctx_, i);
    }
  }
  void worker() {
    uint64_t seen = 0;  // the value gen_ had at construction: a job posted before this thread runs is not lost
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

// The parallel-for callables handed to the generated kernels' `NAME(a, b, c, pf)` overload.
struct SerialPF {
  template <class I, class F>
  void operator()(I begin, I end, F&& fn) const {
    for (I i = begin; i < end; ++i) fn(i);
  }
};
struct PoolPF {
  Pool* pool;
  template <class I, class F>
  void operator()(I begin, I end, F&& fn) const {
    auto g = [&fn](int64_t i) { fn(static_cast<I>(i)); };
    pool->run(static_cast<int64_t>(begin), static_cast<int64_t>(end), g);
  }
};

}  // namespace bench
