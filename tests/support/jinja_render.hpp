#pragma once
// Renders a Jinja template over a JSON context, as the chat formatter does.
#include <string>

#include <nlohmann/json.hpp>

#include "chat/template.hpp"

namespace neuron::test_support {

inline std::string render(const std::string& source, const std::string& context = "{}") {
  return chat::ChatTemplate::parse(source).render(nlohmann::ordered_json::parse(context));
}

}  // namespace neuron::test_support
