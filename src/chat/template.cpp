#include "chat/template.hpp"

#include "chat/ast.hpp"
#include "chat/parser.hpp"
#include "chat/renderer.hpp"
#include "util/error.hpp"

namespace neuron::chat {

struct ChatTemplate::Program {
  ast::Body body;
};

ChatTemplate::ChatTemplate(std::string source, std::shared_ptr<const Program> program)
    : source_(std::move(source)), program_(std::move(program)) {}

ChatTemplate ChatTemplate::parse(std::string source) {
  auto program = std::make_shared<Program>();
  program->body = parse_template(source);
  return ChatTemplate(std::move(source), std::move(program));
}

namespace {

template <class Json>
std::string render_with(const ast::Body& body, const Json& context, const Limits& limits) {
  if (!context.is_object() && !context.is_null()) {
    throw Error(errc::invalid_argument, "template context must be a JSON object");
  }
  Dict globals;
  if (context.is_object()) {
    for (auto it = context.begin(); it != context.end(); ++it) globals.set(it.key(), Value::from_json(it.value()));
  }
  Renderer renderer(body, limits);
  return renderer.render(globals);
}

}  // namespace

std::string ChatTemplate::render(const nlohmann::json& context, const Limits& limits) const {
  return render_with(program_->body, context, limits);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const Limits& limits) const {
  return render_with(program_->body, context, limits);
}

}  // namespace neuron::chat
