"""Runtime ISA dispatch (--isa dispatch): one header per spec with a program per ISA level.

One test program checks three dispatch headers (f32 with odd sizes, bf16 weights, bf16 activations and
output; small, since each is searched for every level) against their reference loops. It is compiled once
and run with every value of MORELLO_ISA: each level this CPU supports must run and be correct; a level it
lacks, or an unknown name, must fall back to the best supported level with one line on stderr per kernel,
exit 0, and still be correct.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from morello_build.check.testing import CHECK_DIR, compile_program, cxx
from morello_build.ir.grammar import parse_spec
from morello_build.ir.impl import Kernel, walk
from morello_build.target import DISPATCH_LEVELS, native_isa
from morello_build.tools import api, cli

SPECS = (
    "matmul 3x3x9",  # one past a vector of 8 lanes, a ragged one of 16
    "matmul 1x24x3 b=bf16:col",  # a GEMV with bf16 weights
    "matmul 3x32x2 a=bf16 b=bf16:col c=bf16:col",  # bf16 x bf16: avx512_bf16 has its own program (vdpbf16ps)
)


@pytest.fixture(scope="module")
def dispatch_exe(tmp_path_factory):
    """The test program over the three headers, compiled once."""
    work = tmp_path_factory.mktemp("dispatch")
    lines = ['#include "check.hpp"']
    calls = []
    for i, spec in enumerate(SPECS):
        text = api.synthesize_header(spec, isa="dispatch", name=f"k{i}", namespace="disp", db=os.environ["MORELLO_DB"])
        (work / f"k{i}.hpp").write_text(text)
        lines.append(f'#include "k{i}.hpp"')
        cols = ", ".join("true" if lay == "col" else "false" for lay in parse_spec(spec).layouts)
        calls.append(f"  failures += MORELLO_CHECK_KERNEL(disp, k{i}, {cols});")
        calls.append(f'  std::printf("variant k{i} %s\\n", disp::k{i}_variant());')
    lines += ["int main() {", "  int failures = 0;", *calls, "  return failures != 0;", "}", ""]
    (work / "main.cpp").write_text("\n".join(lines))
    exe = work / "main"
    flags = ["-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{CHECK_DIR}", f"-I{work}"]
    subprocess.run([*cxx().split(), *flags, str(work / "main.cpp"), "-o", str(exe), "-pthread"], check=True)
    return exe, work


# Weight formats through dispatch (issue 21): each header checked by the CMake TEST program (the template
# kernel_test.cpp.in, configured here as morello_add_kernel does), which fills the format's arrays with valid
# bytes and compares with the reference loop: the integer path (aquant), a grouped dequantization with zero
# points and M = 2 (the rows kernel), and sfp's and e4m3's 16-bit-lane decoding (-Werror: GCC 12 warns about
# some unmasked AVX-512 intrinsics).
FORMAT_SPECS = (
    "matmul 1x64x3 b=q4_0 aquant=i8",
    "matmul 2x40x3 b=i4:col group=8 scales=bf16 zero",
    "matmul 1x45x2 b=sfp:col",
    "matmul 1x37x3 b=e4m3:col",
)


@pytest.fixture(scope="module")
def format_exes(tmp_path_factory):
    """One CMake-TEST program per FORMAT_SPECS dispatch header, compiled once."""
    import morello_build

    work = tmp_path_factory.mktemp("dispatch_formats")
    template = (Path(morello_build.__file__).parent / "cmake" / "templates" / "kernel_test.cpp.in").read_text()
    exes = []
    for i, spec in enumerate(FORMAT_SPECS):
        name = f"f{i}"
        text = api.synthesize_header(spec, isa="dispatch", name=name, namespace="dispf", db=os.environ["MORELLO_DB"])
        (work / f"{name}.hpp").write_text(text)
        values = {"TARGET": name, "NAMESPACE": "dispf", "NAME": name, "HEADER": f"{name}.hpp", "SPEC": spec}
        src = template
        for key, value in values.items():
            src = src.replace(f"@MORELLO_{key}@", value)
        (work / f"{name}.cpp").write_text(src)
        # C++11, as morello_add_kernel's TEST target (the last -std wins)
        built = compile_program(work / f"{name}.cpp", work / name, includes=(work,), extra_flags=("-std=c++11",))
        assert built.ok, built.output[-6000:]
        exes.append(work / name)
    return exes


def _expected(forced: str | None) -> tuple[str, bool]:
    """The level the kernels run with MORELLO_ISA=forced on this CPU, and whether a message is due."""
    best = DISPATCH_LEVELS.index(native_isa()) if native_isa() in DISPATCH_LEVELS else len(DISPATCH_LEVELS) - 1
    if not forced:
        return DISPATCH_LEVELS[best], False
    if forced in DISPATCH_LEVELS and DISPATCH_LEVELS.index(forced) >= best:
        return forced, False
    return DISPATCH_LEVELS[best], True


@pytest.mark.parametrize("forced", [None, *DISPATCH_LEVELS, "bogus"])
def test_every_variant_matches_the_reference(dispatch_exe, forced):
    exe, _ = dispatch_exe
    env = {k: v for k, v in os.environ.items() if k != "MORELLO_ISA"}
    if forced:
        env["MORELLO_ISA"] = forced
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    level, message = _expected(forced)
    for i in range(len(SPECS)):
        assert f"variant k{i} {level}\n" in r.stdout
    assert "FAIL" not in r.stdout and "SKIP" not in r.stdout
    errors = r.stderr.splitlines()
    if message:  # one line per kernel, naming the variable, the value and the level used instead
        assert len(errors) == len(SPECS), r.stderr
        assert all(e.startswith(f"morello: MORELLO_ISA={forced}: ") and e.endswith(f"uses {level}") for e in errors)
        assert ("this CPU lacks it" in errors[0]) == (forced != "bogus")
    else:
        assert errors == []


@pytest.mark.parametrize("forced", [None, *DISPATCH_LEVELS])
def test_format_kernels_match_the_reference_at_every_level(format_exes, forced):
    env = {k: v for k, v in os.environ.items() if k != "MORELLO_ISA"}
    if forced:
        env["MORELLO_ISA"] = forced
    _, message = _expected(forced)
    for exe, spec in zip(format_exes, FORMAT_SPECS):
        r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0 and "PASS:" in r.stdout, (spec, forced, r.stdout + r.stderr)
        assert bool(r.stderr) == message, (spec, forced, r.stderr)


# What a compiler without AVX-VNNI (GCC 10, Clang 11) leaves undefined: avxvnniintrin.h's include guard. Included
# first, <immintrin.h>'s own guard keeps the headers from including it again.
_HIDE_AVXVNNI = "#include <immintrin.h>\n#undef _AVXVNNIINTRIN_H_INCLUDED\n#undef __AVXVNNIINTRIN_H\n"


def test_a_compiler_without_avx_vnni_leaves_its_level_out(format_exes, tmp_path):
    """The q4_0 aquant dispatch header has avx2_vnni code of its own: where the compiler lacks AVX-VNNI's
    intrinsics it compiles without that level (whose CPU check then says no) and runs the next one; a one-ISA
    avx2_vnni header stops at an #error line naming what it needs."""
    hide = tmp_path / "hide_avxvnni.h"
    hide.write_text(_HIDE_AVXVNNI)
    src = format_exes[0].with_suffix(".cpp")
    work = src.parent
    compilers = [cxx().split()] + ([["clang++"]] if shutil.which("clang++") else [])  # each names its guard
    for compiler, hidden in itertools.product(compilers, (False, True)):
        extra = ("-include", str(hide)) if hidden else ()
        pre = subprocess.run(
            [*compiler, "-std=c++17", "-E", f"-I{work}", *extra, str(src)], capture_output=True, text=True
        )
        assert pre.returncode == 0 and ("namespace avx2_vnni" in pre.stdout) != hidden, (compiler, pre.stderr[-2000:])
    exe = tmp_path / "hidden"
    built = compile_program(src, exe, includes=(work,), extra_flags=("-std=c++11", "-include", str(hide)))
    assert built.ok, built.output[-6000:]
    env = {k: v for k, v in os.environ.items() if k != "MORELLO_ISA"}
    for forced in ("avx2_vnni", None):
        r = subprocess.run(
            [str(exe)],
            capture_output=True,
            text=True,
            env={**env, **({"MORELLO_ISA": forced} if forced else {})},
            timeout=120,
        )
        assert r.returncode == 0 and "PASS:" in r.stdout, (forced, r.stdout + r.stderr)
        assert bool(r.stderr) == (forced == "avx2_vnni"), r.stderr  # "this CPU lacks it": the level is left out
    (tmp_path / "one.hpp").write_text(api.synthesize_header(FORMAT_SPECS[0], isa="avx2_vnni", threads=1))
    one = tmp_path / "one.cpp"
    one.write_text('#include "one.hpp"\nint main() { return 0; }\n')
    r = subprocess.run(
        [*cxx().split(), "-std=c++17", "-fsyntax-only", "-include", str(hide), str(one)], capture_output=True, text=True
    )
    errors = [ln for ln in r.stderr.splitlines() if ": error: " in ln]
    assert r.returncode != 0 and errors and "build with GCC 11 / Clang 12 or later," in errors[0], r.stderr[-2000:]


