"""What each target ISA means for the emitted C++: vector width, helper namespace, target attribute,
run-time CPU check. The helper libraries themselves are Jinja templates (templates/isa_*.hpp.j2)
sharing one vocabulary, so microkernels are written once for every vector ISA."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IsaInfo:
    name: str
    lanes: int  # f32 lanes per vector (0: scalar)
    helpers: str | None  # helper namespace (inside the runtime namespace) and template stem
    target_attr: str | None  # GCC/Clang function target attribute string
    cpu_features: tuple[str, ...]  # __builtin_cpu_supports names
    vtype: str | None  # the vector type in emitted code (a typedef in the helper namespace)

    @property
    def attr(self) -> str:
        return f'__attribute__((target("{self.target_attr}")))' if self.target_attr else ""


_AVX2_ATTR = "avx2,fma"
_AVX512_ATTR = "avx2,fma,avx512f,avx512bw,avx512vl,avx512dq"
# Highway 1.0.3's HWY_TARGET_STR_AVX2 (sse4 + avx,avx2 + bmi,bmi2,fma + f16c).
_HWY_AVX2_ATTR = "sse2,ssse3,sse4.1,sse4.2,pclmul,aes,avx,avx2,bmi,bmi2,fma,f16c"

ISAS = {
    "scalar": IsaInfo("scalar", 0, None, None, (), None),
    "avx2": IsaInfo("avx2", 8, "avx2", _AVX2_ATTR, ("avx2", "fma"), "mv::V"),
    "highway": IsaInfo("highway", 8, "hwy_avx2", _HWY_AVX2_ATTR,
                       ("avx2", "fma", "bmi", "bmi2", "f16c", "aes", "pclmul", "sse4.2"), "mv::V"),
    "avx512": IsaInfo("avx512", 16, "avx512", _AVX512_ATTR,
                      ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"), "mv::V"),
    "avx512_bf16": IsaInfo("avx512_bf16", 16, "avx512", _AVX512_ATTR + ",avx512bf16",
                           ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512bf16"), "mv::V"),
}


def isa_info(target) -> IsaInfo:
    info = ISAS[target.isa]
    assert info.lanes == target.lanes, (info, target.lanes)
    return info
