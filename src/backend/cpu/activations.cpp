#include "backend/cpu/activations.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "io/gguf.hpp"
#include "io/safetensors.hpp"

namespace neuron::backend::cpu {

namespace {

std::atomic<int> g_activations{-1};  // an Activations, or -1 before the first read
thread_local int t_scoped = -1;      // the innermost ActivationsScope's level on this thread, or -1

Activations from_environment() {
  const char* v = std::getenv("NEURON_CPU_ACTIVATIONS");
  if (v == nullptr || *v == '\0') return Activations::automatic;
  const std::optional<Activations> a = parse_activations(v);
  if (!a) {
    spdlog::warn("NEURON_CPU_ACTIVATIONS={} is not f32, bf16, int8 or auto; keeping f32", v);
    return Activations::f32;
  }
  if (*a != Activations::f32 && *a != Activations::automatic)
    spdlog::info("cpu: NEURON_CPU_ACTIVATIONS={}: products may round the activations to {}", v, v);
  return *a;
}

}  // namespace

std::string_view activations_name(Activations a) noexcept {
  switch (a) {
    case Activations::f32: return "f32";
    case Activations::bf16: return "bf16";
    case Activations::int8: return "int8";
    case Activations::automatic: return "auto";
  }
  return "f32";
}

std::optional<Activations> parse_activations(std::string_view name) noexcept {
  for (Activations a : {Activations::f32, Activations::bf16, Activations::int8, Activations::automatic})
    if (activations_name(a) == name) return a;
  return std::nullopt;
}

Activations cpu_activations() {
  if (t_scoped >= 0) return static_cast<Activations>(t_scoped);
  int v = g_activations.load(std::memory_order_relaxed);
  if (v < 0) {
    int unset = -1;
    g_activations.compare_exchange_strong(unset, static_cast<int>(from_environment()));
    v = g_activations.load(std::memory_order_relaxed);
  }
  return static_cast<Activations>(v);
}

void set_cpu_activations(Activations a) noexcept { g_activations.store(static_cast<int>(a), std::memory_order_relaxed); }

Activations model_activations(Activations process, bool encode_only, bool quantized_weights) noexcept {
  return process == Activations::automatic && (encode_only || quantized_weights) ? Activations::int8 : process;
}

namespace {
bool any_quantized(const io::GgufFile& file) {
  return std::ranges::any_of(file.tensors(), [](const io::GgufTensor& t) { return t.view().quantized(); });
}
}  // namespace

bool quantized_weights(const std::filesystem::path& model, bool quantize_at_load) {
  if (quantize_at_load) return true;
  return io::is_gguf_path(model) && any_quantized(io::GgufFile(model));
}

bool quantized_weights(const io::Checkpoint* checkpoint, bool quantize_at_load) {
  if (quantize_at_load) return true;
  return checkpoint && checkpoint->gguf() && any_quantized(*checkpoint->gguf());
}

ActivationsScope::ActivationsScope(Activations a) noexcept : previous_(t_scoped) { t_scoped = static_cast<int>(a); }

ActivationsScope::~ActivationsScope() { t_scoped = previous_; }

bool int8_quant_products(Activations a) noexcept { return a == Activations::int8 || a == Activations::automatic; }

bool bf16_float_products(Activations a) noexcept { return a == Activations::bf16 || a == Activations::int8; }

}  // namespace neuron::backend::cpu
