// Reference data from Hugging Face `tokenizers` (its Node binding, `npm install tokenizers`).
//
//   node hf_reference.js cases TOKENIZER_JSON OUT.json [N]
//     Random mixed-script strings (whitespace edge cases, combining marks,
//     special tokens, ...) encoded and decoded by Hugging Face, for the Qwen
//     tokenizer and for variants of it that exercise other tokenizer.json
//     features (GPT-2 style ByteLevel pre-tokenizer, Split behaviours, added
//     token flags, "a b" merges). Written to tests/data/tokenizer-hf-random.json.
//   node hf_reference.js bench TOKENIZER_JSON TEXT_FILE
//     Encode throughput of Hugging Face on the same text neuron's bench uses.
const { Tokenizer } = require('tokenizers');
const fs = require('fs');

const atoms = ["a", "b", "e", "z", "Q", "The", " the", "hello", "world", "'s", "'S", "'ll", "'RE", "'ſ", "ſ", "K", "İ", "ß",
  "123", "4", "0", " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u0085", "\u2028", "\u3000",
  "\u200b", "\u200d", "\u0301", "\u0308", "e\u0301", "é", "A\u030a", "Å", "\u1100\u1161", "한국어", "中文", "日本語です",
  "。", "，", "Ελληνικά", "Русский", "العربية", "עברית", "हिन्दी", "😀", "👍🏽", "👨‍👩‍👧", "🚀", "!", "?", "...", "--",
  "->", "==", "{", "}", "(", ")", "[", "]", "\"", "'", "`", "#", "$", "%", "&", "*", "+", ",", "-", ".", "/", ":", ";",
  "<", ">", "@", "\\", "^", "_", "|", "~", "٣", "４", "²", "Ⅻ", "½", "<|im_start|>", "<|im_end|>", "<think>",
  "</think>", "<tool_call>", "<|endoftext|>", "<|im_start", "im_end|>", "x", " x", "\u0000", "\u007f", "\ufeff",
  "\ufffd", "𝔘𝔫𝔦", "ﬁ", "Ⓐ", "x_y", "__init__", "0.5", "1e-9", "aaaaaaaa", "!!!!",
  // variant-only added tokens, and text around them
  "<mask>", " <mask> ", "[SW]", "a[SW]", "[SW]b", " [SW] ", "e\u0301!", "é!", "RS", "RS   x", "  <mask>"];

let seed = parseInt(process.env.SEED || "20261202");
function rnd(n) {
  seed = seed + 0x6D2B79F5 | 0;
  let t = Math.imul(seed ^ seed >>> 15, 1 | seed);
  t = t + Math.imul(t ^ t >>> 7, 61 | t) ^ t;
  return ((t ^ t >>> 14) >>> 0) % n;
}

