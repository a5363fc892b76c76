// anthropic.test.mjs — the official @anthropic-ai/sdk against kiln serve on the default
// model: messages streamed and not, event order, stop_sequences, count_tokens, errors in
// Anthropic's shape.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, TINY } from './helpers.mjs';

let srv, client;
before(async () => {
  srv = await startServer(TINY);
  client = new Anthropic({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { assert.equal(await srv.stop(), 0); });

const msgs = [{ role: 'user', content: 'Tell me about the river.' }];

test('message, not streamed', async () => {
  const m = await client.messages.create({ model: 'kiln-tiny', max_tokens: 10, system: 'Be brief.', messages: msgs, temperature: 0, metadata: { user_id: 'u1' } });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.content[0].type, 'text');
  assert.ok(m.content[0].text.length > 0);
  assert.ok(['max_tokens', 'end_turn'].includes(m.stop_reason));
  assert.ok(m.usage.input_tokens > 5);
  assert.ok(m.usage.output_tokens >= 1 && m.usage.output_tokens <= 10);
});

test('message stream: event order and the same text', async () => {
  const body = { model: 'kiln-tiny', max_tokens: 12, system: [{ type: 'text', text: 'Be brief.' }], messages: msgs, temperature: 0 };
  const full = await client.messages.create(body);
  const events = [];
  let text = '';
  for await (const ev of await client.messages.create({ ...body, stream: true })) {
    events.push(ev.type);
    if (ev.type === 'content_block_delta') { assert.equal(ev.delta.type, 'text_delta'); text += ev.delta.text; }
    if (ev.type === 'message_delta') assert.equal(ev.delta.stop_reason, full.stop_reason);
  }
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
  assert.equal(events.at(-2), 'message_delta');
  assert.ok(events.includes('content_block_start') && events.includes('content_block_stop'));
  assert.equal(text, full.content[0].text);
  // the SDK's own accumulator agrees
  const fin = await client.messages.stream(body).finalMessage();
  assert.equal(fin.content[0].text, full.content[0].text);
  assert.equal(fin.usage.output_tokens, full.usage.output_tokens);
});

test('stop_sequences', async () => {
  const free = await client.messages.create({ model: 'kiln-tiny', max_tokens: 12, messages: msgs, temperature: 0 });
  const words = free.content[0].text.trim().split(' ');
  const stop = ' ' + words[Math.min(2, words.length - 1)];
  const m = await client.messages.create({ model: 'kiln-tiny', max_tokens: 12, messages: msgs, temperature: 0, stop_sequences: [stop] });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
  assert.equal(m.content[0].text, free.content[0].text.slice(0, free.content[0].text.indexOf(stop)));
});

test('count_tokens matches the usage of a real request', async () => {
  const c = await client.messages.countTokens({ model: 'kiln-tiny', messages: msgs });
  const m = await client.messages.create({ model: 'kiln-tiny', max_tokens: 1, messages: msgs });
  assert.equal(c.input_tokens, m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0));
});

test('errors come back in Anthropic shape', async () => {
  await assert.rejects(client.messages.create({ model: 'kiln-tiny', messages: msgs }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'invalid_request_error');
    assert.match(e.error.error.message, /max_tokens/);
    return true;
  });
  await assert.rejects(client.messages.create({
    model: 'kiln-tiny', max_tokens: 5,
    messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }],
  }), (e) => e.status === 400 && /image/.test(e.error.error.message));
});
