// Embeddings and rerank through the daemon with the clients people use,
// checked against the references in tests/data/embed (sentence-transformers
// and transformers, float32; the daemon runs with --cpu-activations f32, so
// 1e-4 holds):
//  - the openai client's embeddings.create: floats, base64 (the client's
//    default, decoded by it; and asked for explicitly, decoded here as
//    little-endian f32), dimensions (Matryoshka truncation, renormalized),
//    token-id inputs, `prompt_name` as an extra body field (the model's query
//    prompt: the vectors of the prompt prepended by hand; an unknown name is
//    a 400 naming `prompt_name`), and a 400 naming `input` for an empty one;
//  - the AI SDK's embedMany and embed (@ai-sdk/openai);
//  - LangChain's OpenAIEmbeddings (embedDocuments, embedQuery);
//  - POST /v1/rerank (Jina/Cohere shape) and /v1/score (vLLM's) on a
//    Qwen3-Reranker-shaped model, against transformers' yes/no scores.
//   NEURON_BASE_URL     daemon root
//   NEURON_EMBED_MODEL  the Qwen3-Embedding-shaped model's name
//   NEURON_RERANK_MODEL the reranker's name
//   NEURON_EMBED_DATA   tests/data/embed
import OpenAI from "openai";
import { embed, embedMany } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { OpenAIEmbeddings } from "@langchain/openai";
import { readFileSync } from "node:fs";

const root = (process.env.NEURON_BASE_URL || "http://127.0.0.1:13131").replace(/\/$/, "");
const model = process.env.NEURON_EMBED_MODEL || "qwen3_embed-a";
const reranker = process.env.NEURON_RERANK_MODEL;
const data = process.env.NEURON_EMBED_DATA;
const golden = JSON.parse(readFileSync(`${data}/qwen3_embed-a/embed_golden.json`, "utf8"));
const rerankGolden = JSON.parse(readFileSync(`${data}/rerank_golden.json`, "utf8"));
const texts = golden.inputs.map((i) => (i.prompt_name ? golden.query_prompt : "") + i.text);
const client = new OpenAI({ baseURL: `${root}/v1`, apiKey: "unused", maxRetries: 0, timeout: 300000 });
const TOL = 1e-4;

