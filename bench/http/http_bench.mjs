// HTTP overhead and concurrent throughput of a running neuron daemon.
//
//   node bench/http/http_bench.mjs [--base-url URL] [--model ID] [--clients 1,4,16,32]
//                                  [--requests 8] [--max-tokens 32] [--overhead-requests 50]
//
// 1. Overhead: GET /health round trips (the HTTP floor), then max_tokens=1
//    completions; their mean round trip is compared with the engine's own mean
//    time to first token over the same requests (from /metrics), so the
//    difference is what HTTP, JSON, tokenization and admission add.
// 2. Throughput: N clients, each sending --requests completions one after
//    another (max_tokens fixed, ignore_eos so every request generates the same
//    count), reporting requests/s, generated tokens/s and latency percentiles.
// Uses only Node's built-in fetch (Node 18+); no npm install needed.

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const base = (args["base-url"] || "http://127.0.0.1:13131").replace(/\/$/, "");
const clients = (args.clients || "1,4,16,32").split(",").map(Number);
const perClient = Number(args.requests || 8);
const maxTokens = Number(args["max-tokens"] || 32);
const overheadRequests = Number(args["overhead-requests"] || 50);

async function json(path, body) {
  const r = await fetch(base + path, body ? { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) } : {});
  const text = await r.text();
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status} ${text}`);
  return JSON.parse(text);
}

async function metric(name) {
  const text = await (await fetch(base + "/metrics")).text();
  let total = 0;
  for (const line of text.split("\n")) if (line.startsWith(name + " ") || line.startsWith(name + "{")) total += Number(line.split(" ").pop());
  return total;
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const fmt = (x) => x.toFixed(2);

const model = args.model || (await json("/v1/models")).data[0].id;
const prompt = "The history of the city begins";
console.log(`# neuron HTTP bench: ${base}, model ${model}`);

// --- 1. overhead ---
const health = [];
for (let i = 0; i < overheadRequests; i++) {
  const t = performance.now();
  await json("/health");
  health.push(performance.now() - t);
}
await json("/v1/completions", { model, prompt, max_tokens: 1, temperature: 0 });  // warm-up
const ttftSum0 = await metric("neuron_time_to_first_token_seconds_sum");
const ttftCount0 = await metric("neuron_time_to_first_token_seconds_count");
const one = [];
for (let i = 0; i < overheadRequests; i++) {
  const t = performance.now();
  await json("/v1/completions", { model, prompt, max_tokens: 1, temperature: 0 });
  one.push(performance.now() - t);
}
const engineMs = ((await metric("neuron_time_to_first_token_seconds_sum")) - ttftSum0) * 1000 /
  ((await metric("neuron_time_to_first_token_seconds_count")) - ttftCount0);
const meanOne = one.reduce((a, b) => a + b, 0) / one.length;
console.log(`\n## overhead (${overheadRequests} sequential requests each)`);
console.log(`| measure | p50 ms | p90 ms | mean ms |`);
console.log(`| --- | --- | --- | --- |`);
console.log(`| GET /health round trip | ${fmt(pct(health, 50))} | ${fmt(pct(health, 90))} | ${fmt(health.reduce((a, b) => a + b, 0) / health.length)} |`);
console.log(`| POST /v1/completions max_tokens=1 round trip | ${fmt(pct(one, 50))} | ${fmt(pct(one, 90))} | ${fmt(meanOne)} |`);
console.log(`| engine time to first token (from /metrics) | | | ${fmt(engineMs)} |`);
console.log(`| HTTP + JSON + tokenize + admission (difference) | | | ${fmt(meanOne - engineMs)} |`);

// --- 2. throughput ---
console.log(`\n## throughput: max_tokens=${maxTokens} (ignore_eos), ${perClient} requests per client`);
console.log(`| clients | requests | wall s | requests/s | generated tokens/s | latency p50 ms | latency p90 ms | errors |`);
console.log(`| --- | --- | --- | --- | --- | --- | --- | --- |`);
for (const n of clients) {
  const latencies = [];
  let tokens = 0, errors = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: n }, async () => {
    for (let i = 0; i < perClient; i++) {
      const t = performance.now();
      try {
        const r = await json("/v1/completions", { model, prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true });
        tokens += r.usage.completion_tokens;
        latencies.push(performance.now() - t);
      } catch (e) {
        errors++;
      }
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  console.log(`| ${n} | ${n * perClient} | ${fmt(wall)} | ${fmt(latencies.length / wall)} | ${fmt(tokens / wall)} | ${fmt(pct(latencies, 50))} | ${fmt(pct(latencies, 90))} | ${errors} |`);
}
