// Drives a running neuron daemon through the Responses API with the official
// `openai` npm client and the Messages API with `@anthropic-ai/sdk`: blocking
// and streamed (at temperature 0 the streamed answer must equal the blocking
// one), previous_response_id chaining, a tool round trip fed as input items,
// and each API's error classes. Prints PASS/FAIL lines; exits non-zero on any
// failure.
//   NEURON_BASE_URL  daemon root (default http://127.0.0.1:13131)
//   NEURON_MODEL     model id (default: the first of /v1/models)
//   NEURON_API_KEY   the key, when the daemon wants one
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

const root = (process.env.NEURON_BASE_URL || "http://127.0.0.1:13131").replace(/\/$/, "");
const key = process.env.NEURON_API_KEY || "unused";
const openai = new OpenAI({ baseURL: `${root}/v1`, apiKey: key, maxRetries: 0, timeout: 120000 });
const anthropic = new Anthropic({ baseURL: root, apiKey: key, maxRetries: 0, timeout: 120000 });

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

const model = process.env.NEURON_MODEL || (await openai.models.list()).data[0]?.id;
const itemText = (items, type) =>
  items.filter((i) => i.type === type).map((i) => (i.content || []).map((c) => c.text).join("")).join("");

// ---- Responses ----

let first = null;
await check("responses.create", async () => {
  const r = await openai.responses.create({ model, input: "Write a haiku about the sea.", instructions: "Be brief.",
                                            max_output_tokens: 16, temperature: 0, metadata: { run: "e2e" } });
  assert(r.id.startsWith("resp_") && r.object === "response", `id ${r.id} object ${r.object}`);
  assert(["completed", "incomplete"].includes(r.status), `status ${r.status}`);
  assert(r.output.length > 0, "no output items");
  assert(r.usage.output_tokens > 0 && r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens, "usage");
  assert(typeof r.output_text === "string", "the SDK's output_text");
  assert(r.metadata.run === "e2e", "metadata echoed");
  first = r;
  return JSON.stringify(r.output_text);
});

await check("responses.create stream", async () => {
  const stream = await openai.responses.create({ model, input: "Write a haiku about the sea.", instructions: "Be brief.",
                                                 max_output_tokens: 16, temperature: 0, stream: true });
  let text = "", reasoning = "", seq = -1, final = null;
  const types = new Set();
  for await (const event of stream) {
    types.add(event.type);
    assert(event.sequence_number === seq + 1, `sequence_number ${event.sequence_number} after ${seq}`);
    seq = event.sequence_number;
    if (event.type === "response.output_text.delta") text += event.delta;
    if (event.type === "response.reasoning_text.delta") reasoning += event.delta;
    if (event.type === "response.completed" || event.type === "response.incomplete") final = event.response;
  }
  for (const t of ["response.created", "response.in_progress", "response.output_item.added", "response.output_item.done"])
    assert(types.has(t), `no ${t} event`);
  assert(final, "no response.completed / response.incomplete");
  assert(text === itemText(first.output, "message"), `streamed ${JSON.stringify(text)} != blocking ${JSON.stringify(itemText(first.output, "message"))}`);
  assert(reasoning === itemText(first.output, "reasoning"), "streamed reasoning differs from the blocking one");
  assert(final.usage.output_tokens === first.usage.output_tokens, "usage differs");
  const stored = await openai.responses.retrieve(final.id);
  assert(stored.id === final.id && stored.status === final.status, "the streamed response is stored");
  return `${seq + 1} events`;
});

await check("responses.stream helper (the SDK's own accumulation of the events)", async () => {
  const final = await openai.responses
    .stream({ model, input: "Write a haiku about the sea.", instructions: "Be brief.", max_output_tokens: 16, temperature: 0 })
    .finalResponse();
  assert(itemText(final.output, "message") === itemText(first.output, "message"), `accumulated ${JSON.stringify(final.output)}`);
});

await check("responses previous_response_id chaining, retrieve and delete", async () => {
  const got = await openai.responses.retrieve(first.id);
  assert(got.id === first.id && JSON.stringify(got.output) === JSON.stringify(first.output), "retrieve returns the stored response");
  const next = await openai.responses.create({ model, input: "Another one.", previous_response_id: first.id, max_output_tokens: 4 });
  assert(next.previous_response_id === first.id, "previous_response_id echoed");
  assert(next.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens - 8,
         `input ${next.usage.input_tokens} does not hold the previous turn (${first.usage.input_tokens} + ${first.usage.output_tokens})`);
  await openai.responses.del(next.id);
  try {
    await openai.responses.retrieve(next.id);
    throw new Error("a deleted response was returned");
  } catch (e) {
    assert(e instanceof OpenAI.NotFoundError, `expected NotFoundError, got ${e.constructor.name}`);
  }
  try {
    await openai.responses.create({ model, input: "x", previous_response_id: "resp_doesnotexist" });
    throw new Error("an unknown previous_response_id was accepted");
  } catch (e) {
    assert(e instanceof OpenAI.NotFoundError, `expected NotFoundError, got ${e.constructor.name}`);
    assert(e.param === "previous_response_id", `param ${e.param}`);
  }
});

