// Drives a running `cpmserve serve` with the official OpenAI npm client, as users do:
// node openai_client_test.js BASE_URL NODE_MODULES_DIR. Exits non-zero on the first failure.
'use strict';
const assert = require('assert');
const path = require('path');

const [baseURL, nodeModules] = process.argv.slice(2);
const OpenAI = require(path.join(nodeModules, 'openai'));
const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'unused', maxRetries: 0 });
const MODEL = 'tiny';
const user = (content) => [{ role: 'user', content }];

async function greedy(content, maxTokens) {
  const r = await client.chat.completions.create({
    model: MODEL, messages: user(content), temperature: 0, max_tokens: maxTokens,
    ignore_eos: true,
  });
  return r;
}

const tests = {
  async listModels() {
    const models = await client.models.list();
    const ids = models.data.map((m) => m.id);
    assert.deepStrictEqual(ids, ['tiny']);
    assert.strictEqual(models.data[0].object, 'model');
    assert.strictEqual(models.data[0].max_model_len, 256);
  },
  async chatPlain() {
    const r = await greedy('Hello there', 8);
    assert.strictEqual(r.object, 'chat.completion');
    assert.strictEqual(r.choices.length, 1);
    assert.strictEqual(r.choices[0].message.role, 'assistant');
    assert.strictEqual(typeof r.choices[0].message.content, 'string');
    assert.strictEqual(r.choices[0].finish_reason, 'length');
    assert.strictEqual(r.usage.completion_tokens, 8);
    assert.strictEqual(r.usage.total_tokens, r.usage.prompt_tokens + 8);
  },
  async chatStreamWithUsage() {
    const plain = await greedy('Hello there', 8);
    const stream = await client.chat.completions.create({
      model: MODEL, messages: user('Hello there'), temperature: 0, max_tokens: 8,
      ignore_eos: true, stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    let role = null;
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      assert.strictEqual(chunk.object, 'chat.completion.chunk');
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (c.delta.role) role = c.delta.role;
        if (c.delta.content) text += c.delta.content;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.strictEqual(role, 'assistant');
    assert.strictEqual(text, plain.choices[0].message.content);
    assert.strictEqual(finish, 'length');
    // The same counts; a stream leaves a null prompt_tokens_details out (vLLM's exclude_none).
    const { prompt_tokens_details: details, ...counts } = plain.usage;
    assert.strictEqual(details, null);
    assert.deepStrictEqual(usage, counts);
  },
  async completions() {
    const r = await client.completions.create({
      model: MODEL, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, ignore_eos: true,
    });
    assert.strictEqual(r.object, 'text_completion');
    assert.strictEqual(typeof r.choices[0].text, 'string');
    assert.strictEqual(r.usage.completion_tokens, 5);
  },
  async nEqualsTwo() {
    const r = await client.chat.completions.create({
      model: MODEL, messages: user('two answers'), n: 2, max_tokens: 4, ignore_eos: true,
    });
    assert.deepStrictEqual(r.choices.map((c) => c.index), [0, 1]);
    assert.strictEqual(r.usage.completion_tokens, 8);
  },
  async stop() {
    const free = (await greedy('stop here', 12)).choices[0].message.content;
    assert.ok(free.length >= 4, free);
    const stop = free.slice(Math.floor(free.length / 2), Math.floor(free.length / 2) + 2);
    const r = await client.chat.completions.create({
      model: MODEL, messages: user('stop here'), temperature: 0, max_tokens: 12,
      ignore_eos: true, stop: [stop],
    });
    assert.strictEqual(r.choices[0].message.content, free.slice(0, free.indexOf(stop)));
    assert.strictEqual(r.choices[0].finish_reason, 'stop');
  },
  async logprobs() {
    const r = await client.chat.completions.create({
      model: MODEL, messages: user('probabilities'), max_tokens: 3, logprobs: true,
      top_logprobs: 4,
    });
    const content = r.choices[0].logprobs.content;
    assert.strictEqual(content.length, r.usage.completion_tokens);
    for (const e of content) {
      assert.strictEqual(typeof e.token, 'string');
      assert.ok(e.logprob <= 0);
      assert.ok(Array.isArray(e.bytes));
      assert.strictEqual(e.top_logprobs.length, 4);
    }
  },
  async logitBiasAndTokenIds() {
    // The client's logit_bias (a map keyed by token-id strings) and vLLM's
    // return_tokens_as_token_ids: the greedy run's first token pushed down, another pushed up.
    const ids = async (extra) => {
      const r = await client.chat.completions.create({
        model: MODEL, messages: user('bias'), temperature: 0, max_tokens: 3, ignore_eos: true,
        logprobs: true, return_tokens_as_token_ids: true, ...extra,
      });
      return r.choices[0].logprobs.content.map((e) => {
        assert.match(e.token, /^token_id:\d+$/);
        return Number(e.token.slice('token_id:'.length));
      });
    };
    const free = await ids({});
    const down = await ids({ logit_bias: { [free[0]]: -100 } });
    assert.notStrictEqual(down[0], free[0]);
    const pushed = free[0] === 7 ? 8 : 7;
    assert.deepStrictEqual(await ids({ logit_bias: { [pushed]: 100 } }), [pushed, pushed, pushed]);
  },
  async seedReproducible() {
    const req = {
      model: MODEL, messages: user('random'), temperature: 1.0, max_tokens: 10,
      ignore_eos: true, seed: 42,
    };
    const a = await client.chat.completions.create(req);
    const b = await client.chat.completions.create(req);
    assert.strictEqual(a.choices[0].message.content, b.choices[0].message.content);
  },
  async structuredOutputs() {
    // OpenAI's response_format json_schema (with vLLM's disable_any_whitespace, so that the tiny
    // random model finishes within max_tokens): the content parses and follows the schema.
    const schema = {
      type: 'object',
      properties: { answer: { enum: ['yes', 'no'] }, sure: { type: 'boolean' },
                    note: { type: 'string', maxLength: 5 } },
      required: ['answer', 'sure'], additionalProperties: false,
    };
    const r = await client.chat.completions.create({
      model: MODEL, messages: user('Answer in JSON'), temperature: 0.8, seed: 3, max_tokens: 100,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema } },
    });
    const c = r.choices[0];
    if (c.finish_reason === 'stop') {
      const v = JSON.parse(c.message.content);
      assert.ok(['yes', 'no'].includes(v.answer), c.message.content);
      assert.strictEqual(typeof v.sure, 'boolean');
    } else {
      assert.strictEqual(c.finish_reason, 'length');
      assert.match(c.message.content, /^\s*\{/);
    }
    const compact = await client.chat.completions.create({
      model: MODEL, messages: user('Answer in JSON'), temperature: 0.8, seed: 3, max_tokens: 100,
      structured_outputs: { json: schema, disable_any_whitespace: true },
    });
    assert.strictEqual(compact.choices[0].finish_reason, 'stop');
    const v = JSON.parse(compact.choices[0].message.content);
    assert.ok(['yes', 'no'].includes(v.answer));
    assert.strictEqual(typeof v.sure, 'boolean');
    assert.deepStrictEqual(Object.keys(v).filter((k) => !['answer', 'sure', 'note'].includes(k)), []);
  },
  async patternsFormatsRangesAndRegex() {
    // What a Pydantic or zod model's schema holds: formats, a pattern, numeric ranges, a tuple;
    // each complete reply checked here by JavaScript's Date, RegExp and Number.
    const schema = {
      type: 'object',
      properties: {
        when: { type: 'string', format: 'date-time' },
        id: { type: 'string', format: 'uuid' },
        code: { type: 'string', pattern: '^[A-Z]{3}-\\d{2}$' },
        seats: { type: 'integer', minimum: 1, maximum: 500 },
        ratio: { type: 'number', exclusiveMinimum: 0, maximum: 0.75 },
        pair: { type: 'array', prefixItems: [{ type: 'integer' }, { type: 'boolean' }],
                items: false, minItems: 2 },
      },
      required: ['when', 'id', 'code', 'seats', 'ratio', 'pair'], additionalProperties: false,
    };
    let complete = 0;
    for (let seed = 0; seed < 4; ++seed) {
      const r = await client.chat.completions.create({
        model: MODEL, messages: user('An event'), temperature: 0.8, seed, max_tokens: 200,
        structured_outputs: { json: schema, disable_any_whitespace: true },
      });
      const c = r.choices[0];
      if (c.finish_reason !== 'stop') continue;
      ++complete;
      const v = JSON.parse(c.message.content);
      assert.ok(!Number.isNaN(Date.parse(v.when)) && /T.*(Z|[+-]\d\d:\d\d)$/.test(v.when), v.when);
      assert.match(v.id, /^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$/i);
      assert.match(v.code, /^[A-Z]{3}-\d{2}$/);
      assert.ok(Number.isInteger(v.seats) && v.seats >= 1 && v.seats <= 500, String(v.seats));
      assert.ok(v.ratio > 0 && v.ratio <= 0.75, String(v.ratio));
      assert.ok(v.pair.length === 2 && Number.isInteger(v.pair[0]) &&
                typeof v.pair[1] === 'boolean', JSON.stringify(v.pair));
    }
    assert.ok(complete >= 1, 'no reply completed within max_tokens');
    // structured_outputs regex on the completions endpoint: the whole text matches.
    const pattern = '(yes|no), \\d{1,3}( units)?\\.';
    for (let seed = 0; seed < 3; ++seed) {
      const r = await client.completions.create({
        model: MODEL, prompt: 'Say', temperature: 1.0, seed, max_tokens: 30,
        structured_outputs: { regex: pattern },
      });
      assert.strictEqual(r.choices[0].finish_reason, 'stop');
      assert.match(r.choices[0].text, new RegExp(`^(?:${pattern})$`));
    }
  },
  async responsesPlainAndStreamed() {
    // The Responses API over the same pipeline: the same greedy text as the chat endpoint for the
    // same user message, cut by max_output_tokens ("incomplete"), and the same text streamed as
    // output_text deltas between response.created and response.completed (vLLM's last event,
    // the incomplete status inside it; the SDK's final response comes from it).
    // The least a client sends: model and input (the reply's echoed fields take their defaults).
    const minimal = await client.responses.create({ model: MODEL, input: 'Hi' });
    assert.ok(['completed', 'incomplete'].includes(minimal.status), minimal.status);
    assert.strictEqual(typeof minimal.output_text, 'string');
    assert.strictEqual(minimal.tool_choice, 'auto');
    assert.deepStrictEqual(minimal.tools, []);
    const chat = await greedy('Hello there', 8);
    const r = await client.responses.create({
      model: MODEL, input: 'Hello there', temperature: 0, max_output_tokens: 8, ignore_eos: true,
    });
    assert.strictEqual(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.strictEqual(r.output_text, chat.choices[0].message.content);
    assert.strictEqual(r.status, 'incomplete');
    assert.deepStrictEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.strictEqual(r.output.length, 1);
    assert.strictEqual(r.output[0].type, 'message');
    assert.strictEqual(r.output[0].role, 'assistant');
    assert.strictEqual(r.usage.input_tokens, chat.usage.prompt_tokens);
    assert.strictEqual(r.usage.output_tokens, 8);
    assert.strictEqual(r.usage.total_tokens, r.usage.input_tokens + 8);
    const stream = await client.responses.create({
      model: MODEL, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hello there' }] }],
      temperature: 0, max_output_tokens: 8, ignore_eos: true, stream: true,
    });
    const types = [];
    let text = '';
    let last = null;
    let seq = -1;
    for await (const event of stream) {
      assert.strictEqual(event.sequence_number, seq + 1);
      seq = event.sequence_number;
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      last = event;
    }
    assert.strictEqual(text, r.output_text);
    assert.deepStrictEqual(types.slice(0, 4), ['response.created', 'response.in_progress',
      'response.output_item.added', 'response.content_part.added']);
    assert.deepStrictEqual(types.slice(-4), ['response.output_text.done',
      'response.content_part.done', 'response.output_item.done', 'response.completed']);
    assert.strictEqual(last.response.status, 'incomplete');
    assert.strictEqual(last.response.output[0].content[0].text, text);
    assert.deepStrictEqual(last.response.usage, r.usage);
    // The SDK's stream helper takes its final response from response.completed, even a cut one.
    const helper = client.responses.stream({
      model: MODEL, input: 'Hello there', temperature: 0, max_output_tokens: 8, ignore_eos: true,
    });
    const final = await helper.finalResponse();
    assert.strictEqual(final.status, 'incomplete');
    assert.strictEqual(final.output[0].content[0].text, r.output_text);
  },
  async responsesFormatsAndFunctionCalls() {
    const schema = {
      type: 'object', properties: { answer: { enum: ['yes', 'no'] }, sure: { type: 'boolean' } },
      required: ['answer', 'sure'], additionalProperties: false,
    };
    const j = await client.responses.create({
      model: MODEL, input: 'Answer in JSON', temperature: 0.8, seed: 3, max_output_tokens: 100,
      text: { format: { type: 'json_schema', name: 'answer', strict: true, schema } },
    });
    if (j.status === 'completed') {
      const v = JSON.parse(j.output_text);
      assert.ok(['yes', 'no'].includes(v.answer) && typeof v.sure === 'boolean', j.output_text);
    } else {
      assert.match(j.output_text, /^\s*\{/);
    }
    // A required function call comes back as a function_call output item with JSON arguments.
    const tools = [{
      type: 'function', name: 'get_weather', description: 'Weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 6 } },
                    required: ['city'], additionalProperties: false },
    }];
    // (The tiny random model pads JSON with whitespace: some seeds run out of tokens.)
    let calls = [];
    for (let seed = 0; seed < 6 && calls.length === 0; ++seed) {
      const f = await client.responses.create({
        model: MODEL, input: 'Weather in Paris?', tools, tool_choice: 'required',
        temperature: 0.8, seed, max_output_tokens: 150,
      });
      calls = f.output.filter((o) => o.type === 'function_call');
      if (f.status === 'incomplete') continue;
      assert.ok(calls.length >= 1, JSON.stringify(f.output));
    }
    assert.ok(calls.length >= 1, 'no call completed within max_output_tokens');
    assert.strictEqual(calls[0].name, 'get_weather');
    assert.match(calls[0].call_id, /\S/);
    assert.strictEqual(typeof JSON.parse(calls[0].arguments).city, 'string');
    // Streamed, the same call arrives as a function_call item with its arguments' events.
    let streamed = null;
    let argsDone = null;
    for (let seed = 0; seed < 6 && streamed === null; ++seed) {
      const stream = await client.responses.create({
        model: MODEL, input: 'Weather in Paris?', tools, tool_choice: 'required',
        temperature: 0.8, seed, max_output_tokens: 150, stream: true,
      });
      for await (const event of stream) {
        if (event.type === 'response.function_call_arguments.done') argsDone = event.arguments;
        if (event.type === 'response.completed') {
          streamed = event.response.output.find((o) => o.type === 'function_call') || null;
        }
      }
    }
    assert.ok(streamed !== null, 'no streamed call completed within max_output_tokens');
    assert.strictEqual(streamed.name, 'get_weather');
    assert.strictEqual(streamed.arguments, argsDone);
    assert.strictEqual(typeof JSON.parse(streamed.arguments).city, 'string');
    // The call and its output sent back as input items: a new answer, not an error.
    const next = await client.responses.create({
      model: MODEL, tools, max_output_tokens: 4, ignore_eos: true, input: [
        { role: 'user', content: 'Weather in Paris?' },
        { type: 'function_call', call_id: calls[0].call_id, name: calls[0].name,
          arguments: calls[0].arguments },
        { type: 'function_call_output', call_id: calls[0].call_id, output: '{"sky": "clear"}' },
      ], tool_choice: 'none',
    });
    assert.strictEqual(next.usage.output_tokens, 4);
    // A built-in tool is a 400; a previous_response_id, with nothing stored, vLLM's 404 (the
    // SDK's NotFoundError).
    for (const [body, status] of [[{ tools: [{ type: 'web_search' }] }, 400],
                                  [{ previous_response_id: 'resp_x' }, 404]]) {
      try {
        await client.responses.create({ model: MODEL, input: 'x', ...body });
        assert.fail(`expected a ${status}`);
      } catch (e) {
        assert.ok(e instanceof OpenAI.APIError, String(e));
        assert.strictEqual(e.status, status);
        if (status === 404) assert.ok(e instanceof OpenAI.NotFoundError, String(e));
      }
    }
  },
  async recursiveGrammar() {
    // structured_outputs.grammar with recursion (vLLM's xgrammar takes it): arithmetic over
    // nested parentheses, each complete reply parsed by a recursive-descent parser here.
    const grammar = [
      'root ::= expr',
      'expr ::= term (("+" | "-") term)*',
      'term ::= factor ("*" factor)*',
      'factor ::= [0-9]+ | "(" expr ")"',
    ].join('\n');
    const parses = (text) => {
      let i = 0;
      const factor = () => {
        if (text[i] === '(') {
          ++i;
          if (!expr() || text[i] !== ')') return false;
          ++i;
          return true;
        }
        const start = i;
        while (i < text.length && text[i] >= '0' && text[i] <= '9') ++i;
        return i > start;
      };
      const term = () => {
        if (!factor()) return false;
        while (text[i] === '*') { ++i; if (!factor()) return false; }
        return true;
      };
      const expr = () => {
        if (!term()) return false;
        while (text[i] === '+' || text[i] === '-') { ++i; if (!term()) return false; }
        return true;
      };
      return expr() && i === text.length;
    };
    let complete = 0;
    for (let seed = 0; seed < 4; ++seed) {
      const r = await client.completions.create({
        model: MODEL, prompt: 'Compute', temperature: 1.0, seed, max_tokens: 40,
        structured_outputs: { grammar },
      });
      if (r.choices[0].finish_reason !== 'stop') continue;
      ++complete;
      assert.ok(parses(r.choices[0].text), r.choices[0].text);
    }
    assert.ok(complete >= 1, 'no reply completed within max_tokens');
    try {
      await client.completions.create({
        model: MODEL, prompt: 'x', max_tokens: 4,
        structured_outputs: { grammar: 'root ::= root "+" "1" | "1"' },
      });
      assert.fail('expected a 400');
    } catch (e) {
      assert.strictEqual(e.status, 400);
      assert.match(e.message, /left-recursive/);
    }
  },
  async overlongPromptIs400() {
    try {
      await client.chat.completions.create({
        model: MODEL, messages: user('hello world '.repeat(200)), max_tokens: 4,
      });
      assert.fail('expected a 400');
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIError, String(e));
      assert.strictEqual(e.status, 400);
      assert.match(e.message, /This model's maximum context length is 256 tokens\. However, your request has \d+ input tokens\. Please reduce the length of the input messages\./);
    }
  },
  async unknownModelIs404() {
    try {
      await client.chat.completions.create({ model: 'nope', messages: user('x'), max_tokens: 1 });
      assert.fail('expected a 404');
    } catch (e) {
      assert.strictEqual(e.status, 404);
    }
  },
};

(async () => {
  let failed = 0;
  for (const [name, fn] of Object.entries(tests)) {
    try {
      await fn();
      console.log(`ok   ${name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    }
  }
  process.exit(failed ? 1 : 0);
})();
