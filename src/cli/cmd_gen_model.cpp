// `neuron gen-model`: writes a random-weight Qwen3 checkpoint of any shape in
// the real Hugging Face layout, for tests and benchmarks that need shapes the
// bundled fixtures lack (untied, sharded, head_dim != hidden / heads, ...).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cli/command.hpp"
#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "util/error.hpp"

namespace neuron::cli {
namespace {

namespace fs = std::filesystem;

struct GenModelArgs {
  std::string out;
  std::string preset;
  std::optional<std::int64_t> hidden, intermediate, layers, heads, kv_heads, head_dim;
  std::int64_t vocab = 151936;  // Qwen3's vocabulary, so the real tokenizer works on the result
  std::int64_t max_positions = 40960;
  double rope_theta = 1e6;
  bool untied = false;
  int shards = 1;
  std::uint64_t seed = 0;
  std::string dtype = "bf16";
  std::string tokenizer_from;
};

model::ModelConfig build_config(const GenModelArgs& a) {
  model::ModelConfig c;
  if (!a.preset.empty()) {
    c = model::preset_config(a.preset);
  } else {
    std::string missing;
    const std::pair<const char*, const std::optional<std::int64_t>*> required[] = {
        {"--hidden", &a.hidden}, {"--intermediate", &a.intermediate}, {"--layers", &a.layers},
        {"--heads", &a.heads},   {"--kv-heads", &a.kv_heads}};
    for (const auto& [flag, v] : required)
      if (!v->has_value()) missing += std::string(missing.empty() ? "" : ", ") + flag;
    if (!missing.empty()) fail(errc::invalid_argument, "gen-model needs " + missing + " (or --preset)");
    c.vocab_size = a.vocab;
    c.max_position_embeddings = a.max_positions;
    c.rope.theta = a.rope_theta;
    c.rms_norm_eps = 1e-6;
    c.bos_token_id = 151643;
    c.eos_token_ids = {151645, 151643};
  }
  if (a.hidden) c.hidden_size = *a.hidden;
  if (a.intermediate) c.intermediate_size = *a.intermediate;
  if (a.layers) c.num_hidden_layers = *a.layers;
  if (a.heads) c.num_attention_heads = *a.heads;
  if (a.kv_heads) c.num_key_value_heads = *a.kv_heads;
  if (a.head_dim)
    c.head_dim = *a.head_dim;
  else if (a.preset.empty() && c.num_attention_heads > 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail(errc::invalid_argument, "--hidden " + std::to_string(c.hidden_size) + " is not divisible by --heads " +
                                       std::to_string(c.num_attention_heads) + "; give --head-dim");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (a.untied) c.tie_word_embeddings = false;
  else if (a.preset.empty()) c.tie_word_embeddings = true;
  return c;
}

void copy_tokenizer(const fs::path& from, const fs::path& to) {
  if (!fs::is_regular_file(from / "tokenizer.json")) fail(errc::not_found, "no tokenizer.json in " + from.string());
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"}) {
    if (!fs::is_regular_file(from / name)) continue;
    std::error_code ec;
    fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing, ec);
    if (ec) fail(errc::io, "cannot copy " + (from / name).string() + ": " + ec.message());
    // Copies keep the source's mode; a read-only source would make the next overwrite fail.
    fs::permissions(to / name, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add, ec);
  }
}

Run setup_gen_model(CLI::App& sub) {
  auto a = std::make_shared<GenModelArgs>();
  sub.add_option("--out", a->out, "Directory to write the checkpoint into")->required();
  sub.add_option("--preset", a->preset, "Start from a real shape: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b");
  sub.add_option("--hidden", a->hidden, "hidden_size");
  sub.add_option("--intermediate", a->intermediate, "intermediate_size");
  sub.add_option("--layers", a->layers, "num_hidden_layers");
  sub.add_option("--heads", a->heads, "num_attention_heads");
  sub.add_option("--kv-heads", a->kv_heads, "num_key_value_heads");
  sub.add_option("--head-dim", a->head_dim, "head_dim (default hidden / heads)");
  sub.add_option("--vocab", a->vocab, "vocab_size")->capture_default_str();
  sub.add_option("--max-positions", a->max_positions, "max_position_embeddings")->capture_default_str();
  sub.add_option("--rope-theta", a->rope_theta, "rope_theta")->capture_default_str();
  sub.add_flag("--untied", a->untied, "Write a separate lm_head instead of tying it to the embeddings");
  sub.add_option("--shards", a->shards, "Number of safetensors files (>1 writes model.safetensors.index.json)")->capture_default_str();
  sub.add_option("--seed", a->seed, "Random seed; the same seed gives the same weights")->capture_default_str();
  sub.add_option("--dtype", a->dtype, "Weight dtype")->check(CLI::IsMember({"bf16", "f16", "f32"}))->capture_default_str();
  sub.add_option("--copy-tokenizer-from", a->tokenizer_from, "Copy tokenizer.json / tokenizer_config.json from this model directory");
  return [a]() {
    model::ModelConfig cfg = build_config(*a);
    model::RandomCheckpointOptions opts;
    opts.seed = a->seed;
    opts.shards = a->shards;
    opts.dtype = a->dtype == "f32" ? DType::f32 : a->dtype == "f16" ? DType::f16 : DType::bf16;
    const fs::path out = a->out;
    auto files = model::write_random_checkpoint(out, cfg, opts);
    if (!a->tokenizer_from.empty()) copy_tokenizer(a->tokenizer_from, out);
    std::uint64_t params = 0;
    for (const auto& s : model::checkpoint_tensor_specs(cfg, opts.dtype)) params += s.numel();
    std::printf("wrote %s: %zu safetensors file(s), %llu parameters, hidden %lld, layers %lld, heads %lld/%lld, head_dim %lld%s\n",
                out.string().c_str(), files.size(), static_cast<unsigned long long>(params),
                static_cast<long long>(cfg.hidden_size), static_cast<long long>(cfg.num_hidden_layers),
                static_cast<long long>(cfg.num_attention_heads), static_cast<long long>(cfg.num_key_value_heads),
                static_cast<long long>(cfg.head_dim), cfg.tie_word_embeddings ? ", tied" : ", untied");
    return 0;
  };
}

// Registered by hand: NEURON_COMMAND would spell the name with an underscore.
const bool gen_model_registered = register_command({"gen-model", "Write a random-weight Qwen3 checkpoint", setup_gen_model});

}  // namespace

}  // namespace neuron::cli
