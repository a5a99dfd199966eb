// Uses both kernels through their generated headers and checks one output of each.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "morello/gemv.hpp"
#include "morello/small.hpp"

static_assert(two::k::gemv_k_info::threads == 16, "THREADS 16 reached the generator");

int main() {
  int status = 0;
  {
    using info = morello::small_info;
    std::vector<float> a(info::m * info::k, 1.0f), b(info::k * info::n, 0.5f), c(info::m * info::n);
    if (morello::small_supported()) {
      morello::small(a.data(), b.data(), c.data());
      if (std::fabs(c[0] - 0.5f * info::k) > 1e-5f) status = 1;
    }
  }
  {
    using info = two::k::gemv_k_info;
    std::vector<float> x(info::k, 1.0f), y(info::n);
    std::vector<uint16_t> w(std::size_t(info::k) * info::n, 0x3F80);  // bf16 1.0
    if (two::k::gemv_k_supported()) {
      two::k::gemv_k(x.data(), w.data(), y.data());
      if (std::fabs(y[info::n - 1] - float(info::k)) > 1e-4f) status = 1;
    }
  }
  std::printf("app: %s\n", status ? "FAIL" : "ok");
  return status;
}