await check("responses tool round trip in the input", async () => {
  const tools = [{ type: "function", name: "get_weather", description: "Weather of a city", strict: false,
                   parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const input = [
    { role: "user", content: [{ type: "input_text", text: "What is the weather in Paris?" }] },
    { type: "function_call", call_id: "call_1", name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) },
    { type: "function_call_output", call_id: "call_1", output: "sunny, 21 C" },
  ];
  const r = await openai.responses.create({ model, input, tools, max_output_tokens: 8, temperature: 0 });
  const bare = await openai.responses.create({ model, input: input.slice(0, 1), tools, max_output_tokens: 1 });
  assert(r.usage.input_tokens > bare.usage.input_tokens + 10, `the call and its output were not rendered (${r.usage.input_tokens} vs ${bare.usage.input_tokens})`);
  assert(r.tools.length === 1 && r.tools[0].name === "get_weather", "tools echoed");
  const streamed = await openai.responses.create({ model, input, tools, max_output_tokens: 8, temperature: 0, stream: true });
  let final = null;
  for await (const event of streamed) if (event.type.startsWith("response.") && event.response?.usage) final = event.response;
  assert(final && final.usage.output_tokens === r.usage.output_tokens, "streamed with tools");
  return `${r.usage.input_tokens} input tokens`;
});

await check("responses errors map to the client's exception classes", async () => {
  try {
    await openai.responses.create({ model, input: "x", tool_choice: "required" });  // no tools to call
    throw new Error("tool_choice required without tools was accepted");
  } catch (e) {
    assert(e instanceof OpenAI.BadRequestError, `expected BadRequestError, got ${e.constructor.name}`);
    assert(e.param === "tool_choice", `param ${e.param}`);
  }
});

// ---- Anthropic Messages ----

const messages = [{ role: "user", content: "Write a haiku about the sea." }];
let message = null;
await check("anthropic messages.create", async () => {
  const m = await anthropic.messages.create({ model, max_tokens: 16, temperature: 0, system: "Be brief.", messages });
  assert(m.id.startsWith("msg_") && m.type === "message" && m.role === "assistant", JSON.stringify(m));
  assert(["end_turn", "max_tokens"].includes(m.stop_reason), `stop_reason ${m.stop_reason}`);
  assert(m.usage.output_tokens > 0 && m.usage.input_tokens > 0, "usage");
  assert(m.content.length > 0, "no content blocks");
  message = m;
  return JSON.stringify(m.content.map((b) => b.type));
});

await check("anthropic messages.create stream", async () => {
  const stream = await anthropic.messages.create({ model, max_tokens: 16, temperature: 0, system: "Be brief.", messages, stream: true });
  const blocks = [];
  let stop = null, sawStart = false, sawStop = false;
  for await (const event of stream) {
    if (event.type === "message_start") sawStart = true;
    if (event.type === "content_block_start") blocks[event.index] = { ...event.content_block };
    if (event.type === "content_block_delta") {
      const b = blocks[event.index];
      if (event.delta.type === "text_delta") b.text += event.delta.text;
      if (event.delta.type === "thinking_delta") b.thinking += event.delta.thinking;
    }
    if (event.type === "message_delta") stop = event.delta.stop_reason;
    if (event.type === "message_stop") sawStop = true;
  }
  assert(sawStart && sawStop, "message_start and message_stop");
  assert(stop === message.stop_reason, `stop_reason ${stop} != ${message.stop_reason}`);
  assert(JSON.stringify(blocks) === JSON.stringify(message.content),
         `streamed ${JSON.stringify(blocks)} != blocking ${JSON.stringify(message.content)}`);
  return `${blocks.length} block(s)`;
});

await check("anthropic messages.countTokens", async () => {
  const counted = await anthropic.messages.countTokens({ model, system: "Be brief.", messages });
  assert(counted.input_tokens === message.usage.input_tokens + (message.usage.cache_read_input_tokens || 0),
         `counted ${counted.input_tokens}, used ${JSON.stringify(message.usage)}`);
  return `${counted.input_tokens} tokens`;
});

await check("anthropic messages.stream helper and a tool_result turn", async () => {
  const tools = [{ name: "get_weather", description: "Weather of a city", input_schema: { type: "object", properties: { city: { type: "string" } } } }];
  const turn = [
    { role: "user", content: "What is the weather in Paris?" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny, 21 C" }] },
  ];
  const final = await anthropic.messages.stream({ model, max_tokens: 8, temperature: 0, tools, messages: turn }).finalMessage();
  assert(final.type === "message" && final.usage.output_tokens > 0, JSON.stringify(final));
  const bare = await anthropic.messages.create({ model, max_tokens: 1, tools, messages: turn.slice(0, 1) });
  assert(final.usage.input_tokens + (final.usage.cache_read_input_tokens || 0) > bare.usage.input_tokens + (bare.usage.cache_read_input_tokens || 0) + 10,
         "the tool_use and tool_result were not rendered");
});

await check("anthropic errors map to the SDK's exception classes", async () => {
  try {
    await anthropic.messages.create({ model, max_tokens: 4, messages, tool_choice: { type: "any" } });  // no tools to use
    throw new Error("tool_choice any without tools was accepted");
  } catch (e) {
    assert(e instanceof Anthropic.BadRequestError, `expected BadRequestError, got ${e.constructor.name}`);
    assert(e.error?.type === "error" && e.error?.error?.type === "invalid_request_error", JSON.stringify(e.error));
  }
  try {
    await anthropic.messages.create({ model: "no-such-model", max_tokens: 4, messages });
    throw new Error("an unknown model was accepted");
  } catch (e) {
    assert(e instanceof Anthropic.NotFoundError, `expected NotFoundError, got ${e.constructor.name}`);
  }
});

console.log(failures ? `${failures} check(s) failed` : "all checks passed");
process.exit(failures ? 1 : 0);
