// Micro-benchmarks of `morello-build calibrate` (tools/calibrate.py compiles and runs this file on the host).
// Usage: calibrate <reps> <dram_mib> <l2_kib> <threads> <has_avx512> [<name>,<name>... [<seconds>]]
// (the names: only those measurements, and only their buffers allocated: calibrate runs the noisy ones again;
// the seconds: no repetition after the second starts later than would let it end within them)
// Prints one line per repetition: "<name> <value>", the value in nanoseconds per unit (the unit is named by the
// caller: one FMA, one vector load, one line, one run, one parallel round). Buffers hold distinct random data
// (never constant fills: the host may merge identical pages, DESIGN.md).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static volatile float g_sink;

// -- the clock: a chain of dependent register-to-register integer adds, one cycle each on every x86 core.
// Not adds of an immediate: Golden Cove and later fold chains of those at rename, several per cycle (a
// Sapphire Rapids-class Xeon ran them at 0.081 ns, a 12 GHz "clock").
static volatile long g_one = 1;
__attribute__((noinline)) static double clock_ns(long n) {
  long x = 0;
  const long one = g_one;
  double t0 = now();
  for (long i = 0; i < n; ++i)
    asm volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t" : "+r"(x) : "r"(one));
  double t = now() - t0;
  g_sink = (float)x;
  return t * 1e9 / (4.0 * n);
}

// -- FMA throughput (12 independent accumulators) and latency (one chain) ---------------------------
#define FMA12(F, V)                                                                                         \
  a0 = F(a0, b, c); a1 = F(a1, b, c); a2 = F(a2, b, c); a3 = F(a3, b, c); a4 = F(a4, b, c); a5 = F(a5, b, c); \
  a6 = F(a6, b, c); a7 = F(a7, b, c); a8 = F(a8, b, c); a9 = F(a9, b, c); a10 = F(a10, b, c); a11 = F(a11, b, c);

#define FMA_BENCH(NAME, ATTR, V, SET1, FMA, ADD, CVT)                                                       \
  __attribute__((target(ATTR), noinline)) static double NAME##_tp(long n) {                                 \
    V b = SET1(0.9999999f), c = SET1(1e-7f);                                                                \
    V a0 = SET1(1), a1 = SET1(2), a2 = SET1(3), a3 = SET1(4), a4 = SET1(5), a5 = SET1(6), a6 = SET1(7);     \
    V a7 = SET1(8), a8 = SET1(9), a9 = SET1(10), a10 = SET1(11), a11 = SET1(12);                            \
    double t0 = now();                                                                                      \
    for (long i = 0; i < n; ++i) {                                                                          \
      FMA12(FMA, V)                                                                                         \
    }                                                                                                       \
    double t = now() - t0;                                                                                  \
    V s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));                                \
    s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)));                                                            \
    g_sink = CVT(s);                                                                                        \
    return t * 1e9 / (12.0 * n);                                                                            \
  }                                                                                                         \
  __attribute__((target(ATTR), noinline)) static double NAME##_lat(long n) {                                \
    V b = SET1(0.9999999f), c = SET1(1e-7f), a = SET1(1);                                                   \
    double t0 = now();                                                                                      \
    for (long i = 0; i < n; ++i) {                                                                          \
      a = FMA(a, b, c); a = FMA(a, b, c); a = FMA(a, b, c); a = FMA(a, b, c);                               \
    }                                                                                                       \
    double t = now() - t0;                                                                                  \
    g_sink = CVT(a);                                                                                        \
    return t * 1e9 / (4.0 * n);                                                                             \
  }

__attribute__((target("avx2,fma"))) static float cvt256(__m256 v) { return _mm256_cvtss_f32(v); }
__attribute__((target("avx512f"))) static float cvt512(__m512 v) { return _mm512_cvtss_f32(v); }
FMA_BENCH(fma256, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, cvt256)
FMA_BENCH(fma512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, cvt512)

