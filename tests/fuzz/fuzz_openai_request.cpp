// libFuzzer target: arbitrary bytes as the body of the daemon's POST routes
// (chat, completions, responses, messages, /models/load) and as `neuron serve --model` text. Bad
// input must end in neuron::Error, whose error envelope must serialise;
// anything else escaping (a nlohmann type_error, say) is a validation hole.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/api_error.hpp"
#include "server/messages_api.hpp"
#include "server/model_spec.hpp"
#include "server/openai_request.hpp"
#include "server/responses_api.hpp"

namespace {

template <class Fn>
void expect_clean(Fn fn) {
  try {
    fn();
  } catch (const neuron::Error& e) {
    (void)neuron::server::dump(neuron::server::envelope(neuron::server::from_exception(e)));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  using namespace neuron::server;
  expect_clean([&] {
    const auto body = parse_body(text);  // ordered, as the daemon parses it
    expect_clean([&] { (void)parse_chat_request(body); });
    expect_clean([&] { (void)parse_completion_request(body); });
    expect_clean([&] { (void)parse_load_request(body); });
    expect_clean([&] { (void)conversation(parse_responses_request(body), nullptr); });
    expect_clean([&] { (void)parse_messages_request(body); });
    expect_clean([&] { (void)parse_messages_request(body, true); });
  });
  expect_clean([&] { (void)parse_model_spec_text(text); });
  return 0;
}
