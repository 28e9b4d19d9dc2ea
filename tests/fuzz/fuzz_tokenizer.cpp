// libFuzzer target: arbitrary bytes through the real Qwen3 tokenizer.
// encode must never crash, hang or throw (invalid UTF-8 included), every id it
// returns must decode, and for valid UTF-8 input decode(encode(s)) must be
// NFC(s). The streaming decoder must agree with decode. Input that looks
// like a JSON object is also tried as a tokenizer.json (bounded parse, then
// validation): it must load or end in neuron::Error.
//   NEURON_TOKENIZER_JSON overrides the bundled models/qwen3-tiny-a/tokenizer.json.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "tokenizer/normalizer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"
#include "util/error.hpp"

namespace {

const neuron::tokenizer::Tokenizer& tokenizer() {
  static const neuron::tokenizer::Tokenizer tok = [] {
    const char* env = std::getenv("NEURON_TOKENIZER_JSON");
    return neuron::tokenizer::Tokenizer::from_file(env ? std::string(env)
                                                       : std::string(NEURON_REPO_ROOT) + "/models/qwen3-tiny-a/tokenizer.json");
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace neuron::tokenizer;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (size > 0 && data[0] == '{') {
    try {
      (void)Tokenizer::from_json(text);
    } catch (const neuron::Error&) {
    }
  }
  const Tokenizer& tok = tokenizer();
  const auto ids = tok.encode(text);
  const std::string decoded = tok.decode(ids);
  if (!is_valid_utf8(decoded)) __builtin_trap();
  if (is_valid_utf8(text) && decoded != normalize_form(text, NormalForm::nfc)) __builtin_trap();

  StreamDecoder stream(tok, /*skip_special_tokens=*/size % 2 == 0);
  std::string streamed;
  for (std::int32_t id : ids) {
    const std::string chunk = stream.push(id);
    if (!is_valid_utf8(chunk)) __builtin_trap();
    streamed += chunk;
  }
  streamed += stream.finish();
  if (streamed != tok.decode(ids, size % 2 == 0)) __builtin_trap();
  return 0;
}
