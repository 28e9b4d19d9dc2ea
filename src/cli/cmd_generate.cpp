// `neuron generate`: one request through the library, no HTTP.
//   neuron generate --model M --prompt-ids 1,2,3 --max-tokens N --temperature T
//                   [--top-p P] [--top-k K] [--min-p P] [--seed S] [--ignore-eos]
//                   [--json] [--device cpu|cuda:N] [--max-context N]
//                   [--tensor-parallel N [--devices 0,1,...] [--step-timeout-ms MS]]
//                   [--json-schema FILE | --json-object] [--repeat N]
// Prints the generated ids (space separated), or with --json one object on the
// last line: {"prompt_tokens", "tokens", "finish_reason", "timings"}.
// Sampling flags left out fall back to the model's generation_config.json.
// --json-schema / --json-object constrain the output (grammar/); --repeat runs
// the request N times in one process (the grammar's mask cache stays warm
// after the first) and reports the decode speed over all runs: the command
// behind bench/GRAMMAR.md.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/device.hpp"
#include "cli/command.hpp"
#include "engine/generator.hpp"
#include "engine/model_assets.hpp"
#include "grammar/cache.hpp"
#include "util/json_parse.hpp"
#include "engine/model_loader.hpp"
#include "io/model_resolver.hpp"
#include "model/config.hpp"
#include "util/error.hpp"

namespace neuron::cli {
namespace {

struct GenerateArgs {
  std::string quant;  // --quant
  std::string model;
  std::string prompt_ids;
  std::int32_t max_tokens = 16;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::optional<std::uint64_t> seed;
  bool ignore_eos = false;
  bool json = false;
  std::string device = "cpu";
  std::int32_t max_context = 0;
  int tensor_parallel = 1;
  bool expert_parallel = false;
  std::string devices;  // CUDA ordinals per rank, comma separated
  long long step_timeout_ms = 30000;
  std::string json_schema;  // a file holding a JSON Schema
  bool json_object = false;
  int repeat = 1;
};

// "1, 2,3" -> {1, 2, 3}; anything else is refused with the offending piece named.
std::vector<std::int32_t> parse_ids(const std::string& text) {
  std::vector<std::int32_t> ids;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    std::string piece = text.substr(at, comma - at);
    const auto first = piece.find_first_not_of(" \t"), last = piece.find_last_not_of(" \t");
    piece = first == std::string::npos ? "" : piece.substr(first, last - first + 1);
    std::int32_t id = -1;
    const auto [end, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), id);
    if (piece.empty() || ec != std::errc{} || end != piece.data() + piece.size() || id < 0)
      fail(errc::invalid_argument, "--prompt-ids: '" + piece + "' is not a token id (expected e.g. 1,2,3)");
    ids.push_back(id);
    at = comma + 1;
  }
  return ids;
}

model::SamplingParams sampling_params(const GenerateArgs& a, const model::GenerationDefaults& d) {
  model::SamplingParams p;
  if (auto v = a.temperature.has_value() ? a.temperature : d.temperature) p.temperature = *v;
  if (auto v = a.top_p.has_value() ? a.top_p : d.top_p) p.top_p = *v;
  if (auto v = a.min_p.has_value() ? a.min_p : d.min_p) p.min_p = *v;
  if (auto v = a.repetition_penalty.has_value() ? a.repetition_penalty : d.repetition_penalty)
    p.repetition_penalty = *v;
  if (auto v = a.top_k.has_value() ? a.top_k : d.top_k) p.top_k = *v;
  p.seed = a.seed;
  p.validate();
  return p;
}

