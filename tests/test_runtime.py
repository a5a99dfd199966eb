"""The runtime every header carries, compiled as users compile it: the default pool (its size, its bad-value
message, its tasks on distinct CPUs next to an OpenMP region that pins threads), the run-time CPU check on
every ISA, and the lowest C++ standard the CMake INTERFACE target claims (C++11), with g++ and clang++.

One small parallel kernel (scalar: the pool is the point, not the ISA) and a 1x1x1 kernel per ISA go into one
probe program; each compiler builds it once (module-scoped fixtures), and each test runs it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from morello_build.check.testing import cxx
from morello_build.target import TARGETS, cpu_flags
from morello_build.tools.api import synthesize_header

CXX_STD = "-std=c++11"  # cmake/MorelloBuildFunctions.cmake: target_compile_features(... cxx_std_11)
POOL_SPEC = "matmul 1x512x1024 a=f32 b=bf16:col c=f32"  # a parallel loop of 2 tasks, ~0.2 ms each
CALLS = 200

PROBE = r"""
#include <pthread.h>
#include <sched.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif
// Per task of the last call: the CPU it started on, and whether a pool worker (not the caller) ran it.
static std::atomic<int> task_cpu[2];
static std::atomic<bool> task_on_worker[2];
static pthread_t caller;
#define MORELLO_POOL_TASK_HOOK(t) \
  (task_cpu[(t) & 1].store(sched_getcpu()), task_on_worker[(t) & 1].store(!pthread_equal(pthread_self(), caller)))
@INCLUDES@

