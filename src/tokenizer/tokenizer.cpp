#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <deque>

#include <nlohmann/json.hpp>

#include "tokenizer/added_vocabulary.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/normalizer.hpp"
#include "tokenizer/post_processor.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/utf8.hpp"
#include "util/error.hpp"
#include "util/json_parse.hpp"
#include "util/mapped_file.hpp"

namespace neuron::tokenizer {

struct Tokenizer::Impl {
  Bpe bpe;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  AddedVocabulary added;
  PostProcessor post;
  // Indexed by id over [0, max id]; holes (ids neither in the vocab nor added) are unknown.
  std::vector<std::string_view> text;  // [n_ids] tokenizer.json spelling, viewing bpe's vocab or added's tokens
  std::vector<std::string> bytes;  // [n_ids] raw bytes the ByteLevel decoder yields
  std::vector<std::uint8_t> kind;  // [n_ids] kUnknown / kNormal / kSpecial
  std::size_t distinct = 0;

  static constexpr std::uint8_t kUnknown = 0, kNormal = 1, kSpecial = 2;

  void encode_plain(std::string_view text, std::vector<std::int32_t>& ids) const;
};

namespace {

// tokenizer.json nests about 6 levels (a normalizer Sequence of Sequences at most 8).
constexpr int kMaxTokenizerJsonDepth = 16;

[[noreturn]] void bad(const std::string& msg) { fail(errc::bad_model, "tokenizer.json: " + msg); }

const nlohmann::json& field_or_null(const nlohmann::json& root, const char* key) {
  static const nlohmann::json null_json;
  const auto it = root.find(key);
  return it == root.end() ? null_json : *it;
}

void check_decoder(const nlohmann::json& d) {
  if (d.is_object() && d.contains("type") && d["type"] == "ByteLevel") return;
  if (d.is_object() && d.contains("type") && d["type"] == "Sequence" && d.contains("decoders") &&
      d["decoders"].is_array() && d["decoders"].size() == 1) {
    check_decoder(d["decoders"][0]);
    return;
  }
  bad("decoder must be ByteLevel (neuron serves byte-level BPE tokenizers), got " +
      (d.is_null() ? std::string("null") : d.dump().substr(0, 80)));
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(tokenizer_json, ec))
    fail(errc::not_found, "tokenizer file not found: " + tokenizer_json.string());
  const MappedFile file(tokenizer_json);
  const auto b = file.bytes();
  try {
    return from_json(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
  } catch (const Error& e) {
    if (e.kind() != errc::bad_model) throw;
    fail(errc::bad_model, tokenizer_json.string() + ": " + e.what());
  }
}

Tokenizer Tokenizer::from_json(std::string_view json_text) {
  const nlohmann::json root = parse_json(json_text, "tokenizer.json", errc::bad_model, kMaxTokenizerJsonDepth);
  if (!root.is_object()) bad("top level must be an object");
  if (!root.contains("model")) bad("\"model\" is missing");

  auto impl = std::make_shared<Impl>();
  impl->bpe = Bpe::from_json(root["model"]);
  impl->normalizer = Normalizer::from_json(field_or_null(root, "normalizer"));
  impl->pre_tokenizer = PreTokenizer::from_json(field_or_null(root, "pre_tokenizer"));
  if (!impl->pre_tokenizer.has_byte_level())
    bad("pre_tokenizer has no ByteLevel step (neuron serves byte-level BPE tokenizers)");
  check_decoder(field_or_null(root, "decoder"));
  impl->added = AddedVocabulary::from_json(field_or_null(root, "added_tokens"), impl->normalizer, impl->bpe);
  impl->post = PostProcessor::from_json(field_or_null(root, "post_processor"));

  std::int32_t max_id = impl->bpe.max_id();
  for (const auto& t : impl->added.tokens()) max_id = std::max(max_id, t.id);
  const auto n = static_cast<std::size_t>(max_id) + 1;
  impl->text.resize(n);
  impl->bytes.resize(n);
  impl->kind.assign(n, Impl::kUnknown);
  for (std::int32_t id = 0; id <= impl->bpe.max_id(); ++id) {
    if (const std::string* t = impl->bpe.id_to_token(id)) {
      impl->text[id] = *t;  // a view of the vocab key
      impl->kind[id] = Impl::kNormal;
    }
  }
  for (const auto& t : impl->added.tokens()) {
    impl->text[t.id] = t.content;
    impl->kind[t.id] = t.special ? Impl::kSpecial : Impl::kNormal;
  }
  for (std::size_t id = 0; id < n; ++id) {
    if (impl->kind[id] == Impl::kUnknown) continue;
    ++impl->distinct;
    // The ByteLevel decoder maps a token's characters back to bytes; a token
    // with any character outside the byte alphabet (an added token holding a
    // space or a newline, say) is emitted as its UTF-8 text instead, exactly
    // as Hugging Face's decoder falls back.
    auto raw = from_byte_level(impl->text[id]);
    impl->bytes[id] = raw ? std::move(*raw) : std::string(impl->text[id]);
  }
  for (const auto* list : {&impl->post.prefix, &impl->post.suffix})
    for (std::int32_t id : *list)
      if (static_cast<std::size_t>(id) >= n || impl->kind[id] == Impl::kUnknown)
        bad("post_processor adds token id " + std::to_string(id) + ", which is not in the vocabulary");
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_plain(std::string_view plain, std::vector<std::int32_t>& ids) const {
  std::string normalized;
  const std::string_view text = normalizer.normalize(plain, normalized) ? std::string_view(normalized) : plain;
  std::vector<Segment> segments;
  if (added.normalized_matcher().empty())
    segments.push_back({text, -1});
  else
    added.normalized_matcher().split(text, segments);
  std::deque<std::string> arena;
  const PreTokenizer::WordSink to_ids = [&](std::string_view word) { bpe.tokenize(word, ids); };
  for (const Segment& s : segments) {
    if (s.id >= 0)
      ids.push_back(s.id);
    else
      pre_tokenizer.split(s.text, to_ids, arena);
  }
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  std::vector<Segment> segments;
  impl_->added.raw_matcher().split(text, segments);
  for (const Segment& s : segments) {
    if (s.id >= 0)
      ids.push_back(s.id);
    else
      impl_->encode_plain(s.text, ids);
  }
  return ids;
}

std::vector<std::int32_t> Tokenizer::encode_with_special_tokens(std::string_view text) const {
  std::vector<std::int32_t> ids = impl_->post.prefix;
  const std::vector<std::int32_t> body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), impl_->post.suffix.begin(), impl_->post.suffix.end());
  return ids;
}

bool Tokenizer::is_known(std::int32_t id) const noexcept {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->kind.size() && impl_->kind[id] != Impl::kUnknown;
}

std::string_view Tokenizer::token_bytes(std::int32_t id) const {
  if (!is_known(id)) fail(errc::invalid_argument, "unknown token id " + std::to_string(id));
  return impl_->bytes[id];
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  std::string raw;
  for (std::int32_t id : ids) {
    const std::string_view b = token_bytes(id);
    if (skip_special_tokens && impl_->kind[id] == Impl::kSpecial) continue;
    raw.append(b);
  }
  if (is_valid_utf8(raw)) return raw;
  return utf8_lossy(raw);
}

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const auto& t : impl_->added.tokens())
    if (t.content == token) return t.id;
  return impl_->bpe.token_to_id(token);
}

std::string Tokenizer::id_to_token(std::int32_t id) const {
  if (!is_known(id)) fail(errc::invalid_argument, "unknown token id " + std::to_string(id));
  return std::string(impl_->text[id]);
}

std::size_t Tokenizer::vocab_size() const { return impl_->distinct; }

bool Tokenizer::is_special(std::int32_t id) const { return is_known(id) && impl_->kind[id] == Impl::kSpecial; }

}  // namespace neuron::tokenizer