def test_header_states_each_variant(dispatch_exe):
    _, work = dispatch_exe
    f32, bf16_weights, bf16_act = ((work / f"k{i}.hpp").read_text() for i in range(3))
    assert 'static constexpr const char* isa = "dispatch";' in f32
    assert "//   avx512_bf16: the avx512 program" in f32  # no bf16 x bf16 product: the same search
    assert "//   avx512_bf16:\n" in bf16_act  # A and B bf16: its own program (vdpbf16ps)
    assert "The loosest variant is avx512_bf16: vdpbf16ps" in bf16_act
    for text in (f32, bf16_weights, bf16_act):
        assert "inline bool k" in text and "_supported() { return true; }" in text


def test_cli_explain_dispatch(capsys):
    assert cli.main(["explain", SPECS[0], "--isa", "dispatch"]) == 0
    out = capsys.readouterr().out
    assert [ln for ln in out.splitlines() if ln.startswith("## ")] == [
        "## avx512_bf16: the avx512 program",
        "## avx512_vnni: the avx512 program",
        "## avx512",
        "## avx2_vnni: the avx2 program",
        "## avx2",
        "## scalar",
    ]


def test_avx512_bf16_reuses_avx512s_program_only_where_its_own_kernels_cannot_serve():
    """search_isa: avx512_bf16's extra kernels are the bf16 x bf16 and the VNNI integer dot kernels; an aquant
    spec's level gets avx512_vnni's search (it used to take avx512's program, without VNNI; avx512_vnni has the
    same VNNI kernels), a plain one reuses avx512's."""
    from morello_build.target import get_target

    extra = {k.name for k in get_target("avx512_bf16").kernels()} - {k.name for k in get_target("avx512").kernels()}
    assert extra == {"dot_bf16_dp", "dot_bf16_dp_pair", *(n for n in extra if n.startswith("dot_int"))}, extra
    assert api.search_isa(parse_spec("matmul 3x32x2 a=bf16 b=bf16:col"), "avx512_bf16") == "avx512_bf16"
    for spec in ("matmul 1x64x3 b=q4_0 aquant=i8", "gated 2x64x3 b=q8_0:col aquant=i8"):
        assert api.search_isa(parse_spec(spec), "avx512_bf16") == "avx512_vnni", spec
    for spec in ("matmul 3x3x9", "matmul 1x24x3 b=bf16:col", "matmul 1x64x3 b=q4_0", "matmul 2x9x3 a=bf16 b=f32"):
        assert api.search_isa(parse_spec(spec), "avx512_bf16") == "avx512", spec
    _, variants = api.synthesize_variants(FORMAT_SPECS[0], db=os.environ["MORELLO_DB"])  # q4_0, aquant=i8
    level = next(v for v in variants if v.level == "avx512_bf16")
    assert level.code == "avx512_vnni"
    kernels = {n.name for n in walk(level.impl) if isinstance(n, Kernel)}
    assert kernels & extra, kernels
