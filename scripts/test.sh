#!/usr/bin/env bash
# Builds and runs the whole test suite (unit, model, conformance and end-to-end tests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 600 "$@"
