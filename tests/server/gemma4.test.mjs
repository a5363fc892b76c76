// gemma4.test.mjs — Gemma 4's reasoning markup end to end: the bigram fixture model
// (fixture.mjs) thinking in the thought channel, <|channel>thought\n … <channel|>, whose
// two channel markers are special tokens. The engine drops special tokens from the text;
// the server must put these two back for the splitter, recognise the channel from the
// template, and split the same way as for <think>: reasoning_content / thinking blocks,
// streamed and not, the empty channel that enable_thinking false writes, and a prompt that
// opens the channel itself.
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
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kiln-fixture-g4-'));
  ({ ids } = writeFixture(dir, TINY, { reasoning: 'gemma4' }));
  srv = await startServer(dir, ['--model-id', 'fixture-g4']);
  oai = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0 });
  ant = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => {
  assert.equal(await srv.stop(), 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
const answer = () => ({ [ids.call]: -100 }); // after the channel closes, answer instead of calling

test('the server recognised the thought channel', () => {
  assert.match(srv.log(), /reasoning split: gemma4/);
});

test('OpenAI: the thought channel is reasoning_content, the rest is content; streamed alike', async () => {
  const r = await oai.chat.completions.create({ model: 'fixture-g4', messages: ask, logit_bias: answer() });
  const m = r.choices[0].message;
  assert.equal(m.reasoning_content, PIECES.reason); // "thought\n" belongs to the marker
  assert.equal(m.content, PIECES.answer);
  assert.doesNotMatch(m.content, /channel/);
  let reasoning = '', content = '';
  const s = await oai.chat.completions.create({ model: 'fixture-g4', messages: ask, logit_bias: answer(), stream: true });
  for await (const ch of s) {
    reasoning += ch.choices[0]?.delta?.reasoning_content ?? '';
    content += ch.choices[0]?.delta?.content ?? '';
  }
  assert.equal(reasoning, PIECES.reason);
  assert.equal(content, PIECES.answer);
});

test('enable_thinking false writes an empty channel: no reasoning; a prompt that opens the channel', async () => {
  const off = await oai.chat.completions.create({ model: 'fixture-g4', messages: ask, logit_bias: answer(), chat_template_kwargs: { enable_thinking: false } });
  assert.equal(off.choices[0].message.reasoning_content, undefined);
  const open = await oai.chat.completions.create({ model: 'fixture-g4', messages: ask, logit_bias: answer(), chat_template_kwargs: { open_think: true } });
  assert.equal(open.choices[0].message.reasoning_content, PIECES.reason);
  assert.equal(open.choices[0].message.content, PIECES.answer);
});

test('Anthropic: a thinking block then a text block, streamed and not; thinking goes back through the template', async () => {
  const req = { model: 'fixture-g4', max_tokens: 16, messages: ask, thinking: { type: 'enabled', budget_tokens: 1024 } };
  // no tools, so what the fixture writes after the channel is plain text
  const r = await ant.messages.create(req);
  assert.equal(r.content[0].type, 'thinking');
  assert.equal(r.content[0].thinking, PIECES.reason);
  assert.equal(r.content[1].type, 'text');
  const events = [];
  const s = await ant.messages.create({ ...req, stream: true });
  for await (const e of s) events.push(e);
  const starts = events.filter((e) => e.type === 'content_block_start').map((e) => e.content_block.type);
  assert.deepEqual(starts.slice(0, 2), ['thinking', 'text']);
  const thinking = events.filter((e) => e.delta?.type === 'thinking_delta').map((e) => e.delta.thinking).join('');
  assert.equal(thinking, PIECES.reason);
  // reasoning sent back goes through the template into the channel
  const history = [...ask, { role: 'assistant', content: 'ok', reasoning_content: 'earlier thoughts' }, { role: 'user', content: 'and tomorrow?' }];
  const t = await post(srv.url + '/tokenize', { messages: history });
  const d = await post(srv.url + '/detokenize', { tokens: t.json.tokens });
  assert.match(d.json.prompt, /<\|channel>thought\nearlier thoughts<channel\|>ok/);
});
