#!/usr/bin/env bash
# One command for the whole benchmark: installs the Debian dependencies if missing, configures and builds
# bench/ (generated kernels through morello_add_kernel()), runs every workload in one process, and writes
# bench/results/: bench.json (Google Benchmark), bench.txt (console), results.md and one PNG per workload.
#
# usage: bash bench/run.sh [--quick] [--no-morello] [--headers DIR] [--filter REGEX] [--jobs N]
#                          [--profile FILE|NAME] [-- extra Google Benchmark flags]
#   --quick       fewer sizes, --benchmark_min_time=0.1 and 3 repetitions (a smoke test of a few minutes)
#   --no-morello  peers and references only (no generated kernels)
#   --headers DIR stand-in headers DIR/morello/<tgt>.hpp instead of generated ones (bench development only)
#   --filter RE   --benchmark_filter (keep "REF" in it for the FMA-peak column of W2/W3)
#   --profile P   the generated kernels' cost profile (a `morello-build calibrate` file, builtin, zen4, ...;
#                 default: the host's); with another build dir per profile (BUILD_DIR) to compare two
# Environment: PYTHON (default: the repo's .venv, else python3), BUILD_DIR (default bench/build),
#   RESULTS_DIR (default bench/results), MIN_TIME, REPETITIONS.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
quick=0 morello=1 headers="" filter="" jobs=2 profile="" extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --no-morello) morello=0 ;;
    --headers) headers="$(cd "$2" && pwd)"; shift ;;
    --filter) filter="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    --profile) profile="$2"; [[ -f "$profile" ]] && profile="$(cd "$(dirname "$profile")" && pwd)/$(basename "$profile")"; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# ---- Debian packages (the peers, Google Benchmark, the toolchain)
# ocl-icd-opencl-dev: Debian's dnnl-config.cmake requires OpenCL (its GPU runtime) even for CPU-only use
pkgs=(build-essential cmake pkg-config libbenchmark-dev libopenblas-dev libdnnl-dev ocl-icd-opencl-dev libeigen3-dev libxsmm-dev libhwy-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "run.sh: installing ${missing[*]}"
  sudo_=""; [[ $(id -u) -ne 0 ]] && sudo_="sudo"
  $sudo_ apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y --no-install-recommends "${missing[@]}"
fi

# ---- Python with morello_build (the generator) and matplotlib (the plots)
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON="$(command -v python3)"; fi
fi
if ! "$PYTHON" -c "import matplotlib" 2>/dev/null; then
  "$PYTHON" -m pip install -q matplotlib || echo "run.sh: matplotlib unavailable: tables without plots"
fi

# ---- configure and build
BUILD_DIR="${BUILD_DIR:-$here/build}"
RESULTS_DIR="${RESULTS_DIR:-$here/results}"
cfg=(-DCMAKE_BUILD_TYPE=Release -DMORELLO_PYTHON="$PYTHON" -DBENCH_QUICK=$([[ $quick == 1 ]] && echo ON || echo OFF))
if [[ $morello == 0 ]]; then
  cfg+=(-DMORELLO_KERNELS=OFF -DMORELLO_HEADERS_DIR=)
elif [[ -n "$headers" ]]; then
  cfg+=(-DMORELLO_KERNELS=ON -DMORELLO_HEADERS_DIR="$headers")
else
  cfg+=(-DMORELLO_KERNELS=ON -DMORELLO_HEADERS_DIR= -DMorelloBuild_PROFILE="$profile")
  if cmakedir="$("$PYTHON" -m morello_build --cmakedir 2>/dev/null)"; then
    cfg+=(-DMorelloBuild_DIR="$cmakedir")
  fi
fi
cmake -S "$here" -B "$BUILD_DIR" "${cfg[@]}"
cmake --build "$BUILD_DIR" -j "$jobs"

# ---- run (one process, one run) and report
mkdir -p "$RESULTS_DIR"
if [[ $quick == 1 ]]; then
  min_time="${MIN_TIME:-0.1}" reps="${REPETITIONS:-3}" mode=(--quick)
else
  min_time="${MIN_TIME:-0.5}" reps="${REPETITIONS:-5}" mode=()
fi
args=("${mode[@]}" --benchmark_min_time="$min_time" --benchmark_repetitions="$reps"
      --benchmark_out="$RESULTS_DIR/bench.json" --benchmark_out_format=json --benchmark_counters_tabular=true)
[[ -n "$filter" ]] && args+=(--benchmark_filter="$filter")
# OpenBLAS: an inherited OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE would make it run older kernels: unset them for
# this command only.
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$BUILD_DIR/morello_bench" "${args[@]}" "${extra[@]}" \
  | tee "$RESULTS_DIR/bench.txt"
calibration=()
# a calibrate profile file holds the host's DRAM read bandwidth: the report's third W1 roofline
[[ -f "$profile" ]] && grep -q '"dram_line"' "$profile" && calibration=(--calibration "$profile")
"$PYTHON" "$here/report.py" "$RESULTS_DIR/bench.json" -o "$RESULTS_DIR" "${calibration[@]}"
echo "run.sh: results in $RESULTS_DIR (results.md, bench.json, *.png)"
