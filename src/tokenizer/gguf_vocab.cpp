#include "tokenizer/gguf_vocab.hpp"

#include <limits>
#include <optional>
#include <string>

#include "tokenizer/utf8.hpp"
#include "util/error.hpp"

namespace neuron::tokenizer {

namespace {

enum TokenType : std::int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

[[noreturn]] void bad_vocab(const io::GgufMetadata& md, const std::string& msg) { fail(errc::bad_model, md.what + ": " + msg); }

// What tokenizer.json holds for a llama.cpp pre-tokenizer name (llama-vocab.cpp's LLAMA_VOCAB_PRE_TYPE_*).
struct PreTokenizerSpec {
  const char* regex;
  bool nfc;            // normalizer NFC (Qwen2) or none (Llama 3)
  bool ignore_merges;  // a word that is itself a vocab token is not merged (Llama 3's BPE)
  bool add_bos;        // without tokenizer.ggml.add_bos_token: llama.cpp's default for the type
};

std::optional<PreTokenizerSpec> pre_tokenizer_spec(const std::string& pre) {
  if (pre == "qwen2") return PreTokenizerSpec{kQwen2PreTokenizerRegex, true, false, false};
  // Qwen3.5 has no normalizer: decomposed marks stay as they are (llama.cpp's qwen35 vectors, from Hugging Face).
  if (pre == "qwen35") return PreTokenizerSpec{kQwen35PreTokenizerRegex, false, false, false};
  // llama.cpp writes "llama-bpe" for Llama 3.x (older converters: "llama3", "llama-v3").
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return PreTokenizerSpec{kLlama3PreTokenizerRegex, false, true, true};
  return std::nullopt;
}

}  // namespace

nlohmann::json gguf_tokenizer_document(const io::GgufMetadata& md) {
  using nlohmann::json;
  const auto model = md.string("tokenizer.ggml.model");
  if (!model) bad_vocab(md, "metadata 'tokenizer.ggml.model' is missing: the file carries no tokenizer");
  if (*model != "gpt2")
    fail(errc::unsupported_arch, md.what + ": tokenizer.ggml.model is '" + *model + "'; only byte-level BPE ('gpt2') is supported");
  const std::string pre = md.string("tokenizer.ggml.pre").value_or("default");
  const std::optional<PreTokenizerSpec> spec = pre_tokenizer_spec(pre);
  if (!spec)
    fail(errc::unsupported_arch,
         md.what + ": tokenizer.ggml.pre is '" + pre + "'; the supported pre-tokenizers are 'qwen2', 'qwen35' and 'llama-bpe'");

  const auto* tokens = md.strings("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) bad_vocab(md, "metadata 'tokenizer.ggml.tokens' is missing or empty");
  const auto* types = md.integers("tokenizer.ggml.token_type");
  if (types && types->size() != tokens->size())
    bad_vocab(md, "tokenizer.ggml.token_type has " + std::to_string(types->size()) + " entries for " +
                std::to_string(tokens->size()) + " tokens");
  if (tokens->size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    bad_vocab(md, "tokenizer.ggml.tokens has too many entries");

  json vocab = json::object();
  json added = json::array();
  for (std::size_t id = 0; id < tokens->size(); ++id) {
    const std::string& text = (*tokens)[id];
    // tokenizer.json is JSON text: its tokens are UTF-8 (byte-level BPE spells every byte as a character).
    if (!is_valid_utf8(text)) bad_vocab(md, "token " + std::to_string(id) + " is not valid UTF-8");
    const std::int64_t type = types ? (*types)[id] : kNormal;
    switch (type) {
      case kNormal:
      case kByte:
        if (vocab.contains(text)) bad_vocab(md, "token '" + text + "' appears twice in tokenizer.ggml.tokens");
        vocab[text] = id;
        break;
      case kUnknown:
      case kControl:
      case kUserDefined:
        added.push_back({{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                         {"normalized", false}, {"special", type != kUserDefined}});
        break;
      case kUnused:
        break;
      default:
        bad_vocab(md, "token " + std::to_string(id) + " has unknown type " + std::to_string(type));
    }
  }
  json merges = json::array();
  if (const auto* m = md.strings("tokenizer.ggml.merges"))
    for (std::size_t i = 0; i < m->size(); ++i) {
      if (!is_valid_utf8((*m)[i])) bad_vocab(md, "merge " + std::to_string(i) + " is not valid UTF-8");
      merges.push_back((*m)[i]);
    }

  json doc;
  doc["version"] = "1.0";
  doc["model"] = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}, {"dropout", nullptr},
                  {"unk_token", nullptr}, {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""},
                  {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", spec->ignore_merges}};
  doc["added_tokens"] = std::move(added);
  doc["normalizer"] = spec->nfc ? json{{"type", "NFC"}} : json(nullptr);
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  doc["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"},
                             {"pattern", {{"Regex", spec->regex}}},
                             {"behavior", "Isolated"},
                             {"invert", false}},
                            byte_level}}};
  doc["decoder"] = byte_level;

  // What encode_with_special_tokens adds: BOS first when the file (or the type's default) says so, EOS last likewise.
  json single = json::array();
  json specials = json::object();
  auto special = [&](const char* id_key, const char* add_key, bool add_default, bool before) {
    if (!md.boolean(add_key).value_or(add_default)) return;
    const auto id = md.integer(id_key);
    if (!id || *id < 0 || static_cast<std::size_t>(*id) >= tokens->size())
      bad_vocab(md, std::string(add_key) + " is set but " + id_key + " is missing or out of range");
    const std::string& text = (*tokens)[static_cast<std::size_t>(*id)];
    const json piece = {{"SpecialToken", {{"id", text}, {"type_id", 0}}}};
    if (before) single.insert(single.begin(), piece);
    else single.push_back(piece);
    specials[text] = {{"id", text}, {"ids", {*id}}, {"tokens", {text}}};
  };
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  special("tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token", spec->add_bos, true);
  special("tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_eos_token", false, false);
  doc["post_processor"] = specials.empty()
                              ? json(nullptr)
                              : json{{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
  return doc;
}

Tokenizer tokenizer_from_gguf(const io::GgufMetadata& metadata) {
  const std::string doc = gguf_tokenizer_document(metadata).dump();
  try {
    return Tokenizer::from_json(doc);
  } catch (const Error& e) {
    if (e.kind() != errc::bad_model) throw;
    fail(errc::bad_model, metadata.what + " (GGUF tokenizer): " + e.what());
  }
}

}  // namespace neuron::tokenizer