// -- the integer vector pipes: one 256-bit instruction (OP, of an accumulator and a constant) of 12 independent
// chains; an empty asm keeps the chains in registers and the compiler from folding them. The vector ALU's row
// (CostTable.vec_op: logic ops, adds, shifts, converts) cycles through an add, an and, a shift and a convert, as the
// quantized kernels mix them; the shuffle's is vpshufb, the integer multiplier's vpmaddubsw.
#define OP12(OP) \
  a0 = OP(a0); a1 = OP(a1); a2 = OP(a2); a3 = OP(a3); a4 = OP(a4); a5 = OP(a5); \
  a6 = OP(a6); a7 = OP(a7); a8 = OP(a8); a9 = OP(a9); a10 = OP(a10); a11 = OP(a11); \
  asm volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8), \
               "+x"(a9), "+x"(a10), "+x"(a11));

#define INT_BENCH(NAME, OP1, OP2, OP3, OP4)                                                                 \
  __attribute__((target("avx2"), noinline)) static double NAME(long n) {                                    \
    const __m256i b = _mm256_set1_epi8(3);                                                                  \
    __m256i a0 = _mm256_set1_epi32(1), a1 = _mm256_set1_epi32(2), a2 = _mm256_set1_epi32(3);                \
    __m256i a3 = _mm256_set1_epi32(4), a4 = _mm256_set1_epi32(5), a5 = _mm256_set1_epi32(6);                \
    __m256i a6 = _mm256_set1_epi32(7), a7 = _mm256_set1_epi32(8), a8 = _mm256_set1_epi32(9);                \
    __m256i a9 = _mm256_set1_epi32(10), a10 = _mm256_set1_epi32(11), a11 = _mm256_set1_epi32(12);           \
    double t0 = now();                                                                                      \
    for (long i = 0; i < n; ++i) {                                                                          \
      OP12(OP1) OP12(OP2) OP12(OP3) OP12(OP4)                                                               \
    }                                                                                                       \
    double t = now() - t0;                                                                                  \
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3)),     \
                                 _mm256_xor_si256(_mm256_xor_si256(a4, a5), _mm256_xor_si256(a6, a7)));    \
    s = _mm256_xor_si256(s, _mm256_xor_si256(_mm256_xor_si256(a8, a9), _mm256_xor_si256(a10, a11)));       \
    g_sink = (float)_mm256_extract_epi32(s, 0);                                                             \
    return t * 1e9 / (48.0 * n);                                                                            \
  }
#define ADD_B(a) _mm256_add_epi32(a, b)
#define AND_B(a) _mm256_and_si256(a, b)
#define SHIFT(a) _mm256_srli_epi16(a, 1)
#define CVT(a) _mm256_castps_si256(_mm256_cvtepi32_ps(a))
#define SHUF_B(a) _mm256_shuffle_epi8(a, b)
#define MADD_B(a) _mm256_maddubs_epi16(a, b)
INT_BENCH(alu256_tp, ADD_B, AND_B, SHIFT, CVT)
INT_BENCH(shuffle256_tp, SHUF_B, SHUF_B, SHUF_B, SHUF_B)
INT_BENCH(imul256_tp, MADD_B, MADD_B, MADD_B, MADD_B)

// -- loads and stores: 256-bit vectors, OR-ed into 8 accumulators (logic ops have the most ports) -------
__attribute__((target("avx2"), noinline)) static __m256 read_range(const float* p, size_t floats, __m256 acc) {
  __m256 s0 = acc, s1 = acc, s2 = acc, s3 = acc, s4 = acc, s5 = acc, s6 = acc, s7 = acc;
  for (size_t i = 0; i + 64 <= floats; i += 64) {
    s0 = _mm256_or_ps(s0, _mm256_load_ps(p + i));
    s1 = _mm256_or_ps(s1, _mm256_load_ps(p + i + 8));
    s2 = _mm256_or_ps(s2, _mm256_load_ps(p + i + 16));
    s3 = _mm256_or_ps(s3, _mm256_load_ps(p + i + 24));
    s4 = _mm256_or_ps(s4, _mm256_load_ps(p + i + 32));
    s5 = _mm256_or_ps(s5, _mm256_load_ps(p + i + 40));
    s6 = _mm256_or_ps(s6, _mm256_load_ps(p + i + 48));
    s7 = _mm256_or_ps(s7, _mm256_load_ps(p + i + 56));
  }
  return _mm256_or_ps(_mm256_or_ps(_mm256_or_ps(s0, s1), _mm256_or_ps(s2, s3)),
                      _mm256_or_ps(_mm256_or_ps(s4, s5), _mm256_or_ps(s6, s7)));
}

