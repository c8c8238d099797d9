// Renders every template in templates.json over every conversation in conversations.json and
// option set below with @huggingface/jinja (the conformance reference), writing
// expected/<template>.json. Usage: node generate.mjs [--out DIR]   (default: ./expected)
// Context mirrors transformers' apply_chat_template: messages, tools (null when absent),
// documents (null), add_generation_prompt, the tokenizer's bos/eos tokens, then kwargs.
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const outArg = process.argv.indexOf("--out");
const outDir = outArg >= 0 ? path.resolve(process.argv[outArg + 1]) : path.join(here, "expected");

// Shared with the C++ test and jinja2_reference.py: keep the three in step.
export const OPTION_SETS = {
  nogen: { add_generation_prompt: false, kwargs: {} },
  gen: { add_generation_prompt: true, kwargs: {} },
  gen_think_off: { add_generation_prompt: true, kwargs: { enable_thinking: false } },
  gen_think_on: { add_generation_prompt: true, kwargs: { enable_thinking: true } },
  gen_vision_id: { add_generation_prompt: true, kwargs: { add_vision_id: true, enable_thinking: false } },
};

// @huggingface/jinja's raise_exception throws Error(message) and cannot be overridden; an error
// whose message is the literal argument of a raise_exception() call in the source is one.
function isRaise(source, message) {
  return (
    source.includes(`raise_exception('${message}')`) || source.includes(`raise_exception("${message}")`)
  );
}

const templates = JSON.parse(fs.readFileSync(path.join(here, "templates.json"), "utf8"));
const conversations = JSON.parse(fs.readFileSync(path.join(here, "conversations.json"), "utf8"));
fs.mkdirSync(outDir, { recursive: true });

for (const [name, spec] of Object.entries(templates)) {
  const source = fs.readFileSync(path.join(here, spec.file), "utf8");
  const template = new Template(source);
  const results = {};
  for (const conv of conversations) {
    for (const [optName, opt] of Object.entries(OPTION_SETS)) {
      const ctx = {
        messages: conv.messages,
        tools: conv.tools ?? null,
        documents: null,
        add_generation_prompt: opt.add_generation_prompt,
      };
      if (spec.bos_token !== undefined) ctx.bos_token = spec.bos_token;
      if (spec.eos_token !== undefined) ctx.eos_token = spec.eos_token;
      Object.assign(ctx, opt.kwargs);
      let result;
      try {
        result = { output: template.render(ctx) };
      } catch (e) {
        const message = String(e?.message ?? e);
        result = isRaise(source, message) ? { raise: message } : { error: message };
      }
      results[`${conv.name}/${optName}`] = result;
    }
  }
  fs.writeFileSync(path.join(outDir, `${name}.json`), JSON.stringify(results, null, 1) + "\n");
  console.log(`${name}: ${Object.keys(results).length} cases -> ${path.join(outDir, name + ".json")}`);
}
