// Writes the expected ids and decodes of Google SentencePiece (Debian's spm_encode/spm_decode)
// on a tokenizer.model with tokenizer_config.json's added tokens on top, as transformers does:
// added-token strings are split out first (leftmost-longest) and become single ids, the rest
// goes through SentencePiece, and BOS is prepended when add_bos_token is set.
// Usage: node gen_spm.js <model_dir> <corpus.json> <out.json>
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

// spm_encode reads one line per input, so each newline is encoded on its own. MiniCPM4's
// tokenizer.model has "\n" as a user-defined piece (id 5, ../shared/models/README.md), which
// SentencePiece never merges with its neighbours, so this equals encoding the whole text.
const NEWLINE_ID = 5;

function splitAdded(text, added) {
  const out = [];
  let start = 0;
  let pos = 0;
  while (pos < text.length) {
    let best = null;
    for (const t of added) {
      if (text.startsWith(t.content, pos) && (best === null || t.content.length > best.content.length)) best = t;
    }
    if (best === null) { pos++; continue; }
    if (pos > start) out.push({ text: text.slice(start, pos) });
    out.push({ token: best });
    pos += best.content.length;
    start = pos;
  }
  if (start < text.length) out.push({ text: text.slice(start) });
  return out;
}

function runLines(tool, args, lines) {
  if (lines.length === 0) return [];
  const out = execFileSync(tool, args, { input: lines.join('\n') + '\n', maxBuffer: 1 << 28 });
  const res = out.toString('utf8').split('\n');
  return res.slice(0, lines.length);
}

function main() {
  const [modelDir, corpusPath, outPath] = process.argv.slice(2);
  const model = path.join(modelDir, 'tokenizer.model');
  const cfg = JSON.parse(fs.readFileSync(path.join(modelDir, 'tokenizer_config.json'), 'utf8'));
  const added = Object.entries(cfg.added_tokens_decoder).map(([id, t]) => ({ id: Number(id), content: t.content, special: t.special }));
  const bos = added.find((t) => t.content === cfg.bos_token);
  const corpus = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));

  // Pass 1: collect every line of every non-added piece, encode them in one spm_encode run.
  const plan = corpus.map((text) => splitAdded(text, added));
  const lines = [];
  for (const segs of plan) for (const s of segs) if (s.text !== undefined) s.lines = s.text.split('\n').map((l) => lines.push(l) - 1);
  const encoded = runLines('spm_encode', ['--model=' + model, '--output_format=id'], lines)
    .map((l) => (l.trim() === '' ? [] : l.trim().split(' ').map(Number)));
  // Decode reference: spm_decode of each line's ids.
  const decodedLines = runLines('spm_decode', ['--model=' + model, '--input_format=id'],
    encoded.map((ids) => ids.join(' ')));

  const rows = [];
  corpus.forEach((text, i) => {
    const raw = [];
    let decoded = '';
    let decodedSkip = '';
    for (const s of plan[i]) {
      if (s.token) {
        raw.push(s.token.id);
        decoded += s.token.content;
        if (!s.token.special) decodedSkip += s.token.content;
        continue;
      }
      s.lines.forEach((li, k) => {
        if (k > 0) { raw.push(NEWLINE_ID); decoded += '\n'; decodedSkip += '\n'; }
        raw.push(...encoded[li]);
        decoded += encoded[li].length ? decodedLines[li] : '';
        decodedSkip += encoded[li].length ? decodedLines[li] : '';
      });
    }
    const ids = cfg.add_bos_token && bos ? [bos.id, ...raw] : raw;
    const prefix = cfg.add_bos_token && bos ? bos.content : '';
    rows.push(JSON.stringify({ text, ids, ids_raw: raw, decoded: prefix + decoded, decoded_skip: decodedSkip }));
  });
  fs.writeFileSync(outPath, '[\n' + rows.join(',\n') + '\n]\n');
}

main();
