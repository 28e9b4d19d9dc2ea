// JSON Schemas of OpenAI's responses, written by hand from the official
// `openai` npm client's TypeScript types (node_modules/openai/resources/:
// chat/completions/completions.d.ts, completions.d.ts, models.d.ts, and the
// error envelope the client's APIError reads). No npm package ships OpenAI's
// OpenAPI document (npm view openai-openapi, @openai/openapi,
// openai-openapi-spec: 404), so these follow the client, which is what real
// callers parse with. Fields the types mark optional are optional here;
// extra fields (reasoning_content, ...) are allowed, as the types allow them.

const integer = { type: "integer", minimum: 0 };
const nullable = (schema) => ({ anyOf: [schema, { type: "null" }] });

const usage = {
  type: "object",
  required: ["completion_tokens", "prompt_tokens", "total_tokens"],
  properties: {
    completion_tokens: integer,
    prompt_tokens: integer,
    total_tokens: integer,
    completion_tokens_details: { type: "object" },
    prompt_tokens_details: {
      type: "object",
      properties: { audio_tokens: integer, cached_tokens: integer },
    },
  },
};

const topLogprob = {
  type: "object",
  required: ["token", "bytes", "logprob"],
  properties: {
    token: { type: "string" },
    bytes: nullable({ type: "array", items: { type: "integer", minimum: 0, maximum: 255 } }),
    logprob: { type: "number", maximum: 0 },
  },
};

const tokenLogprob = {
  type: "object",
  required: ["token", "bytes", "logprob", "top_logprobs"],
  properties: { ...topLogprob.properties, top_logprobs: { type: "array", items: topLogprob } },
};

const chatLogprobs = {
  type: "object",
  required: ["content", "refusal"],
  properties: {
    content: nullable({ type: "array", items: tokenLogprob }),
    refusal: nullable({ type: "array", items: tokenLogprob }),
  },
};

const toolCall = {
  type: "object",
  required: ["id", "function", "type"],
  properties: {
    id: { type: "string" },
    type: { const: "function" },
    function: {
      type: "object",
      required: ["arguments", "name"],
      properties: { arguments: { type: "string" }, name: { type: "string" } },
    },
  },
};

const chatFinish = { enum: ["stop", "length", "tool_calls", "content_filter", "function_call"] };

export const chatCompletion = {
  type: "object",
  required: ["id", "choices", "created", "model", "object"],
  properties: {
    id: { type: "string" },
    created: integer,
    model: { type: "string" },
    object: { const: "chat.completion" },
    system_fingerprint: { type: "string" },
    usage,
    choices: {
      type: "array",
      items: {
        type: "object",
        required: ["finish_reason", "index", "logprobs", "message"],
        properties: {
          finish_reason: chatFinish,
          index: integer,
          logprobs: nullable(chatLogprobs),
          message: {
            type: "object",
            required: ["content", "refusal", "role"],
            properties: {
              content: nullable({ type: "string" }),
              refusal: nullable({ type: "string" }),
              role: { const: "assistant" },
              tool_calls: { type: "array", items: toolCall },
            },
          },
        },
      },
    },
  },
};

export const chatCompletionChunk = {
  type: "object",
  required: ["id", "choices", "created", "model", "object"],
  properties: {
    id: { type: "string" },
    created: integer,
    model: { type: "string" },
    object: { const: "chat.completion.chunk" },
    system_fingerprint: { type: "string" },
    usage: nullable(usage),
    choices: {
      type: "array",
      items: {
        type: "object",
        required: ["delta", "finish_reason", "index"],
        properties: {
          finish_reason: nullable(chatFinish),
          index: integer,
          logprobs: nullable(chatLogprobs),
          delta: {
            type: "object",
            properties: {
              content: nullable({ type: "string" }),
              refusal: nullable({ type: "string" }),
              role: { enum: ["developer", "system", "user", "assistant", "tool"] },
              tool_calls: {
                type: "array",
                items: {
                  type: "object",
                  required: ["index"],
                  properties: {
                    index: integer,
                    id: { type: "string" },
                    type: { const: "function" },
                    function: {
                      type: "object",
                      properties: { arguments: { type: "string" }, name: { type: "string" } },
                    },
                  },
                },
              },
            },
          },
        },
      },
    },
  },
};

export const completion = {
  type: "object",
  required: ["id", "choices", "created", "model", "object"],
  properties: {
    id: { type: "string" },
    created: integer,
    model: { type: "string" },
    object: { const: "text_completion" },
    system_fingerprint: { type: "string" },
    usage,
    choices: {
      type: "array",
      items: {
        type: "object",
        required: ["finish_reason", "index", "logprobs", "text"],
        properties: {
          // Streamed chunks carry null until the choice's last one.
          finish_reason: nullable({ enum: ["stop", "length", "content_filter"] }),
          index: integer,
          text: { type: "string" },
          logprobs: nullable({
            type: "object",
            properties: {
              text_offset: { type: "array", items: integer },
              token_logprobs: { type: "array", items: { type: "number", maximum: 0 } },
              tokens: { type: "array", items: { type: "string" } },
              top_logprobs: { type: "array", items: { type: "object", additionalProperties: { type: "number", maximum: 0 } } },
            },
          }),
        },
      },
    },
  },
};

export const modelsList = {
  type: "object",
  required: ["object", "data"],
  properties: {
    object: { const: "list" },
    data: {
      type: "array",
      items: {
        type: "object",
        required: ["id", "created", "object", "owned_by"],
        properties: { id: { type: "string" }, created: integer, object: { const: "model" }, owned_by: { type: "string" } },
      },
    },
  },
};

export const errorEnvelope = {
  type: "object",
  required: ["error"],
  properties: {
    error: {
      type: "object",
      required: ["message", "type", "param", "code"],
      properties: {
        message: { type: "string" },
        type: { type: "string" },
        param: nullable({ type: "string" }),
        code: nullable({ type: "string" }),
      },
    },
  },
};
