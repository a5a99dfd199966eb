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
template <int kind> double run(long iters) {
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iters; ++i) {
    if (kind == 0)
      asm volatile(
          "vbroadcastss 0(%0), %%zmm1\n\t vbroadcastss 4(%0), %%zmm2\n\t vbroadcastss 8(%0), %%zmm3\n\t vbroadcastss 12(%0), %%zmm4\n\t"
          "vbroadcastss 16(%0), %%zmm5\n\t vbroadcastss 20(%0), %%zmm6\n\t vbroadcastss 24(%0), %%zmm7\n\t vbroadcastss 28(%0), %%zmm8\n\t"
          "vbroadcastss 32(%0), %%zmm9\n\t vbroadcastss 36(%0), %%zmm10\n\t vbroadcastss 40(%0), %%zmm11\n\t vbroadcastss 44(%0), %%zmm12\n\t"
          :: "r"(buf) : "xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12");
    else if (kind == 1)
      asm volatile(
          "vbroadcastss 0(%0), %%ymm1\n\t vbroadcastss 4(%0), %%ymm2\n\t vbroadcastss 8(%0), %%ymm3\n\t vbroadcastss 12(%0), %%ymm4\n\t"
          "vbroadcastss 16(%0), %%ymm5\n\t vbroadcastss 20(%0), %%ymm6\n\t vbroadcastss 24(%0), %%ymm7\n\t vbroadcastss 28(%0), %%ymm8\n\t"
          "vbroadcastss 32(%0), %%ymm9\n\t vbroadcastss 36(%0), %%ymm10\n\t vbroadcastss 40(%0), %%ymm11\n\t vbroadcastss 44(%0), %%ymm12\n\t"
          :: "r"(buf) : "xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12");
    else if (kind == 2)
      asm volatile(
          "vmovups 0(%0), %%zmm1\n\t vmovups 64(%0), %%zmm2\n\t vmovups 128(%0), %%zmm3\n\t vmovups 192(%0), %%zmm4\n\t"
          "vmovups 256(%0), %%zmm5\n\t vmovups 320(%0), %%zmm6\n\t vmovups 384(%0), %%zmm7\n\t vmovups 448(%0), %%zmm8\n\t"
          "vmovups 512(%0), %%zmm9\n\t vmovups 576(%0), %%zmm10\n\t vmovups 640(%0), %%zmm11\n\t vmovups 704(%0), %%zmm12\n\t"
          :: "r"(buf) : "xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12");
    else if (kind == 3)  // FMA with embedded broadcast: the broadcast's load inside the FMA
      asm volatile(
          "vfmadd231ps 0(%0)%{1to16%}, %%zmm0, %%zmm1\n\t vfmadd231ps 4(%0)%{1to16%}, %%zmm0, %%zmm2\n\t vfmadd231ps 8(%0)%{1to16%}, %%zmm0, %%zmm3\n\t vfmadd231ps 12(%0)%{1to16%}, %%zmm0, %%zmm4\n\t"
          "vfmadd231ps 16(%0)%{1to16%}, %%zmm0, %%zmm5\n\t vfmadd231ps 20(%0)%{1to16%}, %%zmm0, %%zmm6\n\t vfmadd231ps 24(%0)%{1to16%}, %%zmm0, %%zmm7\n\t vfmadd231ps 28(%0)%{1to16%}, %%zmm0, %%zmm8\n\t"
          "vfmadd231ps 32(%0)%{1to16%}, %%zmm0, %%zmm9\n\t vfmadd231ps 36(%0)%{1to16%}, %%zmm0, %%zmm10\n\t vfmadd231ps 40(%0)%{1to16%}, %%zmm0, %%zmm11\n\t vfmadd231ps 44(%0)%{1to16%}, %%zmm0, %%zmm12\n\t"
          :: "r"(buf) : "xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12");
    else if (kind == 4)
      asm volatile(
          "vmovups 0(%0), %%ymm1\n\t vmovups 32(%0), %%ymm2\n\t vmovups 64(%0), %%ymm3\n\t vmovups 96(%0), %%ymm4\n\t"
          "vmovups 128(%0), %%ymm5\n\t vmovups 160(%0), %%ymm6\n\t vmovups 192(%0), %%ymm7\n\t vmovups 224(%0), %%ymm8\n\t"
          "vmovups 256(%0), %%ymm9\n\t vmovups 288(%0), %%ymm10\n\t vmovups 320(%0), %%ymm11\n\t vmovups 352(%0), %%ymm12\n\t"
          :: "r"(buf) : "xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12");
    else  // FMA, register operands only: the FMA pipes' rate, the clock reference
      asm volatile(
          "vfmadd231ps %%zmm13, %%zmm0, %%zmm1\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm2\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm3\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm4\n\t"
          "vfmadd231ps %%zmm13, %%zmm0, %%zmm5\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm6\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm7\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm8\n\t"
          "vfmadd231ps %%zmm13, %%zmm0, %%zmm9\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm10\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm11\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm12\n\t"
          ::: "xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12");
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
