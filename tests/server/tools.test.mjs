// tools.test.mjs — tool calls and reasoning, driven deterministically by the bigram fixture
// model (fixture.mjs): the model always thinks, then calls get_weather(city: "Paris",
// days: 2); with <tool_call> banned through logit_bias it answers instead. Covers both
// SDKs, streamed and not, the full round trip (the tool result goes back through the chat
// template), tool_choice, enable_thinking and a template that opens <think> itself.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, TINY, post } from './helpers.mjs';
import { writeFixture, PIECES } from './fixture.mjs';

let srv, oai, ant, ids, dir;
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-fixture-'));
  ({ ids } = writeFixture(dir, TINY));
  srv = await startServer(dir, ['--model-id', 'fixture']);
  oai = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0 });
  ant = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => {
  assert.equal(await srv.stop(), 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
}];
const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
const noCall = () => ({ [ids.call]: -100 });

test('OpenAI: tool call with reasoning, not streamed, then the round trip', async () => {
  const r = await oai.chat.completions.create({ model: 'fixture', messages: ask, tools });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.content, null);
  assert.equal(c.message.reasoning_content, PIECES.reason);
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris', days: 2 });
  assert.match(call.id, /^call_/);

  const history = [...ask, c.message, { role: 'tool', tool_call_id: call.id, content: '{"sky": "clear", "temp_c": 21}' }];
  // the tool result is in the rendered prompt
  const tok = await post(srv.url + '/tokenize', { messages: history, tools });
  const det = await post(srv.url + '/detokenize', { tokens: tok.json.tokens });
  assert.match(det.json.prompt, /<tool_response>\n\{"sky": "clear", "temp_c": 21\}\n<\/tool_response>/);
  assert.match(det.json.prompt, /<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "Paris", "days": 2\}\}/);
  const r2 = await oai.chat.completions.create({ model: 'fixture', messages: history, tools, logit_bias: noCall() });
  assert.equal(r2.choices[0].finish_reason, 'stop');
  assert.equal(r2.choices[0].message.content, PIECES.answer);
  assert.equal(r2.usage.prompt_tokens, tok.json.count);
});

test('OpenAI: parallel_tool_calls false ends the generation at the first call', async () => {
  // The server cancels the request as soon as the first call closes; the result is still
  // a normal tool_calls answer (not an error from the cancel), streamed and not.
  const r = await oai.chat.completions.create({ model: 'fixture', messages: ask, tools, parallel_tool_calls: false });
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.choices[0].message.tool_calls.length, 1);
  assert.deepEqual(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments), { city: 'Paris', days: 2 });
  const stream = await oai.chat.completions.create({ model: 'fixture', messages: ask, tools, parallel_tool_calls: false, stream: true });
  let finish = null, names = [];
  for await (const ch of stream) {
    for (const d of ch.choices[0]?.delta?.tool_calls ?? []) if (d.function?.name) names.push(d.function.name);
    if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.deepEqual(names, ['get_weather']);
});

test('OpenAI: streamed tool call arrives as tool_calls deltas', async () => {
  const stream = await oai.chat.completions.create({ model: 'fixture', messages: ask, tools, stream: true });
  let reasoning = '', args = '', name = null, id = null, deltas = 0, finish = null, content = '';
  for await (const ch of stream) {
    const d = ch.choices[0]?.delta ?? {};
    if (d.reasoning_content) reasoning += d.reasoning_content;
    if (d.content) content += d.content;
    for (const tc of d.tool_calls ?? []) {
      assert.equal(tc.index, 0);
      if (tc.id) id = tc.id;
      if (tc.function?.name) name = tc.function.name;
      if (tc.function?.arguments) { args += tc.function.arguments; deltas++; }
    }
    if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
  }
  assert.equal(reasoning, PIECES.reason);
  assert.equal(content, '');
  assert.equal(name, 'get_weather');
  assert.match(id, /^call_/);
  assert.ok(deltas >= 2, 'arguments stream in more than one piece');
  assert.deepEqual(JSON.parse(args), { city: 'Paris', days: 2 });
  assert.equal(finish, 'tool_calls');
  // the SDK's stream helper assembles the same call
  const fin = await oai.chat.completions.stream({ model: 'fixture', messages: ask, tools }).finalChatCompletion();
  assert.deepEqual(JSON.parse(fin.choices[0].message.tool_calls[0].function.arguments), { city: 'Paris', days: 2 });
});