// ns per 256-bit load, reading `floats` floats `passes` times (L1: 16 KiB; L2: a block of it)
__attribute__((target("avx2"), noinline)) static double read_ns_per_load(const float* p, size_t floats, long passes) {
  __m256 acc = _mm256_setzero_ps();
  double t0 = now();
  for (long r = 0; r < passes; ++r) acc = read_range(p, floats, acc);
  double t = now() - t0;
  g_sink = _mm256_cvtss_f32(acc);
  return t * 1e9 / ((double)passes * (floats / 8));
}

__attribute__((target("avx2"), noinline)) static double store_ns(float* p, size_t floats, long passes) {
  __m256 v = _mm256_set1_ps(1.5f);
  double t0 = now();
  for (long r = 0; r < passes; ++r) {
    for (size_t i = 0; i + 32 <= floats; i += 32) {
      _mm256_store_ps(p + i, v);
      _mm256_store_ps(p + i + 8, v);
      _mm256_store_ps(p + i + 16, v);
      _mm256_store_ps(p + i + 24, v);
    }
    asm volatile("" ::: "memory");
  }
  double t = now() - t0;
  return t * 1e9 / ((double)passes * (floats / 8));
}

// -- the same with 512-bit vectors: a 512-bit load or store takes two 256-bit slots on some cores (Zen 4) ----
__attribute__((target("avx512f"), noinline)) static double read_ns_per_load512(const float* p, size_t floats,
                                                                               long passes) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  const __m512i* q = reinterpret_cast<const __m512i*>(p);
  double t0 = now();
  for (long r = 0; r < passes; ++r) {
    for (size_t i = 0; i + 8 <= floats / 16; i += 8) {
      s0 = _mm512_or_si512(s0, _mm512_load_si512(q + i));
      s1 = _mm512_or_si512(s1, _mm512_load_si512(q + i + 1));
      s2 = _mm512_or_si512(s2, _mm512_load_si512(q + i + 2));
      s3 = _mm512_or_si512(s3, _mm512_load_si512(q + i + 3));
      s4 = _mm512_or_si512(s4, _mm512_load_si512(q + i + 4));
      s5 = _mm512_or_si512(s5, _mm512_load_si512(q + i + 5));
      s6 = _mm512_or_si512(s6, _mm512_load_si512(q + i + 6));
      s7 = _mm512_or_si512(s7, _mm512_load_si512(q + i + 7));
    }
    asm volatile("" ::: "memory");
  }
  double t = now() - t0;
  __m512i s = _mm512_or_si512(_mm512_or_si512(_mm512_or_si512(s0, s1), _mm512_or_si512(s2, s3)),
                              _mm512_or_si512(_mm512_or_si512(s4, s5), _mm512_or_si512(s6, s7)));
  g_sink = (float)_mm_cvtsi128_si32(_mm512_castsi512_si128(s));
  return t * 1e9 / ((double)passes * (floats / 16));
}

__attribute__((target("avx512f"), noinline)) static double store_ns512(float* p, size_t floats, long passes) {
  __m512 v = _mm512_set1_ps(1.5f);
  double t0 = now();
  for (long r = 0; r < passes; ++r) {
    for (size_t i = 0; i + 64 <= floats; i += 64) {
      _mm512_store_ps(p + i, v);
      _mm512_store_ps(p + i + 16, v);
      _mm512_store_ps(p + i + 32, v);
      _mm512_store_ps(p + i + 48, v);
    }
    asm volatile("" ::: "memory");
  }
  double t = now() - t0;
  return t * 1e9 / ((double)passes * (floats / 16));
}

