#!/usr/bin/env bash
# Set up (see setup.sh), lint, and run the whole test suite, both tiers: Python unit/property tests,
# generated-kernel checks against reference loops (C++ via CMake/ctest), CMake integration and the Python API.
# Tests run in MORELLO_TEST_WORKERS processes (pytest-xdist; default 2, the CI machine's cores); extra
# arguments go to pytest (`-m "not slow"`: the fast tier only; `-n 0`: one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -n "${MORELLO_TEST_WORKERS:-2}" "$@"
