// Issue 20: how many loads per cycle the L1 ports take, by kind: a 4-byte element broadcast to a zmm or a ymm
// (vbroadcastss from memory, what fma_outer's A elements compile to), a whole zmm or ymm (vmovups), and an FMA with an
// embedded broadcast ({1to16}), against register-only zmm FMAs (two FMA pipes: the clock reference). Twelve independent
// instructions per iteration, results unused (inline asm, so the compiler keeps them); the best of 7 runs. Last, the
// loop calibrate.cpp measures vec_load with: 8 ymm loads a step OR-ed into 8 accumulators, over 16 KiB.
// Emerald Rapids VM (family 6 model 207), 2026-11-30, one thread, idle host: broadcasts 3.1 per cycle (zmm and ymm),
// zmm loads 1.96, ymm loads 3.05, FMAs with a broadcast operand 2.0; the OR-ed ymm loads 1.85 (bound by the ORs, not
// the loads). A broadcast takes any of Golden Cove's three load ports, a 512-bit load only two of them. The cost model
// prices both as vec_load. Two corrections were tried and not kept (bench/RANK.md): a broadcast price of its own, and
// calibrate timing loads that nothing reads, which picked a 512^3 2-thread program 1.2-1.5x slower.
// Needs AVX-512:
//   g++ -O2 bench/experiments/broadcast_ports.cpp -o /tmp/bcast && taskset -c 1 /tmp/bcast
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <immintrin.h>
alignas(64) static float buf[4096];  // 16 KiB
// Twelve independent instructions on registers 1-12 (INSN(i): register i, the i-th element, vector or line of buf).
#define TWELVE(INSN) INSN(1) INSN(2) INSN(3) INSN(4) INSN(5) INSN(6) INSN(7) INSN(8) INSN(9) INSN(10) INSN(11) INSN(12)
#define CLOBBERS "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12"
#define BCAST_ZMM(i) "vbroadcastss 4*" #i "(%0), %%zmm" #i "\n\t"
#define BCAST_YMM(i) "vbroadcastss 4*" #i "(%0), %%ymm" #i "\n\t"
#define LOAD_ZMM(i) "vmovups 64*" #i "(%0), %%zmm" #i "\n\t"
#define LOAD_YMM(i) "vmovups 32*" #i "(%0), %%ymm" #i "\n\t"
#define FMA_BCAST(i) "vfmadd231ps 4*" #i "(%0)%{1to16%}, %%zmm0, %%zmm" #i "\n\t"  // the broadcast's load inside
#define FMA_REG(i) "vfmadd231ps %%zmm13, %%zmm0, %%zmm" #i "\n\t"  // the FMA pipes' rate: the clock reference

template <int kind> double run(long iters) {
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) {
    if (kind == 0) asm volatile(TWELVE(BCAST_ZMM)::"r"(buf) : CLOBBERS);
    else if (kind == 1) asm volatile(TWELVE(BCAST_YMM)::"r"(buf) : CLOBBERS);
    else if (kind == 2) asm volatile(TWELVE(LOAD_ZMM)::"r"(buf) : CLOBBERS);
    else if (kind == 3) asm volatile(TWELVE(FMA_BCAST)::"r"(buf) : CLOBBERS);
    else if (kind == 4) asm volatile(TWELVE(LOAD_YMM)::"r"(buf) : CLOBBERS);
    else asm volatile(TWELVE(FMA_REG)::: CLOBBERS);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / (iters * 12.0) * 1e9;
}
// calibrate.cpp's vec_load loop (read_range): ns per load
__attribute__((target("avx2"), noinline)) static double ored_loads(long passes) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  auto t0 = std::chrono::steady_clock::now();
  for (long r = 0; r < passes; ++r) {
    for (int i = 0; i + 64 <= 4096; i += 64) {
      s0 = _mm256_or_ps(s0, _mm256_load_ps(buf + i)), s1 = _mm256_or_ps(s1, _mm256_load_ps(buf + i + 8));
      s2 = _mm256_or_ps(s2, _mm256_load_ps(buf + i + 16)), s3 = _mm256_or_ps(s3, _mm256_load_ps(buf + i + 24));
      s4 = _mm256_or_ps(s4, _mm256_load_ps(buf + i + 32)), s5 = _mm256_or_ps(s5, _mm256_load_ps(buf + i + 40));
      s6 = _mm256_or_ps(s6, _mm256_load_ps(buf + i + 48)), s7 = _mm256_or_ps(s7, _mm256_load_ps(buf + i + 56));
    }
    asm volatile("" ::: "memory");
  }
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile float sink = _mm256_cvtss_f32(_mm256_or_ps(_mm256_or_ps(_mm256_or_ps(s0, s1), _mm256_or_ps(s2, s3)),
                                                      _mm256_or_ps(_mm256_or_ps(s4, s5), _mm256_or_ps(s6, s7))));
  (void)sink;
  return t / (passes * 512.0) * 1e9;
}

int main() {
  const long n = 20000000;
  const char* names[] = {"bcast zmm m32", "bcast ymm m32", "load zmm", "fma zmm m32{1to16}", "load ymm",
                         "fma zmm reg (the reference)", "ymm loads OR-ed (calibrate's loop)"};
  double best[7] = {1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9};
  for (int r = 0; r < 7; ++r) {
    best[0] = std::min(best[0], run<0>(n)), best[1] = std::min(best[1], run<1>(n));
    best[2] = std::min(best[2], run<2>(n)), best[3] = std::min(best[3], run<3>(n));
    best[4] = std::min(best[4], run<4>(n)), best[5] = std::min(best[5], run<5>(n));
    best[6] = std::min(best[6], ored_loads(n / 40));
  }
  for (int k = 0; k < 7; ++k) printf("%-42s %.4f ns  = %.2f per cycle\n", names[k], best[k], 2 * best[5] / best[k]);
}
