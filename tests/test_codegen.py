"""Code generation (morello_build.codegen): the header contract, determinism, index arithmetic, every ISA
compiling warning-free, programs the search would not pick by itself (memzero, ...), multiplies into zeroed
registers, the CLI and threads.

Kernel-vs-reference comparisons over a spec matrix run in cpp_tests/ (test_codegen_cpp.py); random specs
in test_e2e_random.py. Tolerances are those of cpp_tests/check.hpp.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import shared_search

from morello_build import __version__
from morello_build.check.testing import check_headers, cxx
from morello_build.codegen import emit_header
from morello_build.ir.affine import Affine, layout_offset
from morello_build.ir.grammar import parse_spec
from morello_build.ir.layout import col_major, interleaved, packed, row_major
from morello_build.ir.spec import DType, Level
from morello_build.synth.actions import MoveOperand, Select, Tile, ToAccum
from morello_build.synth.search import Search
from morello_build.target import cpu_flags, get_target
from morello_build.tools.api import search_isa, synthesize_header, synthesize_program

ROOT = Path(__file__).resolve().parents[1]
HAVE_CXX = shutil.which(cxx().split()[0]) is not None
HAVE_HWY = Path("/usr/include/hwy/highway.h").exists()
needs_cxx = pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler")
ISAS = ["scalar", "avx2", "avx2_vnni", "avx512", "avx512_vnni", "avx512_bf16"] + (["highway"] if HAVE_HWY else [])


# -- the header contract ---------------------------------------------------------------------------
def test_header_contract():
    spec = "matmul 3x5x7 a=bf16 b=bf16:col c=bf16 batch=2 accum"
    user, target, impl, _ = synthesize_program(spec, isa="avx512")
    text = emit_header(user, impl, target, name="gemv", namespace="ns1::inner")  # synthesize_header's bytes
    head = text[: text.index("#pragma once")]
    assert f"Spec:    {spec}" in head
    assert f"morello-build {__version__}" in head
    assert "Target:  avx512" in head
    assert "nearest, ties to even" in head and "accumulated" in head
    # the chosen program, every node with its cost
    assert "[cost " in head and impl.label() in head
    assert head.count("[cost ") >= 3
    assert "namespace ns1::inner {" in text
    info = re.search(r"struct gemv_info \{(.*?)\};", text, re.S).group(1)
    assert "static constexpr int batch = 2, m = 3, k = 5, n = 7;" in info
    assert "static constexpr bool accum = true;" in info
    for op in "abc":
        assert f"using {op}_type = uint16_t;" in info
    assert f'static constexpr const char* spec = "{spec}";' in info
    assert 'static constexpr const char* isa = "avx512";' in info
    assert "inline void gemv_reference(const uint16_t* a, const uint16_t* b, uint16_t* c)" in text
    assert "inline bool gemv_supported()" in text and "(id.xcr0 & 0xE6u) == 0xE6u" in text  # ZMM state saved
    assert "inline void gemv(const uint16_t* a, const uint16_t* b, uint16_t* c, PF&& pf)" in text
    assert "inline void gemv(const uint16_t* a, const uint16_t* b, uint16_t* c) {" in text
    assert '__attribute__((target("' in text


def test_scalar_header_is_portable():
    text = synthesize_header("matmul 4x3x5 b=bf16", isa="scalar")
    assert "immintrin" not in text and "__attribute__((target" not in text
    assert re.search(r"inline bool kernel_supported\(\) \{\s*return true;", text)


def test_deterministic_bytes():
    """Two searches of one spec give the same bytes (and synthesize_header is emit_header of the program)."""
    spec = "matmul 5x17x9 b=bf16:col"
    a = synthesize_header(spec, isa="avx2", name="k")
    user, target, impl, _ = synthesize_program(spec, isa="avx2")
    assert emit_header(user, impl, target, name="k") == a


# -- index arithmetic --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "layout",
    [
        row_major(),
        col_major(),
        packed(2, 16),
        packed(2, 8),
        interleaved(row_major(), 2, 32),
        interleaved(row_major(), 2, 16),
    ],
    ids=lambda l: l.name,
)
def test_layout_offset_matches_layout_algebra(layout):
    """Symbolic offsets of (origin + local) equal Layout.offset for every value of the loop variables."""
    rng = random.Random(0)
    for _ in range(40):
        shape = (rng.randint(1, 3), rng.randint(1, 40), rng.randint(1, 70))
        strip = max(layout.strip(2), 1)
        # origins as the search makes them: tiles of a strip multiple along dim 2
        tile = (1, rng.randint(1, shape[1]), strip * rng.randint(1, 2))
        origin = (Affine.var("i", 1), Affine.var("j", tile[1]), Affine.var("k", tile[2]) + 0)
        for _ in range(10):
            vals = {
                "i": rng.randrange(shape[0]),
                "j": rng.randrange(max(1, shape[1] // tile[1])),
                "k": rng.randrange(max(1, shape[2] // tile[2])),
            }
            local = (0, rng.randrange(tile[1]), rng.randrange(tile[2]))
            coord = tuple(o.const + sum(c * vals[v] for v, c in o.terms) + x for o, x in zip(origin, local))
            if any(c >= s for c, s in zip(coord, shape)):
                continue
            expr = layout_offset(layout, shape, tuple(o + x for o, x in zip(origin, local)))
            got = eval(expr.c() if isinstance(expr, Affine) else expr, {}, dict(vals))
            assert got == layout.offset(coord, shape), (layout.name, shape, coord, expr)


def test_bounded_variables_make_strip_digits_exact():
    """c = 16*p + q with q < 16: c / 16 = p and c % 16 = q (the packing copies' loops), and only then."""
    c = Affine.var("p", 16) + Affine.var("q")
    assert c.floordiv(16, {"q": 16}) == Affine.var("p") and c.mod(16, {"q": 16}) == Affine.var("q")
    assert c.floordiv(16) is None and c.floordiv(16, {"q": 17}) is None and c.mod(16, {"p": 9}) is None
    layout = interleaved(row_major(), 2, 32)  # c = 32*p + s + 2*q, s < 2, q < 16
    shape = (1, 3, 70)
    c = Affine.var("p", 32) + Affine.var("s") + Affine.var("q", 2)
    expr = layout_offset(layout, shape, (Affine(), Affine.var("r"), c), {"p": 3, "s": 2, "q": 16, "r": 3})
    assert isinstance(expr, Affine)
    for p, s_, q, r in itertools.product(range(3), range(2), range(16), range(3)):
        col = 32 * p + s_ + 2 * q
        if col < shape[2]:
            assert eval(expr.c(), {}, {"p": p, "s": s_, "q": q, "r": r}) == layout.offset((0, r, col), shape)


# -- compiling every ISA -------------------------------------------------------------------------------
@needs_cxx
@pytest.mark.slow  # compiles every ISA's kernels at -O2
def test_every_isa_compiles_warning_free_in_one_translation_unit(tmp_path):
    """Headers of every ISA (and two kernels of one ISA) share one TU: runtime and helper guards work,
    no -m flags are needed, -Wall -Wextra -Werror is clean."""
    user = parse_spec("matmul 3x40x5 a=bf16 b=bf16:col c=bf16")
    lines, programs = [], {}
    for i, isa in enumerate(ISAS + ["avx512"]):
        key = search_isa(user, isa)  # highway's program is avx2's: one search each (as gen_tests does)
        if key not in programs:
            programs[key] = synthesize_program(user, isa=key)[2]
        h = tmp_path / f"h{i}.hpp"
        h.write_text(emit_header(user, programs[key], get_target(isa), name=f"k{i}", namespace=f"n{i}"))
        lines.append(f'#include "h{i}.hpp"')
    lines.append("int main() { return 0; }")
    (tmp_path / "t.cpp").write_text("\n".join(lines) + "\n")
    r = subprocess.run(
        [*cxx().split(), "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-c", "t.cpp", "-o", "t.o"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-10000:]


def _assembly(tmp_path, source: str) -> str:
    """GCC's -O2 assembly of ``source`` (a translation unit beside tmp_path's headers)."""
    (tmp_path / "t.cpp").write_text(source)
    asm = subprocess.run(
        [*cxx().split(), "-std=c++17", "-O2", "-S", "-o", "-", "t.cpp"], cwd=tmp_path, capture_output=True, text=True
    )
    assert asm.returncode == 0, asm.stderr[-5000:]
    return asm.stdout


@pytest.mark.skipif("g++" not in cxx(), reason="the instruction counts are GCC's")
def test_avx512_bf16_widening_is_one_instruction(tmp_path):
    """The runtime's bf16 load widens with one vpmovzxwd and its store narrows with one vpmovdw: GCC 12
    split __builtin_convertvector's widening into two 256-bit halves (4 instructions a load), a K x N bf16
    GEMV 10% slower from DRAM. Compiled only, so it checks this on any host."""
    user = parse_spec("matmul 1x16x32 a=f32 b=bf16 c=bf16")
    header = emit_header(user, synthesize_program(user, isa="avx512")[2], get_target("avx512"), name="k")
    rt = re.search(r"namespace (morello_rt_\w+) \{", header).group(1)
    (tmp_path / "k.hpp").write_text(header)
    attr = 'target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")'
    asm = _assembly(
        tmp_path,
        f'#include "k.hpp"\n__attribute__((noinline, {attr})) void widen_and_narrow(const uint16_t* p, uint16_t* q) '
        f"{{ using namespace {rt}::avx512; store_bf16(q, load_bf16(p, 16), 16); }}\n",
    )
    body = asm.split("widen_and_narrow", 1)[1].split("ret", 1)[0]
    assert len(re.findall(r"\bvpmovzxwd\b", body)) == 1 and len(re.findall(r"\bvpmovdw\b", body)) == 1, body
    assert not re.search(r"vinserti|vextracti", body), body


# -- programs the search does not choose by itself --------------------------------------------------------
def _search(isa: str) -> Search:
    """One memo per ISA (shared_search): the forced programs' sub-specs overlap (a fresh search each redid them)."""
    return shared_search.search_for(get_target(isa))


def _forced(spec: str, isa: str, plan):
    """An Impl for ``spec`` built by ``plan(search, spec)`` with sub-specs synthesized as usual."""
    user = parse_spec(spec)
    target = get_target(isa)
    search = _search(isa)
    impl = plan(search, user.to_spec(target.limits()))
    assert impl is not None
    return user, target, impl


def _supported(isa):
    flags = {f.replace("avx512_bf16", "avx512bf16").replace("avx512_vnni", "avx512vnni") for f in cpu_flags()}
    return isa == "scalar" or get_target(isa).features - {"highway"} <= flags


@needs_cxx
def test_forced_programs_match_reference(tmp_path):
    """memzero (zeroing C in memory), a transposing copy of A into L1, loops with remainders."""
    kernels, packing_copies = [], 0

    def memzero_then_body(search, spec):
        return search.apply(spec, ToAccum(), bodies={0: lambda z: search.apply(z, Select("memzero"))})

    def a_transposed_in_l1(search, spec):
        return search.apply(spec, MoveOperand(0, Level.L1, col_major()))

    def ragged_tiles(search, spec):
        k = spec.op.iter_shape[2]
        return search.apply(spec, Tile((1, 3, k, 7)))  # remainders on m and n; k not tiled (no accum)

    def pack_b(lanes):
        return lambda search, spec: search.apply(spec, MoveOperand(1, Level.L1, packed(2, lanes), DType.F32))

    def interleave_a(lanes):
        return lambda search, spec: search.apply(
            spec, MoveOperand(0, Level.L1, interleaved(row_major(), 2, 2 * lanes), DType.F32)
        )

    cases = [
        # packing copies walk the destination's strips; ragged last strips (37 = 2*16 + 5, 41 odd)
        ("matmul 5x7x37", "avx512", pack_b(16)),
        ("matmul 5x7x37 b=bf16:col", "avx2", pack_b(8)),
        ("matmul 3x41x5 b=bf16:col", "avx512", interleave_a(16)),
        ("matmul 3x41x5 a=bf16 b=bf16:col", "avx2", interleave_a(8)),
        ("matmul 5x7x11 c=bf16", "scalar", memzero_then_body),
        ("matmul 5x7x11 a=bf16 c=f32:col", "avx512", memzero_then_body),
        ("matmul 6x9x13 b=bf16", "avx2", a_transposed_in_l1),
        ("matmul 10x9x17 a=f32:col", "avx512", ragged_tiles),
        ("matmul 10x9x17 c=bf16", "scalar", ragged_tiles),
    ]
    for i, (spec, isa, plan) in enumerate(cases):
        user, target, impl = _forced(spec, isa, plan)
        text = emit_header(user, impl, target, name=f"f{i}", namespace="forced")
        copies = re.findall(r"// copy [^\n]*\{\[[^\n]*\n(?:\s*(?:for|if) [^\n]*\n)*\s*([^\n]*)", text)
        for stmt in copies:  # strip by strip: no division left in the index arithmetic (vectorizable)
            assert " / " not in stmt and " % " not in stmt, stmt
        packing_copies += len(copies)
        kernels.append((spec, text, "forced", f"f{i}"))
    assert packing_copies >= 4
    res = check_headers(kernels, tmp_path)
    assert res.ok, res.output
    assert "FAIL" not in res.output


@needs_cxx
def test_first_fma_into_zeroed_registers_is_a_multiply(tmp_path):
    """A register tile that overwrites C is zeroed, then accumulated: the first trip of its k loop is
    peeled and multiplies instead (the zeroing is dead code). Tiles loaded from C keep every FMA. Checked
    against the reference, with k = 1, 2 (no loop left after the peel), primes and ragged tiles."""
    cases = [
        ("matmul 32x32x32 serial", "avx512", True),
        ("matmul 6x9x17 serial", "avx2", True),
        ("matmul 7x2x19 serial", "avx512", True),
        ("matmul 5x1x23 serial", "avx2", True),
        ("matmul 5x9x11 accum serial", "avx512", False),
    ]
    kernels = []
    for i, (spec, isa, overwrites) in enumerate(cases):
        user, target = parse_spec(spec), get_target(isa)  # synthesize_header's bytes (test_deterministic_bytes)
        impl = _search(isa).best(user.to_spec(target.limits()))
        text = emit_header(user, impl, target, name=f"z{i}", namespace="zeroed")
        assert ("mv::mul(" in text) == overwrites, spec
        if " k by 1 " in text and overwrites:
            assert "first trip peeled" in text, spec
        assert ("mv::fma(" in text) == (spec != "matmul 5x1x23 serial"), spec  # k = 1: nothing to add
        kernels.append((spec, text, "zeroed", f"z{i}"))
    res = check_headers(kernels, tmp_path)
    assert res.ok, res.output
    assert "FAIL" not in res.output


# -- threads ---------------------------------------------------------------------------------------
@needs_cxx
def test_default_pool_sizes(tmp_path):
    """The default pool, serial (MORELLO_NUM_THREADS=1) and oversubscribed (3), gives the same bytes: one build,
    run with each."""
    spec = "matmul 64x32x64"
    isa = "avx512" if _supported("avx512") else ("avx2" if _supported("avx2") else "scalar")
    text = synthesize_header(spec, isa=isa, threads=2, name="par", namespace="thr")
    assert "default_pool()" in text, "expected a parallel program"
    res = check_headers([(spec, text, "thr", "par")], tmp_path, env={"MORELLO_NUM_THREADS": "1"})
    assert res.ok, res.output
    run = subprocess.run(
        [str(tmp_path / "check_main")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, MORELLO_NUM_THREADS="3"),
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-20000:]


# -- CLI -------------------------------------------------------------------------------------------
def test_cli_synth_writes_header_only_when_changed(tmp_path):
    out = tmp_path / "sub" / "k.hpp"
    cmd = [
        sys.executable,
        "-m",
        "morello_build",
        "synth",
        "matmul 2x3x4 b=bf16:col",
        "-o",
        str(out),
        "--isa",
        "scalar",
        "--name",
        "mykern",
        "--namespace",
        "a::b",
    ]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout
    text = out.read_text()
    assert "namespace a::b {" in text and "inline void mykern(" in text
    mtime = out.stat().st_mtime_ns
    os.utime(out, ns=(mtime - 10**9, mtime - 10**9))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout
    assert out.stat().st_mtime_ns == mtime - 10**9  # same bytes: not rewritten
    assert [p.name for p in out.parent.iterdir()] == ["k.hpp"]  # no temporary left behind


@needs_cxx
@pytest.mark.skipif(not HAVE_HWY, reason="no Highway headers")
@pytest.mark.parametrize("where", ["alone", "after_foreach_target", "after_highway_h"])
def test_highway_header_coexists_with_user_highway(tmp_path, where):
    """The Highway backend needs no -m flags and compiles alone, after the user's own highway.h, and
    after a foreach_target.h dynamic-dispatch block (Highway 1.0.3)."""
    (tmp_path / "k.hpp").write_text(synthesize_header("matmul 2x40x5 b=bf16:col c=bf16", isa="highway"))
    user_block = {
        "alone": "",
        "after_highway_h": "#include <hwy/highway.h>\n",
        "after_foreach_target": (
            '#undef HWY_TARGET_INCLUDE\n#define HWY_TARGET_INCLUDE "t.cpp"\n#include <hwy/foreach_target.h>\n'
            "#include <hwy/highway.h>\nHWY_BEFORE_NAMESPACE();\nnamespace user { namespace HWY_NAMESPACE {\n"
            "namespace hn = hwy::HWY_NAMESPACE;\n"
            "inline float First(const float* p) { return hn::GetLane(hn::LoadU(hn::ScalableTag<float>(), p)); }\n"
            "} }\nHWY_AFTER_NAMESPACE();\n"
        ),
    }[where]
    src = (
        user_block
        + ("#if HWY_ONCE\n" if where == "after_foreach_target" else "")
        + (
            '#include "k.hpp"\nint main() { float a[80] = {}; uint16_t b[400] = {}; uint16_t c[10];\n'
            "  morello::kernel(a, b, c); return c[0]; }\n"
        )
        + ("#endif\n" if where == "after_foreach_target" else "")
    )
    (tmp_path / "t.cpp").write_text(src)
    r = subprocess.run(
        [*cxx().split(), "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", "-I.", "-c", "t.cpp", "-o", "t.o"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert r.returncode == 0, r.stdout[-10000:]


@pytest.mark.skipif("g++" not in cxx(), reason="the instruction counts are GCC's")
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("b", ["bf16", "f32"])
def test_rows_kernel_loads_each_shared_vector_once(isa, b, tmp_path):
    """A rows kernel over 4 rows and 2 columns loads each A chunk once for both columns (and an f32 B chunk
    once for the 4 rows): no FMA takes a memory operand (GCC folded the loads into each FMA, an A load per
    column and chunk; 4x2048x256 bf16 with 3 columns a kernel on Zen 4 ran 2x slower warm)."""
    from tests.test_rows import _forced

    spec = f"matmul 4x256x4 b={b}:col serial"
    impl, target = _forced(spec, f"dot_{b}_rows", 2, isa)
    (tmp_path / "k.hpp").write_text(emit_header(parse_spec(spec), impl, target, name="k"))
    asm = _assembly(tmp_path, '#include "k.hpp"\nvoid (*volatile keep_it)(void* const*) = morello::k_call;\n')
    fmas = re.findall(r"\tvfmadd\w+\t[^\n]*", asm)
    assert len(fmas) >= 8, fmas
    assert not [f for f in fmas if "(" in f], fmas
