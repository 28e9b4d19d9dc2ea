// The OpenAI features real clients use, against a running neuron daemon with
// the official `openai` npm client: logprobs and n > 1 (streamed and not), a
// browser-style CORS preflight and fetch (the daemon must be started with
// --allowed-origins http://app.example), and every answer validated with ajv
// against OpenAI's response schemas (openai_schemas.mjs); with a tool call
// model, streamed tool calls through the openai client and LlamaIndex. Prints PASS/FAIL
// lines and exits non-zero on any failure.
//   NEURON_BASE_URL  daemon root (default http://127.0.0.1:13131)
//   NEURON_MODEL     model id (default: the first of /v1/models)
import Ajv from "ajv";
import OpenAI from "openai";
import { OpenAI as LlamaOpenAI } from "@llamaindex/openai";

import * as schemas from "./openai_schemas.mjs";

const root = (process.env.NEURON_BASE_URL || "http://127.0.0.1:13131").replace(/\/$/, "");
const origin = "http://app.example";
const client = new OpenAI({ baseURL: `${root}/v1`, apiKey: "unused", maxRetries: 0, timeout: 120000 });
const ajv = new Ajv({ allErrors: true, strict: false });
const validators = Object.fromEntries(Object.entries(schemas).map(([name, s]) => [name, ajv.compile(s)]));

