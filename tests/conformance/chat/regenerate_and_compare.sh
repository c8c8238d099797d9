#!/bin/sh
# Regenerates the @huggingface/jinja expected renders into OUT_DIR, checks the committed
# expected/ files are current, and runs the C++ conformance test against the fresh renders.
# Usage: regenerate_and_compare.sh CHAT_CONFORMANCE_TEST OUT_DIR
# Exit 77 (ctest: skipped) when node or tests/conformance/node_modules is missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
test_bin=$1
out=$2
if ! command -v node >/dev/null 2>&1; then echo "skip: node not found"; exit 77; fi
if [ ! -d "$here/../node_modules/@huggingface/jinja" ]; then
  echo "skip: tests/conformance/node_modules/@huggingface/jinja missing (run npm ci there)"; exit 77
fi
rm -rf "$out"
mkdir -p "$out"
node "$here/generate.mjs" --out "$out"
if ! diff -r "$here/expected" "$out" >/dev/null; then
  echo "expected/ is stale: rerun 'node generate.mjs' in tests/conformance/chat"
  diff -r "$here/expected" "$out" | head -20
  exit 1
fi
CPM_CHAT_EXPECTED_DIR="$out" "$test_bin"
