// Writes a Qwen3 checkpoint whose greedy answer to any chat prompt is one
// tool call, so the daemon's streamed tool calls can be checked end to end
// with a real model (the bundled random one never writes a call).
//   node make_tool_call_model.mjs SOURCE_MODEL_DIR OUT_DIR [ANSWER_IDS]
// ANSWER_IDS (a JSON array of token ids) makes the answer those tokens
// instead of the call (each id at most once: the chain is a bigram table).
//
// How: one layer whose attention and MLP outputs are zero (o_proj and
// down_proj are 0), so the final hidden state is the current token's
// embedding; the embedding of each token of the chain below is a distinct
// unit vector and lm_head maps it to the next token: a bigram chain, exact in
// any float format. The prompt's last token ("\n" after "<|im_start|>assistant")
// starts it; every token of the call appears once, then <|im_end|> ends it.
// The tokenizer and chat template are the source model's (real Qwen3 ones).
import fs from "node:fs";
import path from "node:path";

const [source, out, answer] = process.argv.slice(2);
if (!source || !out) {
  console.error("usage: make_tool_call_model.mjs SOURCE_MODEL_DIR OUT_DIR");
  process.exit(2);
}
// <tool_call>{"name":"lookup","arguments":{"q":[1,2]}}</tool_call><|im_end|>, tokenized by Qwen3's
// tokenizer, preceded by "\n" (the end of the generation prompt).
const chain = answer ? [198, ...JSON.parse(answer), 151645]
                     : [198, 151657, 4913, 606, 3252, 21020, 2198, 16370, 22317, 80, 8899, 16, 11, 17, 60, 3417, 151658, 151645];
if (new Set(chain).size !== chain.length) throw new Error(`a token repeats in the chain ${JSON.stringify(chain)}`);

const config = JSON.parse(fs.readFileSync(path.join(source, "config.json"), "utf8"));
config.num_hidden_layers = 1;
config.max_window_layers = 1;
config.tie_word_embeddings = false;
const H = config.hidden_size, V = config.vocab_size, D = config.head_dim;
const Q = config.num_attention_heads * D, KV = config.num_key_value_heads * D, I = config.intermediate_size;
if (chain.length - 1 > H) throw new Error(`hidden_size ${H} is too small for a chain of ${chain.length - 1} steps`);

fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, "config.json"), JSON.stringify(config, null, 2));
for (const f of ["generation_config.json", "tokenizer.json", "tokenizer_config.json"])
  fs.copyFileSync(path.join(source, f), path.join(out, f));

// bf16 tensors: name -> [shape, fill(values: Uint16Array)].
const bf16 = (x) => {
  const f = new Float32Array([x]);
  return new Uint16Array(f.buffer)[1];
};
const ONE = bf16(1), STEP = bf16(4);
const tensors = [
  ["model.embed_tokens.weight", [V, H], (w) => chain.slice(0, -1).forEach((t, k) => (w[t * H + k] = ONE))],
  ["model.layers.0.input_layernorm.weight", [H], (w) => w.fill(ONE)],
  ["model.layers.0.self_attn.q_proj.weight", [Q, H], () => {}],
  ["model.layers.0.self_attn.k_proj.weight", [KV, H], () => {}],
  ["model.layers.0.self_attn.v_proj.weight", [KV, H], () => {}],
  ["model.layers.0.self_attn.o_proj.weight", [H, Q], () => {}],
  ["model.layers.0.self_attn.q_norm.weight", [D], (w) => w.fill(ONE)],
  ["model.layers.0.self_attn.k_norm.weight", [D], (w) => w.fill(ONE)],
  ["model.layers.0.post_attention_layernorm.weight", [H], (w) => w.fill(ONE)],
  ["model.layers.0.mlp.gate_proj.weight", [I, H], () => {}],
  ["model.layers.0.mlp.up_proj.weight", [I, H], () => {}],
  ["model.layers.0.mlp.down_proj.weight", [H, I], () => {}],
  ["model.norm.weight", [H], (w) => w.fill(ONE)],
  ["lm_head.weight", [V, H], (w) => chain.slice(1).forEach((t, k) => (w[t * H + k] = STEP))],
];
const header = {};
const datas = [];
let offset = 0;
for (const [name, shape, fill] of tensors) {
  const w = new Uint16Array(shape.reduce((a, b) => a * b, 1));
  fill(w);
  const bytes = Buffer.from(w.buffer);
  header[name] = { dtype: "BF16", shape, data_offsets: [offset, offset + bytes.length] };
  datas.push(bytes);
  offset += bytes.length;
}
let json = JSON.stringify(header);
json += " ".repeat((8 - (json.length % 8)) % 8);
const len = Buffer.alloc(8);
len.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
fs.writeFileSync(path.join(out, "model.safetensors"), Buffer.concat([len, Buffer.from(json), ...datas]));
