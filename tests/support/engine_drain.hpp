#pragma once
// Reads a request's channel to its end the way a client of the engine does,
// and the bundled tiny model's tokenizer, for tests of the engine without a
// server.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/request.hpp"
#include "support/model_paths.hpp"
#include "tokenizer/tokenizer.hpp"

namespace neuron::test_support {

// What a request's channel carried: its deltas joined and as sent, then the done or error event.
struct Outcome {
  std::string text, reasoning;
  std::vector<std::int32_t> delta_tokens;
  std::vector<engine::Event> deltas;
  engine::Event last;  // done or error
};

// Throws when no event comes within `timeout`.
inline Outcome drain(engine::Channel& channel, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  Outcome out;
  for (;;) {
    std::optional<engine::Event> e = channel.next(timeout);
    if (!e) throw std::runtime_error("no event within the timeout");
    if (e->kind == engine::Event::Kind::delta) {
      EXPECT_FALSE(e->text.empty() && e->reasoning.empty()) << "deltas carry text or reasoning";
      out.text += e->text;
      out.reasoning += e->reasoning;
      out.delta_tokens.insert(out.delta_tokens.end(), e->tokens.begin(), e->tokens.end());
      out.deltas.push_back(*e);
      continue;
    }
    out.last = std::move(*e);
    return out;
  }
}

// models/qwen3-tiny-a's tokenizer, read once.
inline std::shared_ptr<const tokenizer::Tokenizer> tiny_tokenizer() {
  static const auto tok = std::make_shared<const tokenizer::Tokenizer>(
      tokenizer::Tokenizer::from_file(std::filesystem::path(tiny_model_dir()) / "tokenizer.json"));
  return tok;
}

}  // namespace neuron::test_support
