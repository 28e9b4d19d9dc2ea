// Constrained decoding through the daemon, checked by independent clients:
//  1. a property test: 20 JSON Schemas x 10 generations at temperature 1 with
//     the random-weight model; every answer must end by itself ("stop"),
//     parse, and validate against its schema with ajv;
//  2. response_format json_object (streamed), tool_choice "required" and a
//     named function through the openai client (message.tool_calls whose
//     arguments validate against the tool's parameters);
//  3. the libraries clients use for structured output, all against neuron:
//     the openai client's chat.completions.parse() with a zod schema (zod 3's
//     .int() and .regex(), and zod 4's JSON Schema with its safe-integer
//     bounds), the AI SDK's generateObject with a nested zod schema, LangChain
//     JS withStructuredOutput (json_schema and function calling), and the
//     Agents SDK with toolChoice "required" and an outputType (the forced call,
//     then "a tool call or text of the schema");
//  4. tool_choice "auto" with a response_format: a tool call or the format.
//   NEURON_BASE_URL  daemon root (default http://127.0.0.1:13131)
//   NEURON_MODEL     model id (default: the first of /v1/models)
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { z } from "zod";
import { z as z4 } from "zod/v4";
import { Agent, run, tool as agentTool, setOpenAIAPI, setTracingDisabled } from "@openai/agents";
import { generateObject } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";

const root = (process.env.NEURON_BASE_URL || "http://127.0.0.1:13131").replace(/\/$/, "");
const client = new OpenAI({ baseURL: `${root}/v1`, apiKey: "unused", maxRetries: 0, timeout: 300000 });
const model = process.env.NEURON_MODEL || (await client.models.list()).data[0]?.id;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

let failures = 0;
async function check(name, fn) {
  const start = Date.now();
  try {
    const detail = await fn();
    console.log(`PASS ${name} (${Date.now() - start} ms)${detail ? ": " + detail : ""}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}${e && e.text ? "\n  text: " + e.text : ""}`);
  }
}
function assert(cond, message) {
  if (!cond) throw new Error(message);
}

