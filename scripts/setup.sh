#!/usr/bin/env bash
# One-time set-up on a fresh Debian machine (idempotent): system packages, then .venv with the package.
set -euo pipefail
cd "$(dirname "$0")/.."
APT_PACKAGES=(g++ clang make cmake ninja-build python3-venv libbenchmark-dev libhwy-dev)
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
