#!/usr/bin/env bash
# Configures and builds cpmserve into build/ (Ninja, ccache, all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
# Always (re)configure: modules are picked up by directory, which CMake checks only then.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build build -j "$(nproc)"