// Bounded schemas (a random model writes strings until the bound closes them).
const str = (max, min = 0) => ({ type: "string", maxLength: max, ...(min ? { minLength: min } : {}) });
const schemas = [
  { type: "object", properties: { name: str(12), age: { type: "integer", minimum: 0 }, ok: { type: "boolean" } }, required: ["name", "age", "ok"], additionalProperties: false },
  { type: "object", properties: { street: str(10), city: str(8), zip: { type: "integer" } }, required: ["city"] },
  { type: "array", items: { enum: ["red", "green", "blue"] }, minItems: 1, maxItems: 4 },
  { anyOf: [str(6), { type: "integer" }, { type: "null" }] },
  { type: "object", properties: { v: { type: ["number", "null"] }, w: { type: ["boolean", "string"], maxLength: 4 } }, required: ["v", "w"] },
  { type: "object", properties: { kind: { const: "point" }, x: { type: "number" }, y: { type: "number" } }, required: ["kind", "x", "y"] },
  { $defs: { node: { type: "object", properties: { v: { type: "integer" }, next: { anyOf: [{ $ref: "#/$defs/node" }, { type: "null" }] } }, required: ["v", "next"], additionalProperties: false } }, $ref: "#/$defs/node" },
  { type: "object", properties: { items: { type: "array", maxItems: 3, items: { type: "object", properties: { id: { type: "integer", minimum: 1 }, tags: { type: "array", items: str(5), maxItems: 2 } }, required: ["id", "tags"] } } }, required: ["items"] },
  { type: "object", properties: { n: { type: "integer", exclusiveMinimum: 0 }, f: { type: "number", minimum: 0 } }, required: ["n", "f"] },
  { oneOf: [{ type: "object", properties: { cat: str(5) }, required: ["cat"], additionalProperties: false }, { type: "object", properties: { dog: { type: "integer" } }, required: ["dog"], additionalProperties: false }] },
  { enum: Array.from({ length: 100 }, (_, i) => `option_${i * 37}`) },
  { allOf: [{ type: "object", properties: { a: { type: "boolean" } }, required: ["a"] }] },
  { type: "array", items: { type: "array", items: { type: "integer" }, maxItems: 3 }, maxItems: 3 },
  { type: "object", properties: { l1: { type: "object", properties: { l2: { type: "object", properties: { l3: { type: "object", properties: { l4: { type: "object", properties: { leaf: str(4) }, required: ["leaf"] } }, required: ["l4"] } }, required: ["l3"] } }, required: ["l2"] } }, required: ["l1"] },
  { definitions: { color: { enum: ["c", "m", "y", "k"] } }, type: "object", properties: { fg: { $ref: "#/definitions/color" }, bg: { $ref: "#/definitions/color" } }, required: ["fg", "bg"] },
  { type: "object", properties: { code: str(8, 3) }, required: ["code"] },
  { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" }, c: { type: "integer" } } },
  { type: "array", items: { anyOf: [{ type: "integer" }, { type: "number" }] }, maxItems: 5 },
  { type: "object", properties: { title: { type: "string", description: "ignored", maxLength: 10 }, done: { type: "boolean", default: false } }, required: ["title", "done"], title: "Todo" },
  { type: "object", properties: { flag: { type: "null" }, list: { type: "array", items: { type: "boolean" }, minItems: 2, maxItems: 2 } }, required: ["flag", "list"] },
  // Numeric bounds (zod 4's .int() bounds, ranges across zero, exclusive ones, multiples).
  { type: "object", properties: { n: { type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 }, even: { type: "integer", minimum: -7, maximum: 31, multipleOf: 2 },
    p: { type: "number", exclusiveMinimum: -1.5, maximum: 2.25 }, q: { type: "number", minimum: 0.001, exclusiveMaximum: 0.1 }, u: { type: "number" } }, required: ["n", "even", "p", "q", "u"] },
  // Patterns and formats (ajv-formats checks them).
  { type: "object", properties: { code: { type: "string", pattern: "^[A-Z]{3}-\\d{2}$" }, tag: { type: "string", pattern: "^(foo|ba[rz])_[0-9a-f]{4}$" },
    day: { type: "string", format: "date" }, when: { type: "string", format: "date-time" }, ip: { type: "string", format: "ipv4" }, id: { type: "string", format: "uuid" } },
    required: ["code", "tag", "day", "when", "ip", "id"] },
  { type: "object", properties: { mail: { type: "string", format: "email", maxLength: 24 }, host: { type: "string", format: "hostname", maxLength: 20 },
    v6: { type: "string", format: "ipv6", maxLength: 20 }, t: { type: "string", format: "time" }, d: { type: "string", format: "duration", maxLength: 12 }, uri: { type: "string", format: "uri", maxLength: 24 } },
    required: ["mail", "host", "v6", "t", "d", "uri"] },
  // prefixItems, min/maxProperties, propertyNames.
  { type: "array", prefixItems: [{ type: "integer", minimum: 1, maximum: 12 }, { enum: ["a", "b"] }], items: false, minItems: 2 },
  { type: "object", propertyNames: { pattern: "^[a-z]{1,4}$" }, additionalProperties: { type: "boolean" }, minProperties: 1, maxProperties: 3 },
];
const perSchema = 10;

await check(`property test: ${schemas.length} schemas x ${perSchema} generations validate with ajv`, async () => {
  const jobs = [];
  schemas.forEach((schema, s) => {
    const validate = ajv.compile(schema);
    for (let k = 0; k < perSchema; k++) jobs.push({ schema, validate, s, k });
  });
  let done = 0, tokens = 0;
  const problems = [];
  async function one({ schema, validate, s, k }) {
    const r = await client.chat.completions.create({
      model, max_tokens: 1200, temperature: 1, seed: s * 100 + k,
      messages: [{ role: "user", content: `Answer with JSON (schema ${s}).` }],
      response_format: { type: "json_schema", json_schema: { name: `s${s}`, strict: true, schema } },
    });
    const c = r.choices[0];
    tokens += r.usage.completion_tokens;
    if (c.finish_reason !== "stop") return problems.push(`schema ${s} #${k}: finish_reason ${c.finish_reason}: ${c.message.content}`);
    let value;
    try { value = JSON.parse(c.message.content); } catch (e) { return problems.push(`schema ${s} #${k}: does not parse: ${c.message.content}`); }
    if (!validate(value)) problems.push(`schema ${s} #${k}: ${ajv.errorsText(validate.errors)}: ${c.message.content}`);
    done++;
  }
  // A few at a time: the engine batches them.
  const queue = [...jobs];
  await Promise.all(Array.from({ length: 8 }, async () => { while (queue.length) await one(queue.shift()); }));
  assert(problems.length === 0, `${problems.length} of ${jobs.length} invalid:\n` + problems.slice(0, 10).join("\n"));
  assert(done === jobs.length, `${done} of ${jobs.length} checked`);
  return `${done} valid outputs, ${tokens} tokens`;
});

await check("response_format json_object, streamed", async () => {
  const stream = await client.chat.completions.create({
    model, max_tokens: 300, temperature: 1, stream: true,
    messages: [{ role: "user", content: "any object" }], response_format: { type: "json_object" },
  });
  let text = "", finish = "";
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content || "";
    finish = chunk.choices[0]?.finish_reason || finish;
  }
  if (finish === "length") return `cut by max_tokens after ${text.length} characters (a valid prefix)`;
  assert(finish === "stop", `finish_reason ${finish}`);
  const v = JSON.parse(text);
  assert(v !== null && typeof v === "object" && !Array.isArray(v), `not an object: ${text}`);
});

