#!/usr/bin/env bash
# Quantized-weights benchmark (issue 21), one command: installs onnxruntime and onnx into the project's Python
# (pip), builds ggml once from the llama.cpp sources of llama-cpp-python's sdist (bench/quant/build_ggml.sh,
# cached in ~/.cache/morello-bench), and runs bench/quant/run.py, which writes bench/results/quant.md and
# quant.json. Arguments go to run.py (--quick, --rounds R, --filter 'TEXT|TEXT', --rotate-mib N).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON="$(command -v python3)"; fi
fi
"$PYTHON" -c "import onnxruntime, onnx, ml_dtypes, pybind11" 2>/dev/null \
  || "$PYTHON" -m pip install -q onnxruntime onnx ml_dtypes pybind11
dirs="$(PYTHON="$PYTHON" bash "$here/build_ggml.sh" | tail -1)"
read -r libdir incdir <<<"$dirs"
[[ -f "$libdir/libggml-cpu.so" ]] || { echo "run.sh: ggml build failed (see above)" >&2; exit 1; }
cd "$repo"
exec "$PYTHON" "$here/run.py" --ggml-lib "$libdir" --ggml-include "$incdir" "$@"
