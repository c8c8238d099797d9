#!/usr/bin/env bash
# Builds the whole project under a sanitizer and runs the test suite with it:
#   scripts/sanitize.sh address   ASan + UBSan (UB stops the test) into build-asan/
#   scripts/sanitize.sh thread    TSan into build-tsan/
# Extra arguments go to ctest (e.g. -R Engine). Not part of CI: a build takes ~25 minutes on
# two cores and the suite 2-4× its usual time.
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-address}"
shift || true
case "$kind" in
  address) flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined" dir=build-asan ;;
  thread) flags="-fsanitize=thread" dir=build-tsan ;;
  *) echo "usage: $0 address|thread [ctest args]" >&2; exit 2 ;;
esac
flags="$flags -fno-omit-frame-pointer"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
  -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$dir" -j "$(nproc)"
# The AVX-512 matmul's start-up self-check times it against the AVX2 kernels, and a sanitizer's
# overhead can tip that choice: force it where the CPU has AVX-512 so that its paths are run.
if grep -q avx512bw /proc/cpuinfo; then export CPM_AVX512_MATMUL=1; fi
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp}"
cd "$dir"
ctest --output-on-failure -j "$(nproc)" --timeout 1500 "$@"