const tools = [
  { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: str(10), unit: { enum: ["c", "f"] } }, required: ["city", "unit"], additionalProperties: false } } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { tz: str(6) }, required: ["tz"] } } },
];
for (const [label, tool_choice] of [["required", "required"], ["named", { type: "function", function: { name: "get_time" } }]]) {
  await check(`tool_choice ${label}`, async () => {
    for (let k = 0; k < 5; k++) {
      const r = await client.chat.completions.create({
        model, max_tokens: 400, temperature: 1, seed: k, tools, tool_choice,
        messages: [{ role: "user", content: "What's the weather?" }],
      });
      const c = r.choices[0];
      assert(c.finish_reason === "tool_calls", `finish_reason ${c.finish_reason}: ${JSON.stringify(c.message)}`);
      assert(c.message.tool_calls?.length === 1, `tool_calls ${JSON.stringify(c.message)}`);
      const call = c.message.tool_calls[0];
      const tool = tools.find((t) => t.function.name === call.function.name);
      assert(tool, `unknown tool ${call.function.name}`);
      if (label === "named") assert(call.function.name === "get_time", `named tool not used: ${call.function.name}`);
      const validate = ajv.compile(tool.function.parameters);
      assert(validate(JSON.parse(call.function.arguments)), `${call.function.arguments}: ${ajv.errorsText(validate.errors)}`);
    }
  });
}

await check("tool_choice required, streamed", async () => {
  const stream = await client.chat.completions.create({
    model, max_tokens: 400, temperature: 1, stream: true, tools, tool_choice: "required",
    messages: [{ role: "user", content: "What's the weather?" }],
  });
  let finish = "", calls = [];
  for await (const chunk of stream) {
    finish = chunk.choices[0]?.finish_reason || finish;
    for (const tc of chunk.choices[0]?.delta?.tool_calls || []) calls.push(tc);
  }
  assert(finish === "tool_calls", `finish_reason ${finish}`);
  assert(calls.length >= 1 && calls[0].function?.name, JSON.stringify(calls));
});

const Person = z.object({
  name: z.string().max(12),
  age: z.number().int(),
  code: z.string().regex(/^[A-Z]{2}\d{3}$/),
  address: z.object({ city: z.string().max(8), lines: z.array(z.string().max(6)).max(2) }),
  role: z.enum(["admin", "user"]),
  nickname: z.string().max(5).nullable(),
});

await check("openai chat.completions.parse() with zodResponseFormat", async () => {
  const r = await client.beta.chat.completions.parse({
    model, max_tokens: 1500, temperature: 1,
    messages: [{ role: "user", content: "Describe a person." }],
    response_format: zodResponseFormat(Person, "person"),
  });
  const parsed = r.choices[0].message.parsed;
  assert(parsed && Person.safeParse(parsed).success, `parsed ${JSON.stringify(parsed)}`);
  return JSON.stringify(parsed);
});

// zod 4 (zod/v4): .int() is {"type": "integer", "minimum": -(2^53-1), "maximum": 2^53-1}.
const Order = z4.object({ qty: z4.number().int(), ref: z4.string().regex(/^[a-z]{2}-\d{3}$/), price: z4.number().min(0).max(1000) });
await check("openai chat.completions.parse() with a zod 4 schema (.int() bounds, .regex())", async () => {
  const schema = z4.toJSONSchema(Order);
  assert(schema.properties.qty.minimum === -9007199254740991 && schema.properties.qty.maximum === 9007199254740991, JSON.stringify(schema));
  const r = await client.beta.chat.completions.parse({
    model, max_tokens: 600, temperature: 1,
    messages: [{ role: "user", content: "An order." }],
    response_format: { type: "json_schema", json_schema: { name: "order", strict: true, schema } },
  });
  const c = r.choices[0];
  assert(c.finish_reason === "stop", `finish_reason ${c.finish_reason}: ${c.message.content}`);
  const parsed = c.message.parsed ?? JSON.parse(c.message.content);
  const ok = Order.safeParse(parsed);
  assert(ok.success, `${c.message.content}: ${JSON.stringify(ok.error?.issues)}`);
  return c.message.content;
});

