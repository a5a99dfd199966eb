// Same-process DRAM read sweep for the quantized-weights benchmark (bench/quant/run.py loads it with ctypes;
// ctypes releases the GIL during the call). Reads every byte of a buffer with AVX2 (AVX-512 when present)
// loads into independent accumulators, on 1 or more threads, and returns a checksum.
//
// How the threads share the bytes (issue 20, bench/README.md "The read reference"): `mode` 0 splits the buffer
// into one contiguous slice per thread (what an independent sweep and the GEMV kernels' output-dim split do);
// mode 1 hands out 1 MiB chunks dynamically from a shared counter (the old bench.cpp `bw_ref`).
// The worker threads are persistent: they spin 20,000 pauses after a call, then sleep on a condition variable (on a
// shared machine an idle spinner would steal the core from the implementations timed next).
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

__attribute__((target("avx2"))) static uint64_t sweep_avx2(const char* p, size_t bytes) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  size_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i*)(p + i)));
    s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i*)(p + i + 32)));
    s2 = _mm256_add_epi64(s2, _mm256_loadu_si256((const __m256i*)(p + i + 64)));
    s3 = _mm256_add_epi64(s3, _mm256_loadu_si256((const __m256i*)(p + i + 96)));
    s4 = _mm256_add_epi64(s4, _mm256_loadu_si256((const __m256i*)(p + i + 128)));
    s5 = _mm256_add_epi64(s5, _mm256_loadu_si256((const __m256i*)(p + i + 160)));
    s6 = _mm256_add_epi64(s6, _mm256_loadu_si256((const __m256i*)(p + i + 192)));
    s7 = _mm256_add_epi64(s7, _mm256_loadu_si256((const __m256i*)(p + i + 224)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)),
                               _mm256_add_epi64(_mm256_add_epi64(s4, s5), _mm256_add_epi64(s6, s7)));
  uint64_t lanes[4];
  _mm256_storeu_si256((__m256i*)lanes, s);
  uint64_t r = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < bytes; ++i) r += (uint8_t)p[i];
  return r;
}

__attribute__((target("avx512f"))) static uint64_t sweep_avx512(const char* p, size_t bytes) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  size_t i = 0;
  for (; i + 512 <= bytes; i += 512) {
    s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p + i));
    s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(p + i + 64));
    s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(p + i + 128));
    s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(p + i + 192));
    s4 = _mm512_add_epi64(s4, _mm512_loadu_si512(p + i + 256));
    s5 = _mm512_add_epi64(s5, _mm512_loadu_si512(p + i + 320));
    s6 = _mm512_add_epi64(s6, _mm512_loadu_si512(p + i + 384));
    s7 = _mm512_add_epi64(s7, _mm512_loadu_si512(p + i + 448));
  }
  __m512i s = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)),
                               _mm512_add_epi64(_mm512_add_epi64(s4, s5), _mm512_add_epi64(s6, s7)));
  uint64_t r = (uint64_t)_mm512_reduce_add_epi64(s);
  for (; i < bytes; ++i) r += (uint8_t)p[i];
  return r;
}

static uint64_t sweep_range(const char* p, size_t bytes) {
  return __builtin_cpu_supports("avx512f") ? sweep_avx512(p, bytes) : sweep_avx2(p, bytes);
}

// ---- a persistent pool of spinning workers (thread 0 is the caller)
#define MAX_THREADS 64
#define CHUNK ((size_t)1 << 20)
static struct {
  const char* p;
  size_t bytes;
  int nthreads, mode;
  atomic_size_t next;
  atomic_uint_fast64_t acc;
  atomic_int pending;
  atomic_uint_fast64_t gen;
  int started, sleeping;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void do_share(int t) {
  uint64_t r = 0;
  if (g.mode == 0) {  // one contiguous slice per thread, 4 KiB aligned
    size_t per = (g.bytes / (size_t)g.nthreads + 4095) & ~(size_t)4095;
    size_t b = per * (size_t)t, e = b + per;
    if (e > g.bytes) e = g.bytes;
    if (b < e) r = sweep_range(g.p + b, e - b);
  } else {  // 1 MiB chunks from a shared counter
    for (;;) {
      size_t off = atomic_fetch_add(&g.next, CHUNK);
      if (off >= g.bytes) break;
      r += sweep_range(g.p + off, g.bytes - off < CHUNK ? g.bytes - off : CHUNK);
    }
  }
  atomic_fetch_add(&g.acc, r);
}

static void* worker(void* arg) {
  int t = (int)(intptr_t)arg;
  uint64_t seen = 0;
  for (;;) {
    uint64_t v;
    for (long spin = 0; (v = atomic_load(&g.gen)) == seen;) {
      if (++spin < 20000) {
        _mm_pause();
        continue;
      }
      pthread_mutex_lock(&g.mu);
      g.sleeping++;
      while (atomic_load(&g.gen) == seen) pthread_cond_wait(&g.cv, &g.mu);
      g.sleeping--;
      pthread_mutex_unlock(&g.mu);
    }
    seen = v;
    if (t < g.nthreads) {
      do_share(t);
      atomic_fetch_sub(&g.pending, 1);
    }
  }
  return NULL;
}

// Reads `bytes` bytes at p on `threads` threads (slicing `mode`: 0 contiguous slices, 1 dynamic 1 MiB chunks).
uint64_t morello_sweep(const char* p, size_t bytes, int threads, int mode) {
  if (threads < 1) threads = 1;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  for (; g.started < threads - 1; ++g.started) {
    pthread_t th;
    pthread_create(&th, NULL, worker, (void*)(intptr_t)(g.started + 1));
    pthread_detach(th);
  }
  g.p = p;
  g.bytes = bytes;
  g.nthreads = threads;
  g.mode = mode;
  atomic_store(&g.next, 0);
  atomic_store(&g.acc, 0);
  atomic_store(&g.pending, threads - 1);
  if (threads > 1) {
    pthread_mutex_lock(&g.mu);
    atomic_fetch_add(&g.gen, 1);
    if (g.sleeping) pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
  }
  do_share(0);
  while (atomic_load(&g.pending) > 0) _mm_pause();
  return atomic_load(&g.acc);
}
