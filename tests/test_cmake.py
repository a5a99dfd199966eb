"""End-to-end CMake integration: real cmake, real compilers, the package pip-installed into a fresh venv.

What is covered (issue 4):
* find_package(MorelloBuild) with no hints in an activated fresh venv (wheel install), through
  ``--cmakedir`` without one, and through the editable install the tests run from;
* the gemma GEMV example built with Ninja and with Unix Makefiles, its ctests, demo and benchmark;
* incremental builds: a no-op build runs nothing, touching a CMakeLists without changing a spec compiles
  nothing, changing one spec regenerates only that kernel, touching the generator regenerates headers
  but recompiles nothing when their bytes do not change;
* two kernels in different directories (built at C++11), install + export + a downstream find_package of the
  exports;
* a build-time generator failure names the spec and the reason.
Bad arguments (configure-time errors) are in test_cmake_args.py.

Time: one fresh venv and one wheel per session (~15 s), then each project builds with -j2.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import morello_build

REPO = Path(__file__).resolve().parents[1]
PROJECTS = Path(__file__).resolve().parent / "cmake_projects"
EXAMPLE = REPO / "examples" / "gemma_gemv"
JOBS = "2"

# slow: minutes of CMake builds (under xdist --dist loadfile, one worker runs them all: they share the fresh venv).
pytestmark = [pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed"), pytest.mark.slow]


# -- helpers -------------------------------------------------------------------------------------------
def run(cmd, env=None, cwd=None, check=True, timeout=600) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [str(c) for c in cmd],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    if check and p.returncode != 0:
        raise AssertionError(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout[-6000:]}")
    return p


def clean_env(path_prefix: list[Path] | None = None, **extra) -> dict:
    """The environment minus any active venv and CMake hints, with path_prefix first on PATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "VIRTUAL_ENV",
            "PYTHONPATH",
            "PYTHONHOME",
            "CMAKE_PREFIX_PATH",
            "MorelloBuild_DIR",
            "CMAKE_GENERATOR",
            "MAKEFLAGS",
        )
    }
    dirs = [
        d for d in env.get("PATH", "").split(os.pathsep) if d and Path(d).resolve() != Path(sys.prefix, "bin").resolve()
    ]
    env["PATH"] = os.pathsep.join([str(p) for p in (path_prefix or [])] + dirs)
    # hermetic: the test run's synthesis DB (tests/conftest.py), never the per-user cache; builds of the same
    # kernels (the example with each generator, two_kernels in several tests) then search each spec once
    env["MORELLO_DB"] = os.environ.get("MORELLO_DB") or "none"
    env.update(extra)
    return env


def configure(src: Path, build: Path, env: dict, generator="Ninja", *args) -> subprocess.CompletedProcess:
    return run(["cmake", "-S", src, "-B", build, "-G", generator, "-DCMAKE_BUILD_TYPE=Release", *args], env=env)


def build(build_dir: Path, env: dict, check=True) -> subprocess.CompletedProcess:
    return run(["cmake", "--build", build_dir, "-j", JOBS], env=env, check=check)


def synthesized(output: str) -> list[str]:
    """Targets whose generator ran, from the custom commands' comments."""
    return re.findall(r"morello: synthesizing (\S+) ", output)


def compiled(output: str) -> list[str]:
    return re.findall(r"Building CXX object (\S+)", output)


def copy_projects(tmp_path: Path) -> Path:
    dest = tmp_path / "projects"
    shutil.copytree(PROJECTS, dest)
    return dest


def have_generator(name: str) -> bool:
    return shutil.which({"Ninja": "ninja", "Unix Makefiles": "make"}[name]) is not None


# -- the fresh venv --------------------------------------------------------------------------------------
class Venv:
    def __init__(self, root: Path):
        self.root = root
        self.bin = root / "bin"
        self.python = self.bin / "python"

    def env(self, **extra) -> dict:
        """An activated venv: VIRTUAL_ENV set and its bin first on PATH, nothing else pointing at morello."""
        e = clean_env([self.bin], **extra)
        e["VIRTUAL_ENV"] = str(self.root)
        return e


