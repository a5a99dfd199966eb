#!/usr/bin/env bash
# Set up (see setup.sh) and run the whole test suite: Python unit/property tests, generated-kernel
# checks against reference loops (C++ via CMake/ctest), CMake integration and the Python API.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
