// fixture.mjs — a tiny model whose replies we control, for the tool-call and reasoning
// tests (a trained model cannot be made to call a tool on cue).
//
// It is a Qwen3 checkpoint with one layer whose attention and MLP outputs are zero, so the
// hidden state at each position is just the token's embedding: the model is a bigram
// table. A handful of tokens get one-hot embeddings, and lm_head maps each to its
// successor (logit 8·4 = 32) and, for one token, to a second choice (logit 16) that a
// logit_bias can promote. The vocabulary is kiln-tiny's plus added (non-special) tokens
// for the scripted pieces, so every step of the script is one token:
//
//   "\n" → <think> → REASON → </think> → <tool_call> → CALL_HEAD → CALL_TAIL → </tool_call> → <|im_end|>
//                                     └(2nd choice)→ ANSWER → <|im_end|>
//
// The chat template is a compact Qwen3-style one (tools in <tools>, tool calls as
// <tool_call> JSON, tool results as <tool_response>, <think></think> when enable_thinking
// is false, <think> opened in the prompt when open_think is set, raise_exception on
// raise_error). Written into a directory at test time; nothing binary is committed.
//
// With { reasoning: 'gemma4' } the model thinks in Gemma 4's thought channel instead:
// <|channel> and <channel|> are special tokens (as in Gemma 4's vocabulary), "thought\n" is
// one more (ordinary) step after <|channel>, and the template writes the channel where the
// Qwen template writes <think>.
import fs from 'node:fs';
import path from 'node:path';

export const PIECES = {
  think: '<think>',
  reason: 'The user asks about the weather.',
  endThink: '</think>',
  call: '<tool_call>',
  callHead: '\n{"name": "get_weather", "arguments": {"city": ',
  callTail: '"Paris", "days": 2}}\n',
  endCall: '</tool_call>',
  answer: 'It is sunny in Paris.',
};

const TEMPLATE = `{%- if tools %}<|im_start|>system
# Tools
<tools>
{%- for t in tools %}
{{ t | tojson }}
{%- endfor %}
</tools><|im_end|>
{% endif %}
{%- if raise_error %}{{ raise_exception('fixture template error: ' ~ raise_error) }}{% endif %}
{%- for m in messages %}
{%- if m.role == 'assistant' %}<|im_start|>assistant
{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}
{%- for tc in m.tool_calls or [] %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% elif open_think %}<think>{% endif %}
{%- endif %}`;

function safetensors(tensors) {
  // tensors: [[name, shape, Float32Array]]
  const header = {};
  let off = 0;
  for (const [name, shape, data] of tensors) {
    header[name] = { dtype: 'F32', shape, data_offsets: [off, off + data.byteLength] };
    off += data.byteLength;
  }
  let h = Buffer.from(JSON.stringify(header));
  const pad = (8 - (h.length % 8)) % 8;
  h = Buffer.concat([h, Buffer.alloc(pad, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  return Buffer.concat([len, h, ...tensors.map(([, , d]) => Buffer.from(d.buffer, d.byteOffset, d.byteLength))]);
}

const { think: _t, endThink: _e, ...REST } = PIECES;
export const GEMMA4_PIECES = { think: '<|channel>', thought: 'thought\n', reason: PIECES.reason, endThink: '<channel|>', ...REST };

export function writeFixture(dir, baseModelDir, { reasoning = 'think' } = {}) {
  const gemma = reasoning === 'gemma4';
  const pieces = gemma ? GEMMA4_PIECES : PIECES;
  let template = TEMPLATE;
  if (gemma) {
    template = template.replaceAll('<think>{{ m.reasoning_content }}</think>', '<|channel>thought\n{{ m.reasoning_content }}<channel|>')
      .replaceAll('<think></think>', '<|channel>thought\n<channel|>').replaceAll('open_think %}<think>', 'open_think %}<|channel>thought\n');
  }
  fs.mkdirSync(dir, { recursive: true });
  const tok = JSON.parse(fs.readFileSync(path.join(baseModelDir, 'tokenizer.json'), 'utf8'));
  const base = Math.max(...Object.values(tok.model.vocab), ...tok.added_tokens.map((t) => t.id)) + 1;
  const names = Object.keys(pieces);
  const id = {};
  names.forEach((n, i) => {
    id[n] = base + i;
    const special = gemma && (n === 'think' || n === 'endThink');
    tok.added_tokens.push({ id: base + i, content: pieces[n], single_word: false, lstrip: false, rstrip: false, normalized: false, special });
  });
  const nl = tok.model.vocab['\u010a']; // byte-level "\n"
  const imEnd = tok.added_tokens.find((t) => t.content === '<|im_end|>').id;
  const V = base + names.length, H = 64, I = 64;
  // successor table: [from, to, logit scale]
  const edges = [
    [nl, id.think, 4], ...(gemma ? [[id.think, id.thought, 4], [id.thought, id.reason, 4]] : [[id.think, id.reason, 4]]), [id.reason, id.endThink, 4],
    [id.endThink, id.call, 4], [id.endThink, id.answer, 2],
    [id.call, id.callHead, 4], [id.callHead, id.callTail, 4], [id.callTail, id.endCall, 4],
    [id.endCall, imEnd, 4], [id.answer, imEnd, 4],
  ];
  const sources = [...new Set(edges.map((e) => e[0]))];
  const dim = new Map(sources.map((s, i) => [s, i]));
  const embed = new Float32Array(V * H), head = new Float32Array(V * H);
  for (const s of sources) embed[s * H + dim.get(s)] = 1;
  for (const [from, to, a] of edges) head[to * H + dim.get(from)] = a;
  const ones = (n) => new Float32Array(n).fill(1), zeros = (n) => new Float32Array(n);
  const L = 'model.layers.0.';
  const tensors = [
    ['model.embed_tokens.weight', [V, H], embed],
    [L + 'input_layernorm.weight', [H], ones(H)],
    [L + 'self_attn.q_proj.weight', [H, H], zeros(H * H)],
    [L + 'self_attn.k_proj.weight', [H, H], zeros(H * H)],
    [L + 'self_attn.v_proj.weight', [H, H], zeros(H * H)],
    [L + 'self_attn.o_proj.weight', [H, H], zeros(H * H)],
    [L + 'self_attn.q_norm.weight', [H], ones(H)],
    [L + 'self_attn.k_norm.weight', [H], ones(H)],
    [L + 'post_attention_layernorm.weight', [H], ones(H)],
    [L + 'mlp.gate_proj.weight', [I, H], zeros(I * H)],
    [L + 'mlp.up_proj.weight', [I, H], zeros(I * H)],
    [L + 'mlp.down_proj.weight', [H, I], zeros(H * I)],
    ['model.norm.weight', [H], ones(H)],
    ['lm_head.weight', [V, H], head],
  ];
  fs.writeFileSync(path.join(dir, 'model.safetensors'), safetensors(tensors));
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({
    architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', hidden_size: H, intermediate_size: I,
    num_hidden_layers: 1, num_attention_heads: 1, num_key_value_heads: 1, head_dim: H, vocab_size: V,
    max_position_embeddings: 512, rms_norm_eps: 1e-6, rope_theta: 10000, tie_word_embeddings: false,
    hidden_act: 'silu', attention_bias: false, torch_dtype: 'float32', bos_token_id: 8189, eos_token_id: imEnd,
  }, null, 1));
  fs.writeFileSync(path.join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: [imEnd], temperature: 0.0 }));
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tok));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify({
    bos_token: '<|endoftext|>', eos_token: '<|im_end|>', pad_token: '<|endoftext|>', chat_template: template,
  }));
  return { ids: id, nl, imEnd };
}