int run_generate(const GenerateArgs& a) {
  engine::LoadOptions load;
  io::ResolveOptions resolve;
  resolve.gguf_quant = a.quant;
  load.model_dir = io::resolve_model(a.model, resolve);
  load.quantize = engine::quantize_for(load.model_dir, a.quant, io::canonical_model_ref(a.model) == load.model_dir.string());
  load.device = backend::Device::parse(a.device);
  load.max_context = a.max_context;
  load.tensor_parallel = a.tensor_parallel;
  load.expert_parallel = a.expert_parallel;
  load.step_timeout = std::chrono::milliseconds(a.step_timeout_ms);
  if (!a.devices.empty())
    for (std::int32_t d : parse_ids(a.devices)) load.devices.push_back(d);
  const model::ModelConfigs configs = model::load_model_configs(load.model_dir);

  engine::GenerateRequest req;
  req.prompt = parse_ids(a.prompt_ids);
  req.max_tokens = a.max_tokens;
  req.sampling = sampling_params(a, configs.generation);
  req.stop_ids = configs.stop_ids();
  req.ignore_eos = a.ignore_eos;

  if (!a.json_schema.empty() || a.json_object) {
    const engine::ModelAssets assets = engine::load_model_assets(load.model_dir);
    grammar::Constraint c = grammar::Constraint::json_object();
    if (!a.json_schema.empty()) {
      std::ifstream in(a.json_schema);
      if (!in) fail(errc::not_found, "--json-schema: cannot read " + a.json_schema);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      c = grammar::Constraint::json_schema(parse_json<nlohmann::ordered_json>(text, "--json-schema " + a.json_schema));
    }
    req.grammar = assets.grammars->get(c);
  }

  const auto load_start = std::chrono::steady_clock::now();
  const auto runner = engine::open_runner(load);
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - load_start).count();
  engine::GenerateResult r;
  double decode_ms = 0;
  std::int64_t decode_steps = 0;
  for (int i = 0; i < a.repeat; ++i) {
    if (req.sampling.seed) req.sampling.seed = *req.sampling.seed + (i == 0 ? 0 : 1);
    r = engine::generate(*runner, req);
    decode_ms += r.timings.decode_ms;
    decode_steps += std::max<std::int64_t>(0, static_cast<std::int64_t>(r.tokens.size()) - 1);
  }
  if (a.repeat > 1) {
    r.timings.decode_ms = decode_ms;
    r.timings.decode_tok_s = decode_ms > 0 ? static_cast<double>(decode_steps) * 1000.0 / decode_ms : 0.0;
  }

  if (a.json) {
    const nlohmann::json out = {
        {"prompt_tokens", req.prompt},
        {"tokens", r.tokens},
        {"finish_reason", r.finish_reason},
        {"timings",
         {{"load_ms", load_ms},
          {"prefill_ms", r.timings.prefill_ms},
          {"prefill_tok_s", r.timings.prefill_tok_s},
          {"decode_ms", r.timings.decode_ms},
          {"decode_tok_s", r.timings.decode_tok_s}}},
    };
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::string ids;
    for (std::int32_t t : r.tokens) ids += (ids.empty() ? "" : " ") + std::to_string(t);
    std::printf("%s\n", ids.c_str());
    std::fprintf(stderr, "%zu tokens (%s); load %.0f ms, prefill %.1f ms (%.1f tok/s), decode %.2f tok/s\n",
                 r.tokens.size(), r.finish_reason.c_str(), load_ms, r.timings.prefill_ms, r.timings.prefill_tok_s, r.timings.decode_tok_s);
  }
  return 0;
}

Run setup_generate(CLI::App& sub) {
  auto a = std::make_shared<GenerateArgs>();
  sub.add_option("--model", a->model, "Model directory, .gguf file or Hugging Face id in the local cache")->required();
  sub.add_option("--quant", a->quant,
                 "q8_0, q4_k, q6_k or fp8 (CUDA): quantize a safetensors model at load; in a GGUF repo, the file's tag (Q4_K_M)");
  sub.add_option("--prompt-ids", a->prompt_ids, "Prompt token ids, comma separated")->required();
  sub.add_option("--max-tokens", a->max_tokens, "Most tokens to generate")->check(CLI::PositiveNumber);
  sub.add_option("--temperature", a->temperature, "0 = greedy (default: generation_config.json, else 1)");
  sub.add_option("--top-p", a->top_p, "Nucleus sampling mass in (0, 1]");
  sub.add_option("--top-k", a->top_k, "Keep the K most likely tokens (0 = all)");
  sub.add_option("--min-p", a->min_p, "Drop tokens below min_p times the top probability");
  sub.add_option("--repetition-penalty", a->repetition_penalty, "Penalise tokens already seen (> 0, 1 = off)");
  sub.add_option("--seed", a->seed, "Seed for reproducible sampling");
  sub.add_flag("--ignore-eos", a->ignore_eos, "Keep generating through end-of-sequence tokens");
  sub.add_flag("--json", a->json, "Print one JSON object on the last line");
  sub.add_option("--json-schema", a->json_schema, "Constrain the output to this JSON Schema (a file)");
  sub.add_flag("--json-object", a->json_object, "Constrain the output to a JSON object");
  sub.add_option("--repeat", a->repeat, "Run the request N times; timings cover all runs (last run's tokens shown)")
      ->check(CLI::PositiveNumber);
  sub.add_option("--device", a->device, "cpu, cuda or cuda:N");
  sub.add_option("--max-context", a->max_context, "KV cache positions (0 = the backend's default)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--tensor-parallel", a->tensor_parallel, "Ranks (processes) to split the model over")
      ->check(CLI::Range(1, engine::kMaxTensorParallel));
  sub.add_flag("--expert-parallel", a->expert_parallel,
               "MoE: deal whole experts over the ranks (num_experts / tensor-parallel each) instead of splitting every expert");
  sub.add_option("--devices", a->devices, "CUDA ordinals, one per rank or one shared (e.g. 0,1)");
  sub.add_option("--step-timeout-ms", a->step_timeout_ms, "TP: deadline for a worker's reply to a step")
      ->check(CLI::PositiveNumber);
  return [a] { return run_generate(*a); };
}

NEURON_COMMAND(generate, "Generate tokens from a prompt of token ids", setup_generate);

}  // namespace
}  // namespace neuron::cli