test('reasoning: enable_thinking false, a template that opens <think>, reasoning_effort none', async () => {
  const off = await oai.chat.completions.create({ model: 'fixture', messages: ask, tools, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(off.choices[0].message.reasoning_content, undefined);
  assert.equal(off.choices[0].message.tool_calls[0].function.name, 'get_weather');
  const none = await oai.chat.completions.create({ model: 'fixture', messages: ask, tools, reasoning_effort: 'none' });
  assert.equal(none.choices[0].message.reasoning_content, undefined);
  const open = await oai.chat.completions.create({ model: 'fixture', messages: ask, chat_template_kwargs: { open_think: true }, logit_bias: noCall() });
  assert.equal(open.choices[0].message.reasoning_content, PIECES.reason);
  assert.equal(open.choices[0].message.content, PIECES.answer);
});

test('tool_choice: none hides the tools; a named tool is forced; unknown names are 400', async () => {
  const none = await oai.chat.completions.create({ model: 'fixture', messages: ask, tools, tool_choice: 'none', logit_bias: noCall() });
  assert.equal(none.choices[0].message.tool_calls, undefined);
  const t = await post(srv.url + '/tokenize', { messages: ask, tools, tool_choice: 'none' });
  const d = await post(srv.url + '/detokenize', { tokens: t.json.tokens });
  assert.doesNotMatch(d.json.prompt, /<tools>/);
  // forced: the call's opening is prefilled, the model writes the rest
  const named = await oai.chat.completions.create({
    model: 'fixture', messages: ask, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 4,
  });
  assert.equal(named.choices[0].message.tool_calls[0].function.name, 'get_weather');
  await assert.rejects(oai.chat.completions.create({ model: 'fixture', messages: ask, tools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e.status === 400 && e.param === 'tool_choice');
});

test('Anthropic: thinking + tool_use, streamed and not, and the tool_result round trip', async () => {
  const atools = [{ name: 'get_weather', description: 'Weather for a city', input_schema: tools[0].function.parameters }];
  const m = await ant.messages.create({ model: 'fixture', max_tokens: 50, messages: ask, tools: atools });
  assert.equal(m.stop_reason, 'tool_use');
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'tool_use']);
  assert.equal(m.content[0].thinking, PIECES.reason);
  assert.equal(m.content[1].name, 'get_weather');
  assert.deepEqual(m.content[1].input, { city: 'Paris', days: 2 });
  assert.match(m.content[1].id, /^toolu_/);

  const types = [];
  let partial = '', thinking = '';
  for await (const ev of await ant.messages.create({ model: 'fixture', max_tokens: 50, messages: ask, tools: atools, stream: true })) {
    if (ev.type === 'content_block_start') types.push(ev.content_block.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'input_json_delta') partial += ev.delta.partial_json;
    if (ev.type === 'content_block_delta' && ev.delta.type === 'thinking_delta') thinking += ev.delta.thinking;
  }
  assert.deepEqual(types, ['thinking', 'tool_use']);
  assert.equal(thinking, PIECES.reason);
  assert.deepEqual(JSON.parse(partial), { city: 'Paris', days: 2 });
  const fin = await ant.messages.stream({ model: 'fixture', max_tokens: 50, messages: ask, tools: atools }).finalMessage();
  assert.deepEqual(fin.content[1].input, { city: 'Paris', days: 2 });

  const history = [...ask, { role: 'assistant', content: m.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: m.content[1].id, content: 'clear, 21 C' }] }];
  const c = await ant.messages.countTokens({ model: 'fixture', messages: history, tools: atools });
  const openaiSide = await post(srv.url + '/tokenize', {
    messages: [...ask, { role: 'assistant', content: null, reasoning_content: PIECES.reason,
      tool_calls: [{ id: 'x', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris", "days": 2}' } }] },
    { role: 'tool', tool_call_id: 'x', content: 'clear, 21 C' }], tools });
  assert.equal(c.input_tokens, openaiSide.json.count, 'both APIs render the same conversation');
  // tool_choice none: no tools in the prompt and no parsing, so the markup stays text
  const m2 = await ant.messages.create({ model: 'fixture', max_tokens: 50, messages: history, tools: atools, tool_choice: { type: 'none' } });
  assert.equal(m2.stop_reason, 'end_turn');
  assert.ok(!m2.content.some((b) => b.type === 'tool_use'));
  // tool_choice tool: the call's opening is prefilled (the fixture cannot write sensible
  // arguments after it, so only the forced name is checked)
  const m3 = await ant.messages.create({ model: 'fixture', max_tokens: 3, messages: history, tools: atools, tool_choice: { type: 'tool', name: 'get_weather' } });
  assert.equal(m3.content.find((b) => b.type === 'tool_use').name, 'get_weather');
});

test('template errors are 400 with the template message', async () => {
  await assert.rejects(oai.chat.completions.create({ model: 'fixture', messages: ask, chat_template_kwargs: { raise_error: 'boom' } }),
    (e) => e.status === 400 && /fixture template error: boom/.test(e.message));
});