// runs of `run` bytes, `gap` bytes apart (each on a new page), in passes that start one run further along
__attribute__((target("avx2"), noinline)) static double short_run_ns(const float* p, size_t floats, size_t run,
                                                                       size_t gap) {
  size_t runs = floats * 4 / gap, passes = std::min<size_t>(gap / run, 8);
  __m256 acc = _mm256_setzero_ps();
  double t0 = now();
  for (size_t o = 0; o < passes; ++o)
    for (size_t r = 0; r < runs; ++r) acc = read_range(p + (r * gap + o * run) / 4, run / 4, acc);
  double t = now() - t0;
  g_sink = _mm256_cvtss_f32(acc);
  return t * 1e9 / ((double)runs * passes);
}

// A bf16 GEMV's dot loop over DRAM, as the dot kernels run it (per 64-byte line of B: two loads, each widened
// to two f32 vectors and FMA'd with A's from L1 into 4 chains), over `cols` columns of 4 KiB at a time (K = 2048
// bf16 values), a line of each in turn, each prefetched `ahead` bytes ahead once per line (0: not at all): ns per
// line. The columns are adjacent (a dot kernel's n columns of one matrix) or, `separate`, one from each of
// `cols` equal parts of the buffer (the gated pair's column of B1 beside one of B2). One column chooses
// CostTable.prefetch_bytes (tools/fit.py PREFETCH_ROWS); several, the per-line stream adjustments.
__attribute__((target("avx2,fma"), noinline)) static double dot_ns_per_line(const float* p, size_t floats,
                                                                            const float* a, size_t ahead,
                                                                            int cols = 1, bool separate = false) {
  const size_t col = 1024;  // floats per 4 KiB column of 2048 bf16 values; A: 2048 floats
  const size_t apart = separate ? floats / cols / col * col : col;  // floats from a column to the next read with it
  const size_t step = separate ? col : col * cols, end = separate ? apart : floats / step * step;
  const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
  __m256 c[4][4];
  for (auto& r : c)
    for (auto& x : r) x = _mm256_setzero_ps();
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040);  // flush denormals (random bits as bf16): no microcode assists in the timing
  double t0 = now();
  for (size_t i = 0; i < end; i += step) {
    for (size_t l = 0; l < col * 4; l += 64) {
      for (int j = 0; j < cols; ++j) {
        const char* b = reinterpret_cast<const char*>(p + i + j * apart);
        if (ahead) _mm_prefetch(b + l + ahead, _MM_HINT_T0);
        __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + l));
        __m256i y = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + l + 32));
        const float* q = a + l / 2;
        c[j][0] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)), _mm256_load_ps(q), c[j][0]);
        c[j][1] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(x, high)), _mm256_load_ps(q + 8), c[j][1]);
        c[j][2] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(y, 16)), _mm256_load_ps(q + 16), c[j][2]);
        c[j][3] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(y, high)), _mm256_load_ps(q + 24), c[j][3]);
      }
    }
  }
  double t = now() - t0;
  _mm_setcsr(csr);
  __m256 sum = _mm256_setzero_ps();
  for (auto& r : c)
    for (auto& x : r) sum = _mm256_add_ps(sum, x);
  g_sink = _mm256_cvtss_f32(sum);
  return t * 1e9 / ((double)(end / step) * cols * (col / 16));
}

// An i8 GEMV's dot loop over DRAM as dot_quant runs it (per 64-byte line: sign-extend its bytes, convert them and
// FMA them with A's from L1, 16 a vector on AVX-512, else 8), prefetching into L2 (T1, as step_slots' prefetches of
// the next kernel's columns) `lead` bytes ahead once per line: ns per line. Chooses CostTable.stream_lead_bytes
// (tools/fit.py STREAM_LEAD_ROWS): where the lead is short the loads wait for DRAM (Emerald Rapids VM, AVX-512,
// 2026-11-30: 6.1 ns a line at 2 KiB, 5.0 at 4 KiB, 4.8 at 8; dram_line's read 4.6; without the prefetch ~9).
__attribute__((target("avx512f,avx512bw"))) static inline __m512 i8_fma512(const int8_t* b, const float* q, __m512 c) {
  const __m128i x = _mm_load_si128(reinterpret_cast<const __m128i*>(b));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x)), _mm512_load_ps(q), c);
}
__attribute__((target("avx2,fma"))) static inline __m256 i8_fma256(const int8_t* b, const float* q, __m256 c) {
  const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)), _mm256_load_ps(q), c);
}