def _python_with_scikit_build_core() -> str | None:
    for py in dict.fromkeys([sys.executable, getattr(sys, "_base_executable", sys.executable)]):
        if subprocess.run([py, "-c", "import scikit_build_core"], capture_output=True).returncode == 0:
            return py
    return None


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory) -> Venv:
    """A new venv with morello-build pip-installed from a wheel built from this checkout (not editable).

    The wheel is built without build isolation when an interpreter here has scikit-build-core (no network
    needed), else with it (pip fetches scikit-build-core). Runtime dependencies (jinja2, rich) are borrowed
    from the test interpreter's site-packages through a .pth file appended after the venv's own, so the
    install itself is `pip install --no-deps --no-index` and needs no network.
    """
    root = tmp_path_factory.mktemp("fresh-venv")
    wheels = root / "wheels"
    builder = _python_with_scikit_build_core()
    cmd = [builder or sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, REPO]
    if builder:
        cmd.insert(5, "--no-build-isolation")
    run(cmd, env=clean_env(), cwd=root)
    (wheel,) = wheels.glob("morello_build-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name

    venv = Venv(root / "venv")
    run([sys.executable, "-m", "venv", venv.root], env=clean_env())
    site = run([venv.python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    borrowed = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    Path(site, "zz_borrowed_deps.pth").write_text("".join(f"{p}\n" for p in borrowed))
    run([venv.python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel], env=venv.env())
    where = run([venv.python, "-c", "import morello_build; print(morello_build.__file__)"], env=venv.env(), cwd=root)
    assert Path(where.stdout.strip()).is_relative_to(venv.root), where.stdout
    return venv


# -- find_package -----------------------------------------------------------------------------------------
def test_wheel_installs_cmake_config(fresh_venv):
    data = fresh_venv.root / "share" / "cmake" / "MorelloBuild"
    assert sorted(p.name for p in data.iterdir()) == [
        "MorelloBuildConfig.cmake",
        "MorelloBuildConfigVersion.cmake",
        "MorelloBuildPython.cmake",
    ]
    out = run([fresh_venv.python, "-m", "morello_build", "--cmakedir"], env=clean_env(), cwd=fresh_venv.root)
    assert Path(out.stdout.strip()) == data


def test_cmakedir_without_activated_venv(fresh_venv, tmp_path):
    """-DMorelloBuild_DIR=$(python -m morello_build --cmakedir), no venv on PATH: the venv's Python runs."""
    projects = copy_projects(tmp_path)
    cmakedir = run(
        [fresh_venv.python, "-m", "morello_build", "--cmakedir"], env=clean_env(), cwd=tmp_path
    ).stdout.strip()
    env = clean_env()
    out = configure(projects / "two_kernels", tmp_path / "b", env, "Ninja", f"-DMorelloBuild_DIR={cmakedir}")
    assert f"(Python: {fresh_venv.bin / 'python3'})" in out.stdout, out.stdout


def test_package_dir_config_finds_its_python(fresh_venv, tmp_path):
    """MorelloBuild_DIR pointing into site-packages: the config derives the venv from its own path."""
    projects = copy_projects(tmp_path)
    pkg = run(
        [fresh_venv.python, "-c", "import morello_build.tools.cmake_dir as m; print(m.package_cmake_dir())"],
        env=clean_env(),
        cwd=tmp_path,
    ).stdout.strip()
    out = configure(projects / "two_kernels", tmp_path / "b", clean_env(), "Ninja", f"-DMorelloBuild_DIR={pkg}")
    assert f"(Python: {fresh_venv.bin / 'python3'})" in out.stdout, out.stdout


def test_editable_install_of_the_test_interpreter(tmp_path):
    """The interpreter running the tests (an editable install in development and CI) works too."""
    data = Path(sys.prefix, "share", "cmake", "MorelloBuild")
    if not (Path(sys.prefix) / "pyvenv.cfg").exists():
        pytest.skip("tests are not running in a venv")
    if not data.is_dir():
        pytest.fail(f"{data} is missing: reinstall the package (pip install -e .) to install the CMake config")
    projects = copy_projects(tmp_path)
    env = clean_env([Path(sys.prefix, "bin")], VIRTUAL_ENV=sys.prefix)
    out = configure(projects / "two_kernels", tmp_path / "b", env)
    pkg = Path(morello_build.__file__).resolve().parent / "cmake"
    assert f"Found MorelloBuild {morello_build.__version__}: {pkg} " in out.stdout, out.stdout


# -- the example ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("generator", ["Ninja", "Unix Makefiles"])
def test_example_builds_tests_and_runs(fresh_venv, tmp_path, generator):
    if not have_generator(generator):
        pytest.skip(f"{generator} not installed")
    env = fresh_venv.env()
    src, b = tmp_path / "example", tmp_path / "build"
    shutil.copytree(EXAMPLE, src)
    out = configure(src, b, env, generator)
    assert f"Found MorelloBuild {morello_build.__version__}: " in out.stdout
    cache = (b / "CMakeCache.txt").read_text()
    assert f"MorelloBuild_DIR:PATH={fresh_venv.root / 'share' / 'cmake' / 'MorelloBuild'}" in cache

    first = build(b, env)
    assert synthesized(first.stdout) == ["gemma_gemv"], first.stdout
    header = b / "morello" / "include" / "morello" / "gemma_gemv.hpp"
    assert re.search(r"Spec: +matmul 1x2048x16384 .*b=bf16:col", header.read_text()[:1000])

    tests = run(["ctest", "--test-dir", b, "--output-on-failure"], env=env)
    assert "100% tests passed" in tests.stdout, tests.stdout
    supported = "Skipped" not in tests.stdout
    if supported:
        demo = run([b / "gemv_demo", "--min-time", "0.05"], env=env)
        assert "check: ok" in demo.stdout and "GB/s of weights" in demo.stdout, demo.stdout
        bench = run([b / "gemma_gemv_benchmark", "--benchmark_min_time=0.01"], env=env)
        for name in ("gemma::gemv/real_time", "gemma::gemv/serial/real_time", "gemma::gemv_reference/real_time"):
            assert name in bench.stdout, bench.stdout
        assert re.search(r"GB=[0-9.]+[kMG]?/s", bench.stdout) and re.search(r"GFLOP=[0-9.]+[kMG]?/s", bench.stdout)

    # A second build runs nothing; reconfiguring after touching the CMakeLists compiles nothing.
    again = build(b, env)
    assert not synthesized(again.stdout) and not compiled(again.stdout), again.stdout
    os.utime(src / "CMakeLists.txt", None)
    again = build(b, env)
    assert "-- Configuring done" in again.stdout, again.stdout  # CMake reran
    assert not synthesized(again.stdout) and not compiled(again.stdout), again.stdout


# -- incremental builds ---------------------------------------------------------------------------------------
def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def _build_two_kernels(venv: Venv, tmp_path: Path, generator="Ninja", *args):
    projects = copy_projects(tmp_path)
    src, b, env = projects / "two_kernels", tmp_path / "build", venv.env()
    configure(src, b, env, generator, *args)
    first = build(b, env)
    assert sorted(synthesized(first.stdout)) == ["disp", "gemv", "gq8", "small", "wi8", "wq4"], first.stdout
    return src, b, env


# The C++ standard the INTERFACE targets claim (test_runtime.py builds the same project with clang++ at it).
CXX11 = ("-DCMAKE_CXX_STANDARD=11", "-DCMAKE_CXX_STANDARD_REQUIRED=ON", "-DCMAKE_CXX_EXTENSIONS=OFF")


def test_rebuild_only_what_changed(fresh_venv, tmp_path):
    """two_kernels built once with Ninja and g++ (else the default compiler) at C++11 (each build of it is ~30
    compiles): its tests pass, it installs and exports for a downstream project, then incremental builds redo
    only what changed."""
    gxx = ("-DCMAKE_CXX_COMPILER=g++",) if shutil.which("g++") else ()
    src, b, env = _build_two_kernels(fresh_venv, tmp_path, "Ninja", *gxx, *CXX11)
    tests = run(["ctest", "--test-dir", b, "--output-on-failure"], env=env)
    assert "100% tests passed" in tests.stdout and "disp_test" in tests.stdout, tests.stdout
    _check_install_export_downstream(src, b, env, tmp_path)
    # Weight formats of B (q4_0; i8 with f16 group scales and zero points; the gated pair with q8_0 and
    # aquant=i8): their TESTs pass (or skip: 77).
    for kernel in ("wq4", "wi8", "gq8"):
        fmt = run([b / f"{kernel}_test"], env=env, check=False)
        assert fmt.returncode in (0, 77) and "MISMATCH" not in fmt.stdout, fmt.stdout
    bench = run([b / "disp_benchmark", "--benchmark_min_time=0.001"], env=env)  # ISA dispatch + BENCHMARK
    assert "morello::disp/real_time" in bench.stdout, bench.stdout
    # disp has every epilogue term: its test passes them through NAME_call (PASS, or SKIP: 77).
    epilogue = run([b / "disp_test"], env=env, check=False)
    assert epilogue.returncode in (0, 77), epilogue.stdout
    assert epilogue.returncode == 77 or 'epilogue "scale colscale bias act=gelu residual"' in epilogue.stdout

    # No-op build: nothing runs at all.
    noop = build(b, env)
    assert "ninja: no work to do." in noop.stdout, noop.stdout
    explain = run(["ninja", "-C", b, "-n", "-d", "explain"], env=env)
    assert "no work to do" in explain.stdout, explain.stdout

    # Touching the files declaring the kernels reruns CMake but no generator and no compiler.
    for f in (src / "CMakeLists.txt", src / "small" / "CMakeLists.txt", src / "gemv" / "CMakeLists.txt"):
        os.utime(f, None)
    touched = build(b, env)
    assert "-- Configuring done" in touched.stdout  # CMake reran
    assert not synthesized(touched.stdout) and not compiled(touched.stdout), touched.stdout

    # Changing one kernel's spec regenerates only that kernel, and recompiles only its users.
    header_gemv = b / "gemv" / "morello" / "include" / "morello" / "gemv.hpp"
    mtime_gemv = header_gemv.stat().st_mtime_ns
    _edit(src / "small" / "CMakeLists.txt", '"matmul 4x8x16"', '"matmul 4x8x32"')
    changed = build(b, env)
    assert synthesized(changed.stdout) == ["small"], changed.stdout
    assert sorted(Path(o).name for o in compiled(changed.stdout)) == ["main.cpp.o", "small_test.cpp.o"], changed.stdout
    assert header_gemv.stat().st_mtime_ns == mtime_gemv
    assert "matmul 4x8x32" in (b / "small" / "morello" / "include" / "morello" / "small.hpp").read_text()[:400]

    # A changed generator file reruns the generators; identical header bytes recompile nothing.
    pkg = Path(
        run(
            [fresh_venv.python, "-c", "import morello_build; print(morello_build.__file__)"], env=env, cwd=b
        ).stdout.strip()
    ).parent
    os.utime(pkg / "ir" / "spec.py", None)
    regen = build(b, env)
    assert sorted(synthesized(regen.stdout)) == ["disp", "gemv", "gq8", "small", "wi8", "wq4"], regen.stdout
    assert not compiled(regen.stdout), regen.stdout
    assert "ninja: no work to do." in build(b, env).stdout


def test_rebuild_only_what_changed_makefiles(fresh_venv, tmp_path):
    if not have_generator("Unix Makefiles"):
        pytest.skip("make not installed")
    # BUILD_TESTING=OFF: morello_add_kernel(... TEST) adds no test executables (and this test runs faster).
    src, b, env = _build_two_kernels(fresh_venv, tmp_path, "Unix Makefiles", "-DBUILD_TESTING=OFF")
    assert not (b / "small" / "small_test").exists()
    noop = build(b, env)
    assert not synthesized(noop.stdout) and not compiled(noop.stdout), noop.stdout
    os.utime(src / "gemv" / "CMakeLists.txt", None)
    touched = build(b, env)
    assert not synthesized(touched.stdout) and not compiled(touched.stdout), touched.stdout
    # Makefiles do not see command lines change: the per-kernel .args file carries the spec.
    _edit(src / "gemv" / "CMakeLists.txt", "1x64x48", "1x64x40")
    changed = build(b, env)
    assert synthesized(changed.stdout) == ["gemv"], changed.stdout
    assert [Path(o).name for o in compiled(changed.stdout)] == ["main.cpp.o"], changed.stdout


def test_target_properties_and_names(fresh_venv, tmp_path):
    src, b, env = copy_projects(tmp_path) / "two_kernels", tmp_path / "build", fresh_venv.env()
    probe = src / "probe.cmake"
    probe.write_text("""
foreach(t small gemv disp)
  foreach(p MORELLO_SPEC MORELLO_CANONICAL_SPEC MORELLO_ISA MORELLO_THREADS MORELLO_NAME MORELLO_NAMESPACE
            MORELLO_HEADER)
    get_target_property(v ${t} ${p})
    message(STATUS "probe ${t} ${p}=${v}")
  endforeach()
endforeach()
get_target_property(aliased morello::gemv ALIASED_TARGET)
message(STATUS "probe alias=${aliased}")
""")
    with (src / "CMakeLists.txt").open("a") as f:
        f.write("include(probe.cmake)\n")
    out = configure(src, b, env).stdout
    for line in [
        "probe small MORELLO_SPEC=matmul 4x8x16",
        "probe small MORELLO_NAME=small",
        "probe small MORELLO_ISA=native",
        "probe small MORELLO_NAMESPACE=morello",
        "probe small MORELLO_HEADER=morello/small.hpp",
        "probe gemv MORELLO_SPEC=matmul 1x64x48 a=f32 b=bf16:col c=f32",
        "probe gemv MORELLO_CANONICAL_SPEC=matmul 1x64x48 b=bf16:col",
        "probe gemv MORELLO_NAME=gemv_k",
        "probe gemv MORELLO_NAMESPACE=two::k",
        "probe gemv MORELLO_ISA=avx2",
        "probe disp MORELLO_ISA=dispatch",
        "probe gemv MORELLO_THREADS=16",
        "probe small MORELLO_THREADS=native",
        "probe alias=gemv",
    ]:
        assert line in out, out


# -- install + export + downstream ----------------------------------------------------------------------------
def _check_install_export_downstream(src: Path, b: Path, env: dict, tmp_path: Path) -> None:
    """two_kernels, as built in ``b`` (its tests passed), installs and exports its kernels; a downstream project
    uses them."""
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", b, "--prefix", prefix], env=env)
    assert (prefix / "include" / "morello" / "small.hpp").is_file()
    assert (prefix / "include" / "morello" / "gemv.hpp").is_file()
    cmake_dir = prefix / "lib" / "cmake" / "TwoKernels"
    assert {"TwoKernelsConfig.cmake", "TwoKernelsConfigVersion.cmake", "TwoKernelsTargets.cmake"} <= {
        p.name for p in cmake_dir.iterdir()
    }

    # Downstream: no morello-build anywhere (plain environment), only the installed package.
    plain = clean_env()
    down = src.parent / "downstream"
    out = configure(down, tmp_path / "down", plain, "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}")
    assert "downstream: morello::gemv spec 'matmul 1x64x48 a=f32 b=bf16:col c=f32' namespace two::k" in out.stdout
    build(tmp_path / "down", plain)
    assert "app: ok" in run([tmp_path / "down" / "downstream"], env=plain).stdout

    # The build-tree export works the same way.
    out = configure(
        down, tmp_path / "down-bt", plain, "Ninja", f"-DTwoKernels_DIR={b / 'morello' / 'packages' / 'TwoKernels'}"
    )
    assert "downstream: morello::gemv spec" in out.stdout


# -- build-time failures ---------------------------------------------------------------------------------------
def test_generator_failure_names_spec_and_reason(fresh_venv, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "broken.db").write_text("not a database\n")
    (src / "CMakeLists.txt").write_text("""
cmake_minimum_required(VERSION 3.23)
project(broken LANGUAGES CXX)
find_package(MorelloBuild CONFIG REQUIRED)
morello_add_kernel(k SPEC "matmul 4x8x16 b=bf16" DB broken.db)
""")
    env = fresh_venv.env()
    configure(src, tmp_path / "b", env)
    out = build(tmp_path / "b", env, check=False)
    assert out.returncode != 0
    assert "morello: synthesizing k (morello::k, ISA native): matmul 4x8x16 b=bf16" in out.stdout, out.stdout
    assert "morello-build: error: synthesis DB" in out.stdout and "broken.db" in out.stdout, out.stdout
    assert not (tmp_path / "b" / "morello" / "k.stamp").exists()


def test_run_example_script_parses():
    """scripts/run-example.sh (the README's main job) is valid bash; CI runs the real thing via the example tests."""
    run(["bash", "-n", REPO / "scripts" / "run-example.sh"])
