// Drives a running neuron daemon with the official OpenAI npm client:
// models.list, chat and completions, streaming and not. At temperature 0 the
// streamed text must equal the blocking answer. Prints PASS/FAIL lines and
// exits non-zero on any failure.
//   NEURON_BASE_URL  daemon root (default http://127.0.0.1:13131)
//   NEURON_MODEL     model id (default: the first of /v1/models)
//   NEURON_API_KEY   sent as the bearer token when set
import OpenAI from "openai";

const root = (process.env.NEURON_BASE_URL || "http://127.0.0.1:13131").replace(/\/$/, "");
const client = new OpenAI({ baseURL: `${root}/v1`, apiKey: process.env.NEURON_API_KEY || "unused", maxRetries: 0, timeout: 120000 });

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

const models = await client.models.list();
const model = process.env.NEURON_MODEL || models.data[0]?.id;

// /v1/models lists the names clients send: a directory model by its folder name, never a path.
const listed = model.startsWith("/") ? model.split("/").filter(Boolean).pop() : model;
await check("models.list", async () => {
  assert(models.data.some((m) => m.id === listed), `${listed} not in ${JSON.stringify(models.data.map((m) => m.id))}`);
  assert(models.data.every((m) => !m.id.startsWith("/")), `a path in ${JSON.stringify(models.data.map((m) => m.id))}`);
  return `${models.data.length} model(s)`;
});

await check("models.retrieve", async () => {
  for (const name of [model, listed]) {
    const m = await client.models.retrieve(name);
    assert(m.id === listed && m.object === "model", JSON.stringify(m));
  }
});

const messages = [{ role: "user", content: "Write a haiku about the sea." }];
let chatText = "";
await check("chat.completions.create", async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
  assert(r.id.startsWith("chatcmpl-"), `id ${r.id}`);
  assert(r.object === "chat.completion", `object ${r.object}`);
  assert(r.choices.length === 1 && r.choices[0].message.role === "assistant", "one assistant choice");
  assert(["stop", "length"].includes(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
  assert(r.usage.completion_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, "usage");
  chatText = (r.choices[0].message.reasoning_content || "") + "|" + (r.choices[0].message.content || "");
  return JSON.stringify(r.choices[0].message.content);
});

await check("chat.completions.create stream", async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let content = "", reasoning = "", finish = null, usage = null, role = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert(chunk.object === "chat.completion.chunk", `object ${chunk.object}`);
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      content += c.delta.content || "";
      reasoning += c.delta.reasoning_content || "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert(role === "assistant", "role chunk");
  assert(finish === "stop" || finish === "length", `finish_reason ${finish}`);
  assert(usage && usage.completion_tokens > 0, "usage chunk");
  assert(reasoning + "|" + content === chatText, `streamed ${JSON.stringify(content)} != blocking ${JSON.stringify(chatText)}`);
  return `${chunks} chunks`;
});

let completionText = "";
await check("completions.create", async () => {
  const r = await client.completions.create({ model, prompt: "The quick brown fox", max_tokens: 16, temperature: 0 });
  assert(r.id.startsWith("cmpl-"), `id ${r.id}`);
  assert(r.object === "text_completion", `object ${r.object}`);
  assert(typeof r.choices[0].text === "string", "text");
  assert(r.usage.completion_tokens > 0, "usage");
  completionText = r.choices[0].text;
  return JSON.stringify(completionText);
});

await check("completions.create stream", async () => {
  const stream = await client.completions.create({ model, prompt: "The quick brown fox", max_tokens: 16, temperature: 0, stream: true });
  let text = "", finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text || "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert(finish === "stop" || finish === "length", `finish_reason ${finish}`);
  assert(text === completionText, `streamed ${JSON.stringify(text)} != blocking ${JSON.stringify(completionText)}`);
});

await check("errors map to the client's exception classes", async () => {
  try {
    await client.chat.completions.create({ model, messages, n: 17 });
    throw new Error("n=17 was accepted");
  } catch (e) {
    assert(e instanceof OpenAI.BadRequestError, `expected BadRequestError, got ${e.constructor.name}`);
    assert(e.param === "n", `param ${e.param}`);
  }
  try {
    await client.chat.completions.create({ model: "no-such-model", messages });
    throw new Error("unknown model was accepted");
  } catch (e) {
    assert(e instanceof OpenAI.NotFoundError, `expected NotFoundError, got ${e.constructor.name}`);
    assert(e.code === "model_not_found", `code ${e.code}`);
  }
});

console.log(failures ? `${failures} check(s) failed` : "all checks passed");
process.exit(failures ? 1 : 0);
