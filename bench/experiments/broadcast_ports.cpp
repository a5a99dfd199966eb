// Issue 20: how many loads per cycle the L1 ports take, by kind: a 4-byte element broadcast to a zmm or a ymm
// (vbroadcastss from memory, what fma_outer's A elements compile to), a whole zmm (vmovups), and an FMA with an
// embedded broadcast ({1to16}), against register-only zmm FMAs (two FMA pipes: the clock reference). Twelve independent
// instructions per iteration, results unused (inline asm, so the compiler keeps them); the best of 7 runs.
// Emerald Rapids VM (family 6 model 207), 2026-11-30, one thread: broadcasts 3.1 per cycle (zmm and ymm), zmm loads
// 1.9, FMAs with a broadcast operand 2.0: a broadcast takes any of Golden Cove's three load ports, a 512-bit load only
// two of them. The cost model prices both as vec_load (bench/RANK.md: a broadcast price of its own, tried, not kept).
// Needs AVX-512:
//   g++ -O2 bench/experiments/broadcast_ports.cpp -o /tmp/bcast && taskset -c 1 /tmp/bcast
#include <chrono>
#include <cstdio>
#include <algorithm>
alignas(64) static float buf[1024];
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
    else  // FMA, register operands only: the FMA pipes' rate, the clock reference
      asm volatile(
          "vfmadd231ps %%zmm13, %%zmm0, %%zmm1\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm2\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm3\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm4\n\t"
          "vfmadd231ps %%zmm13, %%zmm0, %%zmm5\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm6\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm7\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm8\n\t"
          "vfmadd231ps %%zmm13, %%zmm0, %%zmm9\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm10\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm11\n\t vfmadd231ps %%zmm13, %%zmm0, %%zmm12\n\t"
          ::: "xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12");
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / (iters * 12.0) * 1e9;
}
int main() {
  const long n = 20000000;
  const char* names[] = {"bcast zmm m32", "bcast ymm m32", "load zmm", "fma zmm m32{1to16}", "fma zmm reg (the reference)"};
  double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
  for (int r = 0; r < 7; ++r) {
    best[0] = std::min(best[0], run<0>(n)); best[1] = std::min(best[1], run<1>(n));
    best[2] = std::min(best[2], run<2>(n)); best[3] = std::min(best[3], run<3>(n)); best[4] = std::min(best[4], run<4>(n));
  }
  for (int k = 0; k < 5; ++k) printf("%-28s %.4f ns  = %.2f per cycle (FMA ref 2/cycle)\n", names[k], best[k], 2 * best[4] / best[k]);
}
