#!/bin/sh
# Every kernels object compiled from a source that requests software prefetches (through
# kernels/prefetch.h) holds prefetch instructions: GCC 12 once deleted all of attention_amx's and
# conv1d_avx512's unseen (prefetch.h says how). Arguments: the cpm_kernels object files.
status=0
for obj in "$@"; do
  src=$(basename "$obj" .o)  # e.g. attention_amx.cc
  case "$src" in
    attention_amx.cc | attention_avx2.cc | attention_avx512.cc | conv1d_avx512.cc | \
    matmul_amx.cc | matmul_avx2.cc | matmul_avx512.cc | q8_avx2.cc | q8_avx512.cc) ;;
    *) continue ;;
  esac
  n=$(objdump -d --no-show-raw-insn "$obj" | grep -c 'prefetcht[0-2]')
  echo "$src: $n prefetch instructions"
  if [ "$n" -eq 0 ]; then
    echo "FAIL: $src requests prefetches but its object has none" >&2
    status=1
  fi
done
exit $status
