// Writes the expected ids and decodes of the HF tokenizers library (Rust, via npm
// @anush008/tokenizers) for every corpus string, for tokenizer_conformance_test.
// Usage: node gen_hf.js <tokenizer.json> <corpus.json> <out.json>
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(__dirname, '..', 'node_modules', '@anush008', 'tokenizers'));

async function main() {
  const [tokPath, corpusPath, outPath] = process.argv.slice(2);
  const tok = Tokenizer.fromFile(tokPath);
  const corpus = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));
  const lines = [];
  for (const text of corpus) {
    const withSpecial = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
    const raw = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    const decoded = await tok.decode(withSpecial, false);
    const decodedSkip = await tok.decode(withSpecial, true);
    lines.push(JSON.stringify({ text, ids: withSpecial, ids_raw: raw, decoded, decoded_skip: decodedSkip }));
  }
  fs.writeFileSync(outPath, '[\n' + lines.join(',\n') + '\n]\n');
}

main().catch((e) => { console.error(e); process.exit(1); });