let failures = 0;
async function check(name, fn) {
  const start = Date.now();
  try {
    const detail = await fn();
    console.log(`PASS ${name} (${Date.now() - start} ms)${detail ? ": " + detail : ""}`);
  } catch (e) {
    failures += 1;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}
function assert(ok, what) {
  if (!ok) throw new Error(what);
}
function maxDiff(a, b) {
  assert(a.length === b.length, `length ${a.length} != ${b.length}`);
  return Math.max(...a.map((x, i) => Math.abs(x - b[i])));
}
function expectClose(got, want, what) {
  const d = maxDiff(Array.from(got), want);
  assert(d < TOL, `${what}: max |diff| ${d}`);
  return d;
}

await check("openai embeddings.create, floats, documents and queries in one call", async () => {
  const r = await client.embeddings.create({ model, input: texts, encoding_format: "float" });
  assert(r.data.length === texts.length, `${r.data.length} embeddings`);
  let worst = 0;
  r.data.forEach((d, i) => (worst = Math.max(worst, expectClose(d.embedding, golden.inputs[i].embedding, `input ${i}`))));
  const tokens = golden.inputs.reduce((n, i) => n + i.token_ids.length, 0);
  assert(r.usage.prompt_tokens === tokens && r.usage.total_tokens === tokens, JSON.stringify(r.usage));
  return `max |diff| ${worst.toExponential(2)}`;
});

await check("openai embeddings.create, the client's default (base64, decoded by the client)", async () => {
  const r = await client.embeddings.create({ model, input: texts.slice(0, 3) });
  r.data.forEach((d, i) => expectClose(d.embedding, golden.inputs[i].embedding, `input ${i}`));
});

await check("openai embeddings.create, base64 asked for: little-endian f32, with dimensions 8", async () => {
  const r = await client.embeddings.create({ model, input: texts, encoding_format: "base64", dimensions: 8 });
  r.data.forEach((d, i) => {
    assert(typeof d.embedding === "string", "not a base64 string");
    const b = Buffer.from(d.embedding, "base64");
    const v = Array.from({ length: b.length / 4 }, (_, k) => b.readFloatLE(4 * k));
    expectClose(v, golden.inputs[i].embedding_dims8, `input ${i}`);
  });
});

await check("openai embeddings.create, token ids", async () => {
  const r = await client.embeddings.create({ model, input: golden.inputs.map((i) => i.token_ids), encoding_format: "float" });
  r.data.forEach((d, i) => expectClose(d.embedding, golden.inputs[i].embedding, `input ${i}`));
});

await check("openai embeddings.create, prompt_name as an extra body field: the prompt prepended by hand", async () => {
  const queries = golden.inputs.filter((i) => i.prompt_name === "query");
  assert(queries.length >= 2, `${queries.length} queries in the golden file`);
  // The client sends fields it does not know as they are.
  const named = await client.embeddings.create({ model, input: queries.map((q) => q.text), encoding_format: "float", prompt_name: "query" });
  const typed = await client.embeddings.create({ model, input: queries.map((q) => golden.query_prompt + q.text), encoding_format: "float" });
  let worst = 0;
  named.data.forEach((d, i) => {
    expectClose(d.embedding, queries[i].embedding, `query ${i}`);
    // The same ids; the second request takes the prompt's KV from the prefix cache: rounding apart, equal.
    const d2 = maxDiff(d.embedding, typed.data[i].embedding);
    assert(d2 < 1e-5, `query ${i}: prompt_name vs the prompt typed in: max |diff| ${d2}`);
    worst = Math.max(worst, d2);
  });
  assert(named.usage.prompt_tokens === typed.usage.prompt_tokens, `usage ${JSON.stringify(named.usage)} vs ${JSON.stringify(typed.usage)}`);
  return `max |diff| to the typed prompt ${worst.toExponential(2)}`;
});

await check("openai embeddings.create, an unknown prompt_name is a 400 naming the field", async () => {
  try {
    await client.embeddings.create({ model, input: "What is the capital of China?", prompt_name: "passage" });
  } catch (e) {
    assert(e.status === 400 && e.param === "prompt_name" && e.message.includes("passage"), `status ${e.status} param ${e.param}: ${e.message}`);
    return e.message;
  }
  throw new Error("accepted");
});

await check("openai embeddings.create, an empty input is a 400 naming it", async () => {
  try {
    await client.embeddings.create({ model, input: "" });
  } catch (e) {
    assert(e.status === 400 && e.param === "input", `status ${e.status} param ${e.param}: ${e.message}`);
    return e.message;
  }
  throw new Error("accepted");
});

await check("AI SDK embedMany and embed", async () => {
  const provider = createOpenAI({ baseURL: `${root}/v1`, apiKey: "unused" });
  const { embeddings, usage } = await embedMany({ model: provider.embedding(model), values: texts, maxRetries: 0 });
  embeddings.forEach((e, i) => expectClose(e, golden.inputs[i].embedding, `input ${i}`));
  const one = await embed({ model: provider.embedding(model), value: texts[6], maxRetries: 0 });
  expectClose(one.embedding, golden.inputs[6].embedding, "embed");
  return `usage ${JSON.stringify(usage)}`;
});

await check("LangChain OpenAIEmbeddings embedDocuments and embedQuery", async () => {
  const lc = new OpenAIEmbeddings({ model, apiKey: "unused", configuration: { baseURL: `${root}/v1` }, maxRetries: 0 });
  const docs = golden.inputs.filter((i) => !i.prompt_name);
  const vectors = await lc.embedDocuments(docs.map((i) => i.text));
  vectors.forEach((v, i) => expectClose(v, docs[i].embedding, `document ${i}`));
  expectClose(await lc.embedQuery(docs[2].text), docs[2].embedding, "query");
});

if (reranker) {
  const pairs = rerankGolden.pairs;
  const post = async (path, body) => {
    const r = await fetch(`${root}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return { status: r.status, body: await r.json() };
  };
  await check("POST /v1/rerank: scores of transformers, sorted, documents returned", async () => {
    const { status, body } = await post("/v1/rerank", { model: reranker, query: pairs[0].query, documents: [pairs[1].document, pairs[0].document] });
    assert(status === 200, JSON.stringify(body));
    const want = [pairs[1].score, pairs[0].score];
    for (const r of body.results) {
      assert(Math.abs(r.relevance_score - want[r.index]) < TOL, `document ${r.index}: ${r.relevance_score} vs ${want[r.index]}`);
      assert(r.document.text === [pairs[1].document, pairs[0].document][r.index], "document text");
    }
    assert(body.results[0].relevance_score >= body.results[1].relevance_score, "not sorted");
    assert(body.usage.total_tokens > 0, "no usage");
  });
  await check("POST /v1/score: text_1 and text_2 lists, pair by pair", async () => {
    const plain = pairs.filter((p) => !p.instruction);
    const { status, body } = await post("/v1/score", { model: reranker, text_1: plain.map((p) => p.query), text_2: plain.map((p) => p.document) });
    assert(status === 200, JSON.stringify(body));
    body.data.forEach((d, i) => assert(Math.abs(d.score - plain[i].score) < TOL, `pair ${i}: ${d.score} vs ${plain[i].score}`));
  });
  await check("POST /v1/rerank without documents is a 400 naming them", async () => {
    const { status, body } = await post("/v1/rerank", { model: reranker, query: "q" });
    assert(status === 400 && body.error.param === "documents", JSON.stringify(body));
  });
}

if (failures) {
  console.log(`${failures} check(s) failed`);
  process.exit(1);
}
console.log("all embeddings checks passed");