// Four named accumulators (GCC kept an array's chains in memory), BYTES values each a step.
#define LEAD_BENCH(NAME, ATTR, V, ZERO, BYTES, PART, ADD, CVT)                                               \
  __attribute__((target(ATTR), noinline)) static double NAME(const int8_t* p, size_t bytes, const float* a,  \
                                                             size_t lead) {                                  \
    V c0 = ZERO(), c1 = c0, c2 = c0, c3 = c0;                                                                \
    const size_t end = bytes / 2048 * 2048;                                                                  \
    const unsigned csr = _mm_getcsr();                                                                       \
    _mm_setcsr(csr | 0x8040); /* flush denormals (A's random bits): no microcode assists in the timing */   \
    double t0 = now();                                                                                       \
    for (size_t i = 0; i < end; i += 64) {                                                                   \
      const int8_t* b = p + i;                                                                               \
      _mm_prefetch(reinterpret_cast<const char*>(b + lead), _MM_HINT_T1);                                    \
      const float* q = a + i % 2048;                                                                         \
      for (int j = 0; j < 64; j += 4 * BYTES) {                                                              \
        c0 = PART(b + j, q + j, c0);                                                                         \
        c1 = PART(b + j + BYTES, q + j + BYTES, c1);                                                         \
        c2 = PART(b + j + 2 * BYTES, q + j + 2 * BYTES, c2);                                                 \
        c3 = PART(b + j + 3 * BYTES, q + j + 3 * BYTES, c3);                                                 \
      }                                                                                                      \
    }                                                                                                        \
    double t = now() - t0;                                                                                   \
    _mm_setcsr(csr);                                                                                         \
    g_sink = CVT(ADD(ADD(c0, c1), ADD(c2, c3)));                                                             \
    return t * 1e9 / (double)(end / 64);                                                                     \
  }
LEAD_BENCH(lead512_ns_per_line, "avx512f,avx512bw", __m512, _mm512_setzero_ps, 16, i8_fma512, _mm512_add_ps, cvt512)
LEAD_BENCH(lead256_ns_per_line, "avx2,fma", __m256, _mm256_setzero_ps, 8, i8_fma256, _mm256_add_ps, cvt256)

// A packing copy whose innermost loop reads its source at a stride, as the generated headers copy a GEMV's A into
// strips of 32 stored evens then odds (dot_bf16_widen's, dot_quant_lut's): 2048 floats in L1, ns per element
// (CostTable.copy_gather_elem; the compiler does not vectorize it). Emerald Rapids VM: 0.8-1.5 ns, 2-4 cycles.
__attribute__((noinline)) static void interleave_strips(const float* __restrict a, float* __restrict out) {
  for (long s = 0; s < 64; ++s)
    for (long half = 0; half < 2; ++half)
      for (long i = 0; i < 16; ++i) out[s * 32 + half * 16 + i] = a[s * 32 + half + i * 2];
}

static double copy_gather_ns(const float* a, float* out, long reps) {
  double t0 = now();
  for (long r = 0; r < reps; ++r) {
    interleave_strips(a, out);
    __asm__ volatile("" ::: "memory");  // each copy is done, not merged with the next
  }
  return (now() - t0) * 1e9 / (2048.0 * reps);
}

// -- the generated headers' own pool (the runtime's ThreadPool; calibrate.py renders its header, whose namespace
// MORELLO_CALIBRATE_NS names): ns per parallel call of one empty task per thread, made back to back as engines
// call kernels, so its workers are still spinning when the next call comes (the pool's spin_time()). -----------
#include "morello_runtime.hpp"
using RuntimePool = MORELLO_CALIBRATE_NS::ThreadPool;

