#include "model/arch/family.hpp"

#include <array>

#include "model/arch/decoder.hpp"
#include "model/arch/hybrid.hpp"
#include "util/error.hpp"

namespace neuron::model {

namespace {

std::array<const Family*, 6> families() noexcept {
  return {&qwen3_family(),      &llama_family(),   &qwen3_moe_family(),
          &qwen3_next_family(), &qwen3_5_family(), &qwen3_5_moe_family()};
}

}  // namespace

const Family* find_family(std::string_view model_type) noexcept {
  for (const Family* f : families())
    if (f->model_type() == model_type) return f;
  return nullptr;
}

const Family* find_gguf_family(std::string_view gguf_architecture) noexcept {
  for (const Family* f : families())
    if (f->gguf_architecture() == gguf_architecture) return f;
  return nullptr;
}

const Family& family_of(const ModelConfig& cfg) {
  if (const Family* f = find_family(cfg.model_type)) return *f;
  fail(errc::unsupported_arch,
       "model_type '" + cfg.model_type + "' is not supported (supported: " + supported_model_types_text() + ")");
}

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const Family* f : families()) out.emplace_back(f->model_type());
  return out;
}

std::string supported_model_types_text() {
  std::string s;
  for (const Family* f : families()) s += (s.empty() ? "" : ", ") + std::string(f->model_type());
  return s;
}

}  // namespace neuron::model
