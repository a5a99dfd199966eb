#!/usr/bin/env bash
# The main job: synthesize, compile, test and benchmark the gemma GEMV example (examples/gemma_gemv) the
# way a user would: pip-install morello-build into a venv, then find_package(MorelloBuild) from CMake with
# the venv activated (no hints), build with Ninja, run ctest, the Google Benchmark and the demo.
#
# Idempotent, for a fresh Debian machine (as root, or with sudo): installs the Debian packages it needs,
# creates .venv if missing and `pip install -e .` unless this checkout is already installed there; CMake
# comes from pip when the system has none (or one older than 3.23).
# Environment: JOBS (build parallelism, default: all cores), BUILD_DIR (default build/gemma_gemv),
# MORELLO_REINSTALL=1 (reinstall the package), BENCHMARK_MIN_TIME (seconds, default 0.5).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build/gemma_gemv}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
BENCHMARK_MIN_TIME=${BENCHMARK_MIN_TIME:-0.5}
say() { printf '\n== %s\n' "$*"; }

# -- Debian packages: compiler, Ninja, Google Benchmark (for BENCHMARK), Python venv support ---------------
APT_PACKAGES=(g++ ninja-build libbenchmark-dev python3 python3-venv)
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# -- the venv with morello-build ------------------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
installed_here() {
  python - "$ROOT" <<'EOF' 2>/dev/null
import os, sys
import morello_build, morello_build.tools.cmake_dir as m
root = os.path.realpath(sys.argv[1])
# Imported from this checkout, with the CMake config installed in the venv (not the package-dir fallback).
ok = os.path.realpath(morello_build.__file__).startswith(root + os.sep) and m.cmake_dir() != m.package_cmake_dir()
sys.exit(0 if ok else 1)
EOF
}
if [ "${MORELLO_REINSTALL:-0}" = 1 ] || ! installed_here; then
  say "pip install -e . (into .venv)"
  python -m pip install -q --upgrade pip
  python -m pip install -q -e .
fi
cmake_ok() {
  command -v cmake >/dev/null 2>&1 || return 1
  local v; v=$(cmake --version | head -1 | awk '{print $3}')
  [ "$(printf '%s\n3.23\n' "$v" | sort -V | head -1)" = "3.23" ]
}
if ! cmake_ok; then
  say "installing CMake from PyPI into .venv"
  python -m pip install -q "cmake>=3.23"
fi
echo "morello-build $(python -m morello_build --version | awk '{print $2}'), $(cmake --version | head -1), CMake config: $(python -m morello_build --cmakedir)"

# -- configure, build, test, benchmark --------------------------------------------------------------------------
say "configure (find_package(MorelloBuild) from the activated venv, no hints)"
cmake -S examples/gemma_gemv -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
say "build: the custom command synthesizes morello/gemma_gemv.hpp, then the test, benchmark and demo compile"
cmake --build "$BUILD_DIR" -j "$JOBS"
say "ctest: the kernel against its reference loop (skipped on CPUs without the ISA), and the demo's check"
ctest --test-dir "$BUILD_DIR" --output-on-failure
say "Google Benchmark: gemma::gemv (default threads, serial) and the reference loop"
"$BUILD_DIR/gemma_gemv_benchmark" --benchmark_min_time="$BENCHMARK_MIN_TIME"
say "demo: check against a straightforward loop, weight traffic and speedup"
"$BUILD_DIR/gemv_demo"