static double median_of(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The median over `groups` groups of 16 back-to-back calls: a call takes well under a microsecond while the
// workers spin, and a preempted worker (milliseconds on a shared host) would dominate a mean.
static double parallel_round_ns(RuntimePool& pool, int threads, long groups) {
  std::vector<double> ns(groups);
  for (long g = 0; g < groups; ++g) {
    double t0 = now();
    for (int i = 0; i < 16; ++i) pool(0, threads, [](size_t) {});
    ns[g] = (now() - t0) * 1e9 / 16;
  }
  return median_of(ns);
}

// -- the slowest thread of a parallel call (CostTable.tail_percent): one task of FMAs (100-200 us) alone on this
// thread, and a call of the pool with one such task per thread (each its owned task); tools/fit.py takes the call's
// time, less the task's and a round's, as a share of the task. Medians of `calls` calls: what a kernel meets in
// most calls (a vCPU the host runs less), not one preempted call.
static double task_alone_ns(long steps, int calls) {
  std::vector<double> ns(calls);
  for (auto& x : ns) x = fma256_tp(steps) * 12.0 * steps;
  return median_of(ns);
}
static double tasks_all_ns(RuntimePool& pool, int threads, long steps, int calls) {
  std::vector<double> ns(calls);
  for (auto& x : ns) {
    double t0 = now();
    pool(0, threads, [steps](size_t) { fma256_tp(steps); });
    x = (now() - t0) * 1e9;
  }
  return median_of(ns);
}

static float* random_buffer(size_t floats, uint64_t seed) {
  float* p = static_cast<float*>(std::aligned_alloc(4096, (floats * 4 + 4095) / 4096 * 4096));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  uint32_t* u = reinterpret_cast<uint32_t*>(p);
  for (size_t i = 0; i < floats; ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    u[i] = (uint32_t)x & 0x3F7FFFFFu;  // finite floats
  }
  return p;
}

// The least of a few short trials: on a shared host, descheduling only ever adds time.
template <class F>
static double best(F f, int trials = 5) {
  double b = f();
  for (int i = 1; i < trials; ++i) b = std::min(b, f());
  return b;
}

// Whether measurement ``name`` was asked for (``only``: ",a,b," of the names; empty: every one).
static bool wanted(const std::string& only, const char* name) {
  return only.empty() || only.find("," + std::string(name) + ",") != std::string::npos;
}

int main(int argc, char** argv) {
  if (argc < 6 || argc > 8) {
    std::fprintf(stderr, "usage: calibrate reps dram_mib l2_kib threads has_avx512 [names [seconds]]\n");
    return 2;
  }
  int reps = std::atoi(argv[1]), threads = std::max(1, std::atoi(argv[4])), avx512 = std::atoi(argv[5]);
  size_t dram = (size_t)std::atol(argv[2]) << 20, l2 = (size_t)std::atol(argv[3]) << 10;
  const std::string only = argc >= 7 ? "," + std::string(argv[6]) + "," : "";
  const double seconds = argc == 8 ? std::atof(argv[7]) : 1e30, start = now();
  auto want = [&](const char* name) { return wanted(only, name); };
  long scale = dram >= (64u << 20) ? 4 : 1;  // the quick mode runs shorter loops
  size_t dram_floats = dram / 4;
  // The DRAM buffers are filled when the first measurement that reads them is asked for, before its trials: a run
  // of the quick measurements only (calibrate's reruns) makes none.
  float* big_buffer = nullptr;
  auto big = [&] { return big_buffer ? big_buffer : (big_buffer = random_buffer(dram_floats, 1)); };
  float* l1 = random_buffer(16 << 8, 2);  // 16 KiB
  float* mid = random_buffer(want("l2_line") ? l2 / 4 : 16, 3);
  float* dot_a = random_buffer(2048, 4);  // a GEMV's A: 8 KiB, in L1
  std::vector<float*> parts;
  RuntimePool pool(threads);
#define MEASURE(NAME, EXPR) \
  if (want(NAME)) std::printf(NAME " %.6f\n", EXPR)
  for (int r = 0; r < reps; ++r) {
    if (r >= 2 && (now() - start) * (r + 1) / r > seconds) break;  // the next would end past the deadline
    MEASURE("clock", best([&] { return clock_ns(2000000 * scale / 5); }));
    MEASURE("fma_tp_256", best([&] { return fma256_tp(400000 * scale / 5); }));
    MEASURE("fma_lat_256", best([&] { return fma256_lat(400000 * scale / 5); }));
    MEASURE("alu_tp_256", best([&] { return alu256_tp(100000 * scale / 5); }));
    MEASURE("shuffle_tp_256", best([&] { return shuffle256_tp(100000 * scale / 5); }));
    MEASURE("imul_tp_256", best([&] { return imul256_tp(100000 * scale / 5); }));
    if (avx512) {
      MEASURE("fma_tp_512", best([&] { return fma512_tp(400000 * scale / 5); }));
      MEASURE("fma_lat_512", best([&] { return fma512_lat(400000 * scale / 5); }));
      MEASURE("l1_load_512", best([&] { return read_ns_per_load512(l1, 16 << 8, 4000 * scale / 5); }));
      MEASURE("l1_store_512", best([&] { return store_ns512(l1, 16 << 8, 4000 * scale / 5); }));
    }
    MEASURE("l1_load", best([&] { return read_ns_per_load(l1, 16 << 8, 4000 * scale / 5); }));
    MEASURE("copy_gather", best([&] { return copy_gather_ns(dot_a, l1, 2000 * scale / 5); }));
    MEASURE("l1_store", best([&] { return store_ns(l1, 16 << 8, 4000 * scale / 5); }));
    long l2_passes = std::max<long>(1, (long)(64 << 20) / (long)l2 * scale / 20);
    MEASURE("l2_line", best([&] { return 2 * read_ns_per_load(mid, l2 / 4, l2_passes); }));
    MEASURE("dram_line", best([&, p = big()] { return 2 * read_ns_per_load(p, dram_floats, 1); }, 3));
    if (want("dram_line_all")) {  // every thread reads its own part at once: ns per line of one thread
      for (int t = (int)parts.size(); t < threads; ++t) parts.push_back(random_buffer(dram_floats / threads, 10 + t));
      std::vector<double> ns(threads);
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] { ns[t] = 2 * read_ns_per_load(parts[t], dram_floats / threads, 1); });
      for (auto& t : ts) t.join();
      std::printf("dram_line_all %.6f\n", *std::max_element(ns.begin(), ns.end()));
    }
    MEASURE("short_run", best([&, p = big()] { return short_run_ns(p, dram_floats, 512, 32768); }, 3));
    for (size_t ahead : {0, 256, 512, 1024, 2048}) {
      const std::string name = "prefetch_" + std::to_string(ahead);
      if (!want(name.c_str())) continue;
      auto dot = [&, p = big()] { return dot_ns_per_line(p, dram_floats, dot_a, ahead); };
      std::printf("%s %.6f\n", name.c_str(), best(dot, 3));
    }
    for (size_t lead : {2048, 4096, 8192}) {
      const std::string name = "stream_lead_" + std::to_string(lead);
      if (!want(name.c_str())) continue;
      const int8_t* bytes = reinterpret_cast<const int8_t*>(big());
      auto dot = [&] {
        return avx512 ? lead512_ns_per_line(bytes, dram, dot_a, lead) : lead256_ns_per_line(bytes, dram, dot_a, lead);
      };
      std::printf("%s %.6f\n", name.c_str(), best(dot, 2));
    }
    // the same loop over several streams, 1 KiB ahead in all (each stream its share, as the kernels prefetch)
    MEASURE("two_streams_line", best([&, p = big()] { return dot_ns_per_line(p, dram_floats, dot_a, 512, 2, true); }, 3));
    MEASURE("interleaved_line", best([&, p = big()] { return dot_ns_per_line(p, dram_floats, dot_a, 256, 4); }, 3));
    MEASURE("parallel_round", best([&] { return parallel_round_ns(pool, threads, 50 * scale); }, 15));
    MEASURE("task_alone", task_alone_ns(25000 * scale, 15));
    MEASURE("tasks_all", tasks_all_ns(pool, threads, 25000 * scale, 15));
    std::fflush(stdout);
  }
  return 0;
}