await check("AI SDK generateObject with a nested zod schema", async () => {
  const provider = createOpenAI({ baseURL: `${root}/v1`, apiKey: "unused", compatibility: "strict" });
  const { object, finishReason } = await generateObject({
    model: provider.chat(model, { structuredOutputs: true }),
    schema: Person, prompt: "Describe a person.", maxTokens: 1500, temperature: 1, maxRetries: 0,
  });
  assert(finishReason === "stop", `finishReason ${finishReason}`);
  assert(Person.safeParse(object).success, JSON.stringify(object));
  return JSON.stringify(object);
});

for (const method of ["jsonSchema", "functionCalling"]) {
  await check(`LangChain withStructuredOutput (${method})`, async () => {
    const llm = new ChatOpenAI({ model, apiKey: "unused", configuration: { baseURL: `${root}/v1` }, maxTokens: 1500, temperature: 1, maxRetries: 0 });
    const structured = llm.withStructuredOutput(Person, { name: "person", method, strict: true });
    const out = await structured.invoke("Describe a person.");
    assert(Person.safeParse(out).success, JSON.stringify(out));
    return JSON.stringify(out);
  });
}

// The Agents SDK's structured agent with a forced first tool call: its first request sends
// tool_choice "required" and response_format together; after the call it resets the choice to
// "auto", and the answer is then a tool call or the outputType's JSON.
await check("Agents SDK toolChoice required with an outputType", async () => {
  process.env.OPENAI_BASE_URL = `${root}/v1`;
  process.env.OPENAI_API_KEY = "unused";
  setTracingDisabled(true);  // no trace export (to api.openai.com)
  setOpenAIAPI("chat_completions");
  let calls = 0;
  const lookup = agentTool({
    name: "lookup", description: "Looks a word up.", parameters: z.object({ word: z.string().max(8) }),
    execute: async ({ word }) => { calls++; return `definition of ${word}`; },
  });
  const Answer = z.object({ word: z.string().max(8), score: z.number().int().min(0).max(10) });
  const agent = new Agent({
    name: "dictionary", instructions: "Look the word up, then answer.", model,
    tools: [lookup], outputType: Answer, modelSettings: { toolChoice: "required", temperature: 1, maxTokens: 300 },
  });
  const result = await run(agent, "Define 'sea'.", { maxTurns: 12 });
  assert(calls >= 1, "the forced first turn called the tool");
  assert(Answer.safeParse(result.finalOutput).success, JSON.stringify(result.finalOutput));
  return `${calls} tool call(s), then ${JSON.stringify(result.finalOutput)}`;
});

await check("tool_choice auto with a response_format: a tool call or the format", async () => {
  const schema = { type: "object", properties: { answer: { type: "integer", minimum: 0, maximum: 99 } }, required: ["answer"], additionalProperties: false };
  const validate = ajv.compile(schema);
  const seen = { tool_calls: 0, stop: 0 };
  for (let k = 0; k < 12; k++) {
    const r = await client.chat.completions.create({
      model, max_tokens: 300, temperature: 1, seed: 1000 + k, tools, tool_choice: "auto",
      messages: [{ role: "user", content: "Weather, or a number?" }],
      response_format: { type: "json_schema", json_schema: { name: "n", strict: true, schema } },
    });
    const c = r.choices[0];
    seen[c.finish_reason] = (seen[c.finish_reason] || 0) + 1;
    if (c.finish_reason === "tool_calls") {
      const call = c.message.tool_calls?.[0];
      const t = tools.find((x) => x.function.name === call?.function.name);
      assert(t && ajv.compile(t.function.parameters)(JSON.parse(call.function.arguments)), JSON.stringify(c.message));
    } else {
      assert(c.finish_reason === "stop", `finish_reason ${c.finish_reason}: ${c.message.content}`);
      assert(validate(JSON.parse(c.message.content)), c.message.content);
    }
  }
  assert(seen.tool_calls + seen.stop === 12, JSON.stringify(seen));
  return JSON.stringify(seen);
});

await check("an unsupported schema is a 400 naming the construct", async () => {
  try {
    await client.chat.completions.create({
      model, max_tokens: 5, messages: [{ role: "user", content: "x" }],
      response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { id: { type: "string", not: { const: "a" } } } } } },
    });
  } catch (e) {
    assert(e.status === 400, `status ${e.status}`);
    assert(/'not'/.test(e.message) && /properties\.id/.test(e.message), e.message);
    return e.message;
  }
  throw new Error("accepted");
});

if (failures) {
  console.log(`${failures} check(s) failed`);
  process.exit(1);
}
console.log("all structured output checks passed");