let failures = 0;
async function check(name, fn) {
  const start = Date.now();
  try {
    const detail = await fn();
    console.log(`PASS ${name} (${Date.now() - start} ms)${detail ? ": " + detail : ""}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}
function assert(cond, message) {
  if (!cond) throw new Error(message);
}
function validate(schema, value) {
  const v = validators[schema];
  if (!v(value)) throw new Error(`${schema} schema: ${ajv.errorsText(v.errors)}\n${JSON.stringify(value).slice(0, 2000)}`);
}
// Raw JSON answers (the client would hide fields the schema should see).
async function post(path, body) {
  const r = await fetch(`${root}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}
async function postStream(path, body) {
  const r = await fetch(`${root}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await r.text();
  const events = text.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
  assert(events.at(-1) === "[DONE]", "stream ends with [DONE]");
  return events.slice(0, -1).map((e) => JSON.parse(e));
}

const models = await client.models.list();
const model = process.env.NEURON_MODEL || models.data[0]?.id;
const messages = [{ role: "user", content: "Name three colours." }];

await check("responses validate against OpenAI's schemas", async () => {
  const list = await fetch(`${root}/v1/models`).then((r) => r.json());
  validate("modelsList", list);
  const chat = await post("/v1/chat/completions", { model, messages, max_tokens: 8, logprobs: true, top_logprobs: 2, n: 2 });
  assert(chat.status === 200, `status ${chat.status}`);
  validate("chatCompletion", chat.json);
  // The schemas bite: a wrong shape is refused.
  for (const broken of [{ ...chat.json, object: "chat.completion.chunk" }, { ...chat.json, choices: [{ ...chat.json.choices[0], message: { role: "assistant" } }] }]) {
    let refused = false;
    try {
      validate("chatCompletion", broken);
    } catch {
      refused = true;
    }
    assert(refused, "a broken answer passed the schema");
  }
  for (const chunk of await postStream("/v1/chat/completions", {
    model, messages, max_tokens: 8, stream: true, logprobs: true, top_logprobs: 1, n: 2, stream_options: { include_usage: true },
  }))
    validate("chatCompletionChunk", chunk);
  const comp = await post("/v1/completions", { model, prompt: "Once upon a time", max_tokens: 8, logprobs: 2, n: 2 });
  validate("completion", comp.json);
  for (const chunk of await postStream("/v1/completions", { model, prompt: "Once upon a time", max_tokens: 8, logprobs: 1, stream: true }))
    validate("completion", chunk);
  for (const bad of [
    ["/v1/chat/completions", { model, messages, n: 17 }],
    ["/v1/chat/completions", { model: "no-such-model", messages }],
    ["/v1/completions", { model, prompt: "x", echo: true, logprobs: 1 }],
  ]) {
    const r = await post(...bad);
    assert(r.status >= 400, `status ${r.status}`);
    validate("errorEnvelope", r.json);
  }
});

await check("chat logprobs and n=2 through the client", async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0, n: 2, logprobs: true, top_logprobs: 3 });
  assert(r.choices.length === 2, `${r.choices.length} choices`);
  assert(r.choices.map((c) => c.index).join() === "0,1", "indexes");
  assert(r.system_fingerprint.startsWith("neuron-"), `system_fingerprint ${r.system_fingerprint}`);
  for (const c of r.choices) {
    assert(c.message.refusal === null, "refusal null");
    assert(c.logprobs.content.length > 0, "logprobs.content");
    for (const t of c.logprobs.content) {
      assert(t.top_logprobs.length === 3, `top_logprobs ${t.top_logprobs.length}`);
      assert(t.top_logprobs[0].token === t.token, "greedy: the sampled token is the most likely");
    }
  }
  assert(r.choices[0].message.content === r.choices[1].message.content, "greedy choices are equal");
  assert(r.usage.prompt_tokens_details.cached_tokens >= 0, "cached_tokens");
  return `${r.choices[0].logprobs.content.length} tokens, usage ${JSON.stringify(r.usage)}`;
});

await check("chat logprobs and n=2 streamed", async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 12, temperature: 0, n: 2, logprobs: true, stream: true, stream_options: { include_usage: true },
  });
  const text = ["", ""], logprobs = [0, 0], finish = [null, null];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text[c.index] += (c.delta.reasoning_content || "") + (c.delta.content || "");
      logprobs[c.index] += c.logprobs?.content?.length || 0;
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  assert(finish.every((f) => f === "length" || f === "stop"), `finish ${finish}`);
  assert(text[0] === text[1], "greedy choices stream the same text");
  assert(logprobs[0] > 0 && logprobs[1] > 0, `logprobs ${logprobs}`);
  assert(usage && usage.completion_tokens >= logprobs[0] + logprobs[1], `usage ${JSON.stringify(usage)}`);
  assert(usage.prompt_tokens_details && typeof usage.prompt_tokens_details.cached_tokens === "number", "streamed cached_tokens");
});

await check("completions logprobs and n=2", async () => {
  const r = await client.completions.create({ model, prompt: "The quick brown fox", max_tokens: 8, temperature: 0, logprobs: 2, n: 2 });
  assert(r.choices.length === 2, "two choices");
  const lp = r.choices[0].logprobs;
  assert(lp.tokens.length === lp.token_logprobs.length && lp.tokens.length === lp.text_offset.length, "aligned arrays");
  assert(lp.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2), "top_logprobs dicts");
  const stream = await client.completions.create({ model, prompt: "The quick brown fox", max_tokens: 8, temperature: 0, n: 2, stream: true });
  const text = ["", ""];
  for await (const chunk of stream) for (const c of chunk.choices) text[c.index] += c.text;
  assert(text[0] === r.choices[0].text && text[1] === r.choices[1].text, `streamed ${JSON.stringify(text)}`);
});

await check("seeded choices repeat (choice i draws from seed + i)", async () => {
  const ask = () => client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 1, seed: 7, n: 2 });
  const [a, b] = [await ask(), await ask()];
  assert(a.choices[0].message.content === b.choices[0].message.content, "seed 7 repeats");
  assert(a.choices[1].message.content === b.choices[1].message.content, "seed 8 repeats");
});

await check("browser preflight and fetch from an allowed origin", async () => {
  const pre = await fetch(`${root}/v1/chat/completions`, {
    method: "OPTIONS",
    headers: { Origin: origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type,x-stainless-os" },
  });
  assert(pre.status === 204, `preflight status ${pre.status}`);
  assert(pre.headers.get("access-control-allow-origin") === origin, `allow-origin ${pre.headers.get("access-control-allow-origin")}`);
  const allowed = pre.headers.get("access-control-allow-headers") || "";
  for (const h of ["authorization", "content-type", "x-stainless-os"]) assert(allowed.includes(h), `${h} not in ${allowed}`);
  assert(/POST/.test(pre.headers.get("access-control-allow-methods") || ""), "POST allowed");
  const r = await fetch(`${root}/v1/chat/completions`, {
    method: "POST",
    headers: { Origin: origin, "content-type": "application/json", authorization: "Bearer unused" },
    body: JSON.stringify({ model, messages, max_tokens: 2, stream: true }),
  });
  assert(r.status === 200 && r.headers.get("access-control-allow-origin") === origin, "the stream carries the origin");
  assert((await r.text()).endsWith("data: [DONE]\n\n"), "stream complete");
  const other = await fetch(`${root}/v1/models`, { headers: { Origin: "http://evil.example" } });
  assert(other.headers.get("access-control-allow-origin") === null, "another origin gets no CORS header");
});

// A model that always answers with one tool call (make_tool_call_model.mjs).
const toolModel = process.env.NEURON_TOOL_MODEL;
const tools = [{ type: "function", function: { name: "lookup", parameters: { type: "object", properties: { q: { type: "array" } } } } }];
const toolMessages = [{ role: "user", content: "Look it up." }];
if (toolModel) {
  await check("streamed tool calls arrive as deltas and the client reassembles them", async () => {
    const blocking = await client.chat.completions.create({ model: toolModel, messages: toolMessages, tools, temperature: 0, max_tokens: 40 });
    validate("chatCompletion", blocking);
    const call = blocking.choices[0].message.tool_calls?.[0];
    assert(blocking.choices[0].finish_reason === "tool_calls", `finish ${blocking.choices[0].finish_reason}`);
    assert(call && call.function.name === "lookup" && call.function.arguments === '{"q":[1,2]}', JSON.stringify(blocking.choices[0].message));

    let deltas = 0, firstHasName = false, repeated = 0;
    const stream = client.beta.chat.completions.stream({ model: toolModel, messages: toolMessages, tools, temperature: 0, max_tokens: 40, stream: true });
    stream.on("chunk", (chunk) => {
      validate("chatCompletionChunk", chunk);
      const entries = chunk.choices[0]?.delta?.tool_calls || [];
      if (new Set(entries.map((d) => d.index)).size !== entries.length) repeated++;  // OpenAI sends one entry per index per chunk
      for (const d of entries) {
        if (deltas++ === 0) firstHasName = d.id?.startsWith("call_") && d.type === "function" && d.function?.name === "lookup" && typeof d.function?.arguments === "string";
      }
    });
    const final = await stream.finalChatCompletion();
    const got = final.choices[0].message.tool_calls?.[0];
    assert(firstHasName, "the first delta has index, id, type, name and the first arguments");
    assert(repeated === 0, `${repeated} chunk(s) with two entries of one index`);
    assert(deltas > 2, `arguments came in fragments (${deltas} deltas)`);
    assert(final.choices[0].finish_reason === "tool_calls", `streamed finish ${final.choices[0].finish_reason}`);
    assert(got && got.function.name === "lookup" && got.function.arguments === call.function.arguments, JSON.stringify(got));
    return `${deltas} tool call deltas`;
  });
}

if (toolModel) {
  // LlamaIndex reads only delta.tool_calls[0] of each chunk: it loses whatever a second entry of the
  // same index carries (the first argument piece, "{", before one entry per index per chunk).
  await check("LlamaIndex streamed tool calls", async () => {
    const llm = new LlamaOpenAI({ model: toolModel, apiKey: "unused", baseURL: `${root}/v1`, temperature: 0, maxTokens: 40 });
    const lookup = { metadata: { name: "lookup", description: "Looks it up.", parameters: tools[0].function.parameters }, call: async () => "" };
    const stream = await llm.chat({ messages: toolMessages, tools: [lookup], stream: true });
    let last = null;
    for await (const chunk of stream) if (chunk.options?.toolCall) last = chunk.options.toolCall[0];
    assert(last && last.name === "lookup", JSON.stringify(last));
    const input = typeof last.input === "string" ? JSON.parse(last.input) : last.input;
    assert(JSON.stringify(input) === '{"q":[1,2]}', JSON.stringify(last));
    return JSON.stringify(last.input);
  });
}

console.log(failures ? `${failures} check(s) failed` : "all checks passed");
process.exit(failures ? 1 : 0);
