"""Configure-time errors of morello_add_kernel(): every bad argument fails `cmake` with a message naming
morello_add_kernel, the target and the bad token. Also the find_package() failure modes.

Runs the package's own CMake config (the package directory this test imports, so it works from a
source checkout, an editable install or a wheel) with MorelloBuild_PYTHON set to this interpreter:
no install needed, LANGUAGES NONE, about 0.5 s per case.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from morello_build.tools.cmake_dir import package_cmake_dir

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")

GOOD = '"matmul 4x8x16"'

CASES = {
    # id: (the call(s), substrings the error must contain)
    "unknown_keyword": (
        f"morello_add_kernel(k SPEC {GOOD} FOO)",
        [
            "morello_add_kernel(k)",
            "unknown argument 'FOO'",
            "NAMESPACE, ISA, THREADS, PROFILE, TUNE, DB, EXPORT; quote the spec",
        ],
    ),
    "lowercase_keyword": (
        f"morello_add_kernel(k SPEC {GOOD} test)",
        ["morello_add_kernel(k)", "unknown argument 'test'"],
    ),
    "unquoted_spec": (
        "morello_add_kernel(k SPEC matmul 4x8x16)",
        ["morello_add_kernel(k)", "unknown argument '4x8x16'", "quote the spec"],
    ),
    "missing_spec": ("morello_add_kernel(k NAME fn TEST)", ["morello_add_kernel(k)", "missing SPEC"]),
    "spec_without_value": ("morello_add_kernel(k TEST SPEC)", ["morello_add_kernel(k)", "SPEC needs a value"]),
    "empty_spec": ('morello_add_kernel(k SPEC " ")', ["morello_add_kernel(k)", "SPEC is empty"]),
    "empty_string_spec": ('morello_add_kernel(k SPEC "")', ["morello_add_kernel(k)", "SPEC is empty"]),
    "empty_string_export": (
        f'morello_add_kernel(k SPEC {GOOD} EXPORT "")',
        ["morello_add_kernel(k)", "EXPORT is empty"],
    ),
    "nothing_but_the_name": ("morello_add_kernel(k)", ["morello_add_kernel(k)", "missing SPEC"]),
    "spec_twice": (
        f"morello_add_kernel(k SPEC {GOOD} SPEC {GOOD})",
        ["morello_add_kernel(k)", "SPEC given more than once"],
    ),
    "bad_shape": ('morello_add_kernel(k SPEC "matmul 4x8")', ["morello_add_kernel(k)", "bad SPEC", "'4x8'"]),
    "bad_dtype": ('morello_add_kernel(k SPEC "matmul 4x8x16 b=bf17")', ["morello_add_kernel(k)", "bad SPEC", "bf17"]),
    "bad_layout": ('morello_add_kernel(k SPEC "matmul 4x8x16 a=f32:diag")', ["morello_add_kernel(k)", "diag"]),
    "bad_token": ('morello_add_kernel(k SPEC "matmul 4x8x16 fast")', ["morello_add_kernel(k)", "bad SPEC", "fast"]),
    "bad_op": ('morello_add_kernel(k SPEC "conv 4x8x16")', ["morello_add_kernel(k)", "bad SPEC", "conv"]),
    "bad_isa": (
        f"morello_add_kernel(k SPEC {GOOD} ISA avx9)",
        ["morello_add_kernel(k)", "bad ISA 'avx9'", "native|", "|dispatch)"],
    ),
    "isa_without_value": (f"morello_add_kernel(k SPEC {GOOD} ISA)", ["morello_add_kernel(k)", "ISA needs a value"]),
    "threads_zero": (f"morello_add_kernel(k SPEC {GOOD} THREADS 0)", ["morello_add_kernel(k)", "THREADS '0' is not"]),
    "threads_word": (
        f"morello_add_kernel(k SPEC {GOOD} THREADS abc)",
        ["morello_add_kernel(k)", "THREADS 'abc' is not a thread count from 1 to 1024"],
    ),
    "threads_too_many": (
        f"morello_add_kernel(k SPEC {GOOD} THREADS 5000)",
        ["morello_add_kernel(k)", "THREADS '5000' is not"],
    ),
    "bad_profile": (
        f"morello_add_kernel(k SPEC {GOOD} PROFILE zen9)",
        ["morello_add_kernel(k)", "PROFILE '", "zen9' is neither a file nor one of builtin|host|zen3"],
    ),
    "tune_word": (
        f"morello_add_kernel(k SPEC {GOOD} TUNE many)",
        ["morello_add_kernel(k)", "TUNE 'many' is not a number of candidates from 0 (off) to 64"],
    ),
    "tune_too_many": (f"morello_add_kernel(k SPEC {GOOD} TUNE 65)", ["morello_add_kernel(k)", "TUNE '65' is not"]),
    "tune_dispatch": (
        f"morello_add_kernel(k SPEC {GOOD} ISA dispatch TUNE 4)",
        ["morello_add_kernel(k)", "TUNE measures programs for one ISA"],
    ),
    "bad_name": (f"morello_add_kernel(k SPEC {GOOD} NAME 1fn)", ["morello_add_kernel(k)", "bad NAME '1fn'"]),
    "keyword_name": (f"morello_add_kernel(k SPEC {GOOD} NAME class)", ["morello_add_kernel(k)", "bad NAME 'class'"]),
    "bad_namespace": (
        f"morello_add_kernel(k SPEC {GOOD} NAMESPACE a::2b)",
        ["morello_add_kernel(k)", "bad NAMESPACE 'a::2b'"],
    ),
    "reserved_name": (f"morello_add_kernel(k SPEC {GOOD} NAME a__b)", ["bad NAME 'a__b': reserved"]),
    "std_namespace": (f"morello_add_kernel(k SPEC {GOOD} NAMESPACE std::x)", ["bad NAMESPACE 'std::x': reserved"]),
    "no_target": ("morello_add_kernel()", ["morello_add_kernel", "missing target name"]),
    "keyword_as_target": (
        f"morello_add_kernel(SPEC {GOOD})",
        ["morello_add_kernel", "missing target name before 'SPEC'"],
    ),
    "bad_target_name": (f"morello_add_kernel(a/b SPEC {GOOD})", ["morello_add_kernel(a/b)", "bad target name 'a/b'"]),
    "existing_target": (
        f"add_custom_target(k)\nmorello_add_kernel(k SPEC {GOOD})",
        ["morello_add_kernel(k)", "a target named 'k' already exists"],
    ),
    "helper_name_taken": (
        f"add_custom_target(k_test)\nmorello_add_kernel(k SPEC {GOOD} TEST)",
        ["morello_add_kernel(k)", "'k_test' is already taken"],
    ),
}


def configure(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.23)\nproject(bad LANGUAGES NONE)\n"
        "find_package(MorelloBuild CONFIG REQUIRED)\n" + body + "\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CMAKE_GENERATOR", "MorelloBuild_DIR")}
    cmd = [
        "cmake",
        "-S",
        str(src),
        "-B",
        str(tmp_path / "build"),
        f"-DMorelloBuild_DIR={package_cmake_dir()}",
        f"-DMorelloBuild_PYTHON={sys.executable}",
        *args,
    ]
    return subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path, timeout=120
    )


def one_line(text: str) -> str:
    """CMake wraps long messages: join them back (whitespace-insensitive matching)."""
    return " ".join(text.split())


@pytest.mark.parametrize("case", list(CASES))
def test_bad_arguments_fail_configure(tmp_path, case):
    body, expected = CASES[case]
    p = configure(tmp_path, body)
    assert p.returncode != 0, p.stdout
    out = one_line(p.stdout)
    assert "CMake Error" in out
    for text in expected:
        assert one_line(text) in out, p.stdout
    assert "Generating done" not in out
    assert "out of range" not in out  # no raw CMake error from inside the package
    assert "CMP0174" not in out  # CMake >= 3.31: the package sets the policy, not its callers


@pytest.mark.parametrize(
    "package,call,expected",
    [
        ("benchmark", f"morello_add_kernel(k SPEC {GOOD} BENCHMARK)", "BENCHMARK needs Google Benchmark"),
        ("hwy", f"morello_add_kernel(k SPEC {GOOD} ISA highway)", "ISA highway needs Google Highway"),
    ],
)
def test_missing_dependency_fails_configure(tmp_path, package, call, expected):
    p = configure(tmp_path, "enable_language(CXX)\n" + call, f"-DCMAKE_DISABLE_FIND_PACKAGE_{package}=ON")
    assert p.returncode != 0
    assert f"morello_add_kernel(k): {expected}" in one_line(p.stdout), p.stdout


def test_good_arguments_configure(tmp_path):
    """The control: every keyword used correctly configures (no language: no TEST/BENCHMARK targets)."""
    body = (
        f'morello_add_kernel(k-1.x SPEC "matmul 2x4x8 b=bf16:col accum" NAME fn NAMESPACE a::b ISA scalar '
        f"DB none EXPORT Set NO_INSTALL)\n"
        'get_target_property(n k-1.x MORELLO_NAME)\nmessage(STATUS "name=${n}")\n'
        f"morello_add_kernel(class SPEC {GOOD})\n"
        'get_target_property(n class MORELLO_NAME)\nmessage(STATUS "default name=${n}")\n'
    )
    p = configure(tmp_path, "enable_language(CXX)\n" + body)
    assert p.returncode == 0, p.stdout
    assert "-- name=fn" in p.stdout and "-- default name=class_kernel" in p.stdout, p.stdout


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_threads_reach_the_generator_with_test_and_benchmark(tmp_path):
    """THREADS N is passed to the generator as --threads N (the .args file carries the command), is the
    MORELLO_THREADS property, and TEST and BENCHMARK still add their targets. (The two_kernels project of
    test_cmake.py builds and runs a THREADS 16 kernel's test.)"""
    body = (
        "enable_language(CXX)\n"
        f"morello_add_kernel(k SPEC {GOOD} THREADS 16 TUNE 4 TEST BENCHMARK DB none)\n"
        f"morello_add_kernel(d SPEC {GOOD} DB none)\n"
        "get_target_property(t k MORELLO_THREADS)\nget_target_property(u d MORELLO_THREADS)\n"
        'message(STATUS "threads=${t} default=${u}")\n'
        'foreach(x k_test k_benchmark)\n  if(TARGET ${x})\n    message(STATUS "has ${x}")\n  endif()\nendforeach()\n'
    )
    p = configure(tmp_path, body)
    if "BENCHMARK needs Google Benchmark" in p.stdout:
        pytest.skip("Google Benchmark not installed")
    assert p.returncode == 0, p.stdout
    assert "-- threads=16 default=native" in p.stdout and "-- has k_test" in p.stdout, p.stdout
    assert "-- has k_benchmark" in p.stdout, p.stdout
    args = (tmp_path / "build" / "morello" / "k.args").read_text().splitlines()
    assert args[args.index("--threads") + 1] == "16", args
    assert args[args.index("--tune") + 1] == "4", args
    assert "--threads" not in (tmp_path / "build" / "morello" / "d.args").read_text().splitlines()
    assert "--tune" not in (tmp_path / "build" / "morello" / "d.args").read_text().splitlines()


@pytest.mark.parametrize("word", ["none", "off", "OFF", "no", "0", "false"])
def test_db_is_disabled_by_any_false_word(tmp_path, word):
    """if(<var>) would read off/no/0 as false and silently fall back to the default per-user DB."""
    body = (
        "enable_language(CXX)\n"
        f"morello_add_kernel(own SPEC {GOOD} DB {word})\n"
        f"morello_add_kernel(global SPEC {GOOD})\n"
        f"morello_add_kernel(path SPEC {GOOD} DB my.db)\n"
    )
    p = configure(tmp_path, body, f"-DMorelloBuild_DB={word}")
    assert p.returncode == 0, p.stdout
    args = {
        k: (tmp_path / "build" / "morello" / f"{k}.args").read_text().splitlines() for k in ("own", "global", "path")
    }
    for k in ("own", "global"):
        assert args[k][args[k].index("--db") + 1] == "none", args[k]
    assert args["path"][args["path"].index("--db") + 1] == str(tmp_path / "src" / "my.db")


def test_bad_python_override_fails_find_package(tmp_path):
    p = configure(tmp_path, "", "-DMorelloBuild_PYTHON=/nonexistent/python3")
    assert p.returncode != 0
    out = one_line(p.stdout)
    assert "MorelloBuild_PYTHON=/nonexistent/python3 does not work" in out, p.stdout


def test_version_check(tmp_path):
    import morello_build

    major, minor = morello_build.__version__.split(".")[:2]
    ok = configure(tmp_path, f"find_package(MorelloBuild {major}.{minor} CONFIG REQUIRED)")
    assert ok.returncode == 0, ok.stdout
    too_new = configure(tmp_path, f"find_package(MorelloBuild {int(major) + 1}.0 CONFIG REQUIRED)")
    assert too_new.returncode != 0 and "version" in too_new.stdout.lower(), too_new.stdout


def test_cmake_and_python_refuse_the_same_cxx_keywords(tmp_path):
    """Both read cmake/cxx_keywords.txt: MorelloBuildFunctions.cmake at configure time, the CLI through
    codegen.CXX_KEYWORDS. A keyword from the file (the last one, not the 'class' of CASES) fails both."""
    from morello_build.codegen import CXX_KEYWORDS, is_cxx_identifier

    listed = (Path(package_cmake_dir()) / "cxx_keywords.txt").read_text().split()
    assert set(listed) == CXX_KEYWORDS and {"class", "co_await", "xor_eq"} <= CXX_KEYWORDS
    word = listed[-1]
    assert not is_cxx_identifier(word)
    p = configure(tmp_path, f"morello_add_kernel(k SPEC {GOOD} NAME {word})")
    assert p.returncode != 0 and f"bad NAME '{word}'" in one_line(p.stdout), p.stdout


def test_profile_reaches_the_generator(tmp_path):
    """PROFILE NAME and PROFILE FILE (relative to the source dir, absolute in the command, a dependency of the
    header) reach the generator as --profile; the cache variable MorelloBuild_PROFILE is the default."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "host.json").write_text('{"morello_profile": 1}')
    body = (
        "enable_language(CXX)\n"
        f"morello_add_kernel(named SPEC {GOOD} PROFILE zen3 DB none)\n"
        f"morello_add_kernel(file SPEC {GOOD} PROFILE host.json DB none)\n"
        f"morello_add_kernel(default SPEC {GOOD} DB none)\n"
        "get_target_property(p file MORELLO_PROFILE)\n"
        'message(STATUS "profile=${p}")\n'
    )
    p = configure(tmp_path, body, "-DMorelloBuild_PROFILE=builtin")
    assert p.returncode == 0, p.stdout
    args = {k: (tmp_path / "build" / "morello" / f"{k}.args").read_text().splitlines() for k in ("named", "file")}
    assert args["named"][args["named"].index("--profile") + 1] == "zen3"
    assert args["file"][args["file"].index("--profile") + 1] == str(tmp_path / "src" / "host.json")
    default = (tmp_path / "build" / "morello" / "default.args").read_text().splitlines()
    assert default[default.index("--profile") + 1] == "builtin"
    assert f"-- profile={tmp_path / 'src' / 'host.json'}" in p.stdout
