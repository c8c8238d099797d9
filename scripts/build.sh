#!/usr/bin/env bash
# Configures and builds cpmserve into build/ (Ninja, ccache, all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}"
fi
cmake --build build -j "$(nproc)"
