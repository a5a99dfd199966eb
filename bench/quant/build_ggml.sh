#!/usr/bin/env bash
# Fetches the llama.cpp sources that the PyPI sdist of llama-cpp-python ships and builds ggml only (CPU
# backend, shared libraries), once, in a cache outside the repository (no third-party source in git).
# Prints the directory holding libggml*.so and ggml's include/ on its last line:  "<libdir> <includedir>".
# usage: bash bench/quant/build_ggml.sh   environment: LLAMA_CPP_PYTHON_VERSION (default 0.3.36),
#        MORELLO_BENCH_CACHE (default ~/.cache/morello-bench), JOBS (default 2), PIP (default: pip of PYTHON)
set -euo pipefail
ver="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${MORELLO_BENCH_CACHE:-$HOME/.cache/morello-bench}"
jobs="${JOBS:-2}"
src="$cache/src/llama_cpp_python-$ver"
build="$cache/ggml-build-$ver"
mkdir -p "$cache/src"
if [[ ! -d "$src/vendor/llama.cpp/ggml" ]]; then
  # only this package from source (its build dependencies as wheels: "--no-binary :all:" would build cmake)
  "${PYTHON:-python3}" -m pip download -q --no-binary llama-cpp-python --no-deps "llama-cpp-python==$ver" -d "$cache/src" >&2
  tar xzf "$cache/src/llama_cpp_python-$ver.tar.gz" -C "$cache/src"
fi
if [[ ! -f "$build/.built" ]]; then
  # the sdist omits ggml.pc.in (pkg-config template, unused here) although ggml's CMakeLists configures it
  [[ -f "$src/vendor/llama.cpp/ggml/ggml.pc.in" ]] || : > "$src/vendor/llama.cpp/ggml/ggml.pc.in"
  # GGML_NATIVE: the host's ISA, as a llama.cpp build from source gets by default; the CPU repack ("extra")
  # buffer type is part of the CPU backend (GGML_CPU_REPACK, on by default).
  cmake -S "$src/vendor/llama.cpp/ggml" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_NATIVE=ON -DGGML_BACKEND_DL=OFF -DGGML_OPENMP=ON -DGGML_CPU_REPACK=ON -DGGML_BUILD_TESTS=OFF \
    -DGGML_BUILD_EXAMPLES=OFF -DGGML_METAL=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF >&2
  cmake --build "$build" -j "$jobs" >&2
  touch "$build/.built"
fi
libdir="$(dirname "$(find "$build" -name 'libggml-cpu.so' | head -1)")"
echo "$libdir $src/vendor/llama.cpp/ggml/include"