const byteLevel = (prefix, regex) => ({ type: "ByteLevel", add_prefix_space: prefix, trim_offsets: true, use_regex: regex });
const split = (re, behavior, invert = false) => ({ type: "Split", pattern: { Regex: re }, behavior, invert });
const extraTokens = [
  { id: 151669, content: "<mask>", single_word: false, lstrip: true, rstrip: false, normalized: false, special: true },
  { id: 151670, content: "[SW]", single_word: true, lstrip: false, rstrip: false, normalized: false, special: false },
  { id: 151671, content: "é!", single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
  { id: 151672, content: "RS", single_word: false, lstrip: false, rstrip: true, normalized: false, special: true },
];
// Each variant is a patch over the Qwen tokenizer.json; the C++ test applies the same patch.
const variants = [
  { name: "qwen3", patch: {} },
  { name: "gpt2_style_prefix_space", patch: { normalizer: null, pre_tokenizer: byteLevel(true, true), added_tokens_extra: extraTokens, string_merges: true } },
  { name: "split_behaviours", patch: { pre_tokenizer: { type: "Sequence", pretokenizers: [
      split("\\p{N}", "MergedWithPrevious"), split("\\s+", "MergedWithNext"), split("[.,!?]", "Removed"),
      split("[a-z]+", "Contiguous", true), byteLevel(false, false)] }, added_tokens_extra: extraTokens } },
  { name: "nfkc_contiguous", patch: { normalizer: { type: "Sequence", normalizers: [{ type: "NFKC" }] }, pre_tokenizer: {
      type: "Sequence", pretokenizers: [split("\\p{L}+", "Contiguous"), byteLevel(false, true)] } } },
];

function applyPatch(base, patch) {
  const t = JSON.parse(JSON.stringify(base));
  for (const k of ["normalizer", "pre_tokenizer"]) if (k in patch) t[k] = patch[k];
  if (patch.added_tokens_extra) t.added_tokens = t.added_tokens.concat(patch.added_tokens_extra);
  if (patch.string_merges) t.model.merges = t.model.merges.map(m => m[0] + " " + m[1]);
  return t;
}

async function cases(path, outPath, n) {
  const base = JSON.parse(fs.readFileSync(path, "utf8"));
  const out = { generator: "bench/tokenizer/hf_reference.js with tokenizers (npm) " + require("tokenizers/package.json").version, variants: [] };
  for (const v of variants) {
    const tok = Tokenizer.fromString(JSON.stringify(applyPatch(base, v.patch)));
    const vc = { name: v.name, patch: v.patch, cases: [] };
    for (let i = 0; i < n; ++i) {
      const len = 1 + rnd(i % 10 == 0 ? 40 : 10);
      let s = "";
      for (let k = 0; k < len; ++k) s += atoms[rnd(atoms.length)];
      const ids = Array.from((await tok.encode(s)).getIds());
      vc.cases.push({ text: s, ids, decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true) });
    }
    out.variants.push(vc);
  }
  fs.writeFileSync(outPath, JSON.stringify(out) + "\n");
}

async function bench(path, textPath) {
  const tok = Tokenizer.fromFile(path);
  const text = fs.readFileSync(textPath, "utf8");
  let best = 1e30, bestCpu = 1e30, n = 0;
  for (let r = 0; r < 3; ++r) {
    const t0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    n = (await tok.encode(text)).getIds().length;
    const c = process.cpuUsage(c0);
    bestCpu = Math.min(bestCpu, (c.user + c.system) / 1e6);
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  // 4 KiB requests cut at character boundaries, as neuron's bench does.
  const buf = Buffer.from(text, "utf8"), chunks = [];
  for (let at = 0; at < buf.length;) {
    let end = Math.min(buf.length, at + 4096);
    while (end < buf.length && (buf[end] & 0xC0) == 0x80) ++end;
    chunks.push(buf.subarray(at, end).toString("utf8"));
    at = end;
  }
  let chunkedCpu = 1e30, chunkedTokens = 0;
  for (let r = 0; r < 3; ++r) {
    const c0 = process.cpuUsage();
    chunkedTokens = 0;
    for (const c of chunks) chunkedTokens += (await tok.encode(c)).getIds().length;
    const c = process.cpuUsage(c0);
    chunkedCpu = Math.min(chunkedCpu, (c.user + c.system) / 1e6);
  }
  const bytes = buf.length;
  console.log(JSON.stringify({ text_bytes: bytes, tokens: n, encode_s: best, encode_mb_s: bytes / best / 1e6,
                               encode_cpu_mb_s: bytes / bestCpu / 1e6, chunks_4k: chunks.length,
                               chunked_tokens: chunkedTokens, chunked_cpu_mb_s: bytes / chunkedCpu / 1e6 }));
}

const [mode, a, b, c] = process.argv.slice(2);
if (mode === "cases") cases(a, b, parseInt(c || "300"));
else if (mode === "bench") bench(a, b);
else { console.error("usage: hf_reference.js cases|bench ..."); process.exit(2); }
