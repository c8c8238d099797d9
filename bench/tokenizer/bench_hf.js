// Times HF tokenizers (Rust, npm @anush008/tokenizers) on the documents written by
// tokenizer_bench, in the same run, and prints one JSON line of results.
// Usage: node bench_hf.js <tokenizer.json> <docs.json>
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '..', '..', 'tests', 'conformance', 'node_modules', '@anush008', 'tokenizers'));

async function main() {
  const [tokPath, docsPath] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokPath);
  const docs = JSON.parse(fs.readFileSync(docsPath, 'utf8'));
  // Warm-up (fills the word cache, as the C++ side's warm-up does).
  for (const d of docs.slice(0, 50)) await tok.encode(d, null, { addSpecialTokens: true });
  let t0 = process.hrtime.bigint();
  let tokens = 0;
  for (const d of docs) tokens += (await tok.encode(d, null, { addSpecialTokens: true })).getIds().length;
  const seqSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
  t0 = process.hrtime.bigint();
  let batchTokens = 0;
  for (const e of await tok.encodeBatch(docs, { addSpecialTokens: true })) batchTokens += e.getIds().length;
  const batchSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ tokens, seq_seconds: seqSeconds, batch_tokens: batchTokens, batch_seconds: batchSeconds }));
}

main().catch((e) => { console.error(e); process.exit(1); });