static int run_beside_openmp(int calls) {
  std::vector<float> a(512, 1.0f), c(1024);
  std::vector<std::uint16_t> b(512 * 1024, 0x3F80);
  int distinct = 0, worker_ran = 0, worker_cpu_clash = 0;
  double sink = 0;
  caller = pthread_self();
  for (int call = 0; call < calls; ++call) {
#ifdef _OPENMP
#pragma omp parallel reduction(+ : sink)
    for (int j = 0; j < 20000; ++j) sink += j * 1e-9 * omp_get_thread_num();
#endif
    probe::par(a.data(), b.data(), c.data());
    distinct += task_cpu[0] != task_cpu[1];
    worker_ran += task_on_worker[0] || task_on_worker[1];
    const int caller_cpu = sched_getcpu();
    for (int t = 0; t < 2; ++t) worker_cpu_clash += task_on_worker[t] && task_cpu[t] == caller_cpu;
  }
  std::printf("calls %d distinct %d worker_ran %d clash %d c0 %g sink %d\n", calls, distinct, worker_ran,
              worker_cpu_clash, double(c[0]), sink >= 0);
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (!std::strcmp(mode, "threads")) {
    const unsigned again = probe::RT::default_threads();  // a bad value is reported once
    std::printf("threads %u %u\n", probe::RT::default_pool().threads(), again);
    return 0;
  }
  if (!std::strcmp(mode, "supported")) {
@SUPPORTED@
    return 0;
  }
  return run_beside_openmp(argc > 2 ? std::atoi(argv[2]) : 100);
}
"""


def _hwy_found(compiler: str) -> bool:
    r = subprocess.run(
        [compiler, "-x", "c++", "-E", "-", "-o", os.devnull],
        input="#include <hwy/highway.h>\n",
        capture_output=True,
        text=True,
    )
    return r.returncode == 0


# The VNNI levels' headers are avx2's / avx512's but for aquant=i8, avx512_bf16's avx512's but for bf16 x bf16
# (tools.api.header_isa): their own CPU checks need such a spec.
_PROBE_SPECS = {isa: "matmul 1x32x1 b=q8_0:col aquant=i8" for isa in ("avx2_vnni", "avx512_vnni")}
_PROBE_SPECS["avx512_bf16"] = "matmul 1x32x1 a=bf16 b=bf16:col"


@pytest.fixture(scope="module")
def probe_source(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("runtime_probe")
    headers = [("par.hpp", synthesize_header(POOL_SPEC, isa="scalar", name="par", namespace="probe"))]
    isas = [isa for isa in TARGETS if isa != "highway" or _hwy_found(cxx().split()[0])]
    for isa in isas:
        spec = _PROBE_SPECS.get(isa, "matmul 1x1x1")
        headers.append((f"k_{isa}.hpp", synthesize_header(spec, isa=isa, name=f"k_{isa}", namespace="probe")))
    for name, text in headers:
        (d / name).write_text(text)
    rt = re.search(r"namespace (morello_rt_\w+) \{", headers[0][1]).group(1)
    includes = "\n".join(f'#include "{n}"' for n, _ in headers) + f"\nnamespace probe {{ namespace RT = ::{rt}; }}"
    supported = "\n".join(f'    std::printf("{i} %d\\n", int(probe::k_{i}_supported()));' for i in isas)
    src = d / "probe.cpp"
    src.write_text(PROBE.replace("@INCLUDES@", includes).replace("@SUPPORTED@", supported))
    return src


def _build(src: Path, compiler: list[str], exe: str, *flags: str) -> Path:
    out = src.parent / exe
    cmd = [
        *compiler,
        CXX_STD,
        "-O2",
        "-Wall",
        "-Wextra",
        "-pedantic",
        "-Werror",
        *flags,
        str(src),
        "-o",
        str(out),
        "-pthread",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}:\n{r.stderr[-5000:]}"
    return out


@pytest.fixture(scope="module")
def probe_gcc(probe_source) -> Path:
    """The probe built by the default compiler with OpenMP (libgomp: the runtime the issue was measured with)."""
    return _build(probe_source, cxx().split(), "probe_gcc", "-fopenmp")


def _run(exe: Path, *args: str, env=None, prefix=()) -> subprocess.CompletedProcess:
    """Runs the probe with the user's environment less MORELLO_NUM_THREADS, plus ``env``."""
    full = {k: v for k, v in os.environ.items() if k != "MORELLO_NUM_THREADS"}
    r = subprocess.run(
        [*prefix, str(exe), *args], capture_output=True, text=True, env={**full, **(env or {})}, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return r


def _threads(exe: Path, env=None, prefix=()) -> tuple[int, str]:
    """The default pool's size, and what the probe wrote on stderr."""
    r = _run(exe, "threads", env=env, prefix=prefix)
    pool, again = map(int, r.stdout.split()[1:])
    assert pool == again
    return pool, r.stderr


def test_default_pool_sizes_to_the_process_cpus(probe_gcc):
    pool, err = _threads(probe_gcc)
    assert err == "" and 1 <= pool <= len(os.sched_getaffinity(0))
    if shutil.which("taskset"):
        assert _threads(probe_gcc, prefix=("taskset", "-c", str(min(os.sched_getaffinity(0))))) == (1, "")
    assert _threads(probe_gcc, env={"MORELLO_NUM_THREADS": "3"}) == (3, "")
    # libgomp pins the main thread to one CPU before main(): the pool still sees the process's CPUs.
    assert _threads(probe_gcc, env={"OMP_PROC_BIND": "true"}) == (pool, "")


@pytest.mark.parametrize("value", ["0", "abc", "5000", "-1", "2x", ""])
def test_bad_num_threads_is_reported_once(probe_gcc, value):
    pool, err = _threads(probe_gcc, env={"MORELLO_NUM_THREADS": value})
    assert pool == _threads(probe_gcc)[0]
    assert err == f"morello: MORELLO_NUM_THREADS='{value}' is not a thread count (1..4096); using {pool}\n"


# /proc/cpuinfo's names for the features whose CPUID_BITS name differs.
_KERNEL_NAMES = {
    "sse4.2": "sse4_2",
    "pclmul": "pclmulqdq",
    "bmi": "bmi1",
    "avx512bf16": "avx512_bf16",
    "avx512vnni": "avx512_vnni",
    "avxvnni": "avx_vnni",
}


def test_cpu_check_agrees_with_the_kernel(probe_gcc):
    """NAME_supported() (cpuid + XGETBV) says what Linux says this CPU and OS support, for every ISA."""
    flags = cpu_flags()
    if not flags:
        pytest.skip("no /proc/cpuinfo")
    for line in _run(probe_gcc, "supported").stdout.splitlines():
        isa, ok = line.split()
        expected = all(_KERNEL_NAMES.get(f, f) in flags for f in TARGETS[isa].cpu_features)
        assert bool(int(ok)) == expected, isa


@pytest.mark.skipif(shutil.which("clang++") is None, reason="clang++ not installed")
def test_probe_builds_and_runs_with_clang(probe_source, probe_gcc):
    """The headers (the CPU check, the pool, each ISA's helpers) compile with clang++ in C++11 too."""
    exe = _build(probe_source, ["clang++"], "probe_clang")
    assert _threads(exe) == _threads(probe_gcc)
    assert " c0 512 " in _run(exe, "omp", "20").stdout  # without OpenMP: the pool alone
    assert _run(exe, "supported").stdout == _run(probe_gcc, "supported").stdout


@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
@pytest.mark.parametrize("places", [None, "{1},{0}"], ids=["caller_on_first_cpu", "caller_on_worker_cpu"])
def test_pool_tasks_run_on_distinct_cpus_beside_openmp(probe_gcc, places):
    """OMP_PROC_BIND=true pins the main thread (the kernel's caller) before main(): the worker must not
    inherit that mask. Each call follows an OpenMP region; the worker, when it runs a task, is never on the
    caller's CPU, and runs its task in most calls (not the caller taking both while it wakes). With
    OMP_PLACES={1},{0} the caller is pinned to CPU 1, the CPU the pool first gives its worker: the worker
    must move off it."""
    env = {"OMP_PROC_BIND": "true", "OMP_NUM_THREADS": "2", "MORELLO_NUM_THREADS": "2"}
    if places:
        env["OMP_PLACES"] = places
    r = _run(probe_gcc, "omp", str(CALLS), env=env)
    assert r.returncode == 0, r.stderr
    got = dict(zip(r.stdout.split()[::2], r.stdout.split()[1::2]))
    assert float(got["c0"]) == 512.0
    assert int(got["clash"]) == 0, r.stdout
    assert int(got["distinct"]) >= CALLS // 2 and int(got["worker_ran"]) >= CALLS // 2, r.stdout


@pytest.mark.slow
def test_cmake_consumer_builds_in_cxx11_with_clang(tmp_path):
    """A CMake project using two kernels (with their TEST programs) builds and passes at the standard the
    INTERFACE targets claim with clang++ (the editable install the tests run from); g++'s build of it at that
    standard is test_cmake.py's test_rebuild_only_what_changed."""
    from test_cmake import CXX11, build, clean_env, configure, copy_projects, run

    if shutil.which("cmake") is None or shutil.which("clang++") is None:
        pytest.skip("needs cmake and clang++")
    env = clean_env([Path(sys.prefix, "bin")], VIRTUAL_ENV=sys.prefix)
    src, b = copy_projects(tmp_path) / "two_kernels", tmp_path / "build"
    generator = "Ninja" if shutil.which("ninja") else "Unix Makefiles"
    configure(src, b, env, generator, "-DCMAKE_CXX_COMPILER=clang++", *CXX11)
    build(b, env)
    tests = run(["ctest", "--test-dir", b, "--output-on-failure"], env=env)
    assert "100% tests passed" in tests.stdout, tests.stdout
