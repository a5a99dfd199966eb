#!/usr/bin/env bash
# The Gemma decoder-layer example (examples/gemma_layer): synthesize the decode GEMVs of one Gemma 3 4B layer
# (QKV, attention output, the fused gate/up with GELU, down), build, check every output against plain loops,
# then time the layer (1 and 2 threads) against the same layer unfused and against oneDNN, and the fused
# gate/up GEMV alone against a read sweep over its weights.
#
# Idempotent, for a fresh Debian machine (as root, or with sudo): installs the Debian packages it needs,
# creates .venv if missing and `pip install -e .` unless this checkout is already installed there; CMake
# comes from pip when the system has none (or one older than 3.23).
# Environment: JOBS (build parallelism, default: all cores), BUILD_DIR (default build/gemma_layer),
# MORELLO_REINSTALL=1 (reinstall the package), MIN_TIME (seconds of timed rounds per thread count, default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build/gemma_layer}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
MIN_TIME=${MIN_TIME:-3}
say() { printf '\n== [%ss] %s\n' "$SECONDS" "$*"; }

# -- Debian packages: compiler, Ninja, Python venv support, oneDNN (the peer; its CMake config needs OpenCL's
# headers) ------------------------------------------------------------------------------------------------------
APT_PACKAGES=(g++ ninja-build python3 python3-venv libdnnl-dev ocl-icd-opencl-dev)
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
  python - "$ROOT" <<'PY' 2>/dev/null
import os, sys
import morello_build, morello_build.tools.cmake_dir as m
root = os.path.realpath(sys.argv[1])
# Imported from this checkout, with the CMake config installed in the venv (not the package-dir fallback).
ok = os.path.realpath(morello_build.__file__).startswith(root + os.sep) and m.cmake_dir() != m.package_cmake_dir()
sys.exit(0 if ok else 1)
PY
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
echo "morello-build $(python -m morello_build --version | awk '{print $2}'), $(cmake --version | head -1)"

# -- configure, build, test, run --------------------------------------------------------------------------------
say "configure (find_package(MorelloBuild) from the activated venv; oneDNN if installed)"
cmake -S examples/gemma_layer -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
say "build: synthesizes the layer's kernels (morello/gemma_*.hpp), then their tests and the example"
cmake --build "$BUILD_DIR" -j "$JOBS"
say "ctest: every kernel against its reference loop, and the example's check (--check-only)"
ctest --test-dir "$BUILD_DIR" --output-on-failure
say "the layer: check, then time per layer (1 and 2 threads) vs unfused and oneDNN"
"$BUILD_DIR/gemma_layer" --min-time "$MIN_TIME"
say "the fused gate/up GEMV alone: vs a read sweep over both weight matrices, and vs two GEMVs + a GELU*up pass"
"$BUILD_DIR/gemma_layer" --bench --min-time "$MIN_TIME"
