// libFuzzer target: arbitrary bytes as a GGUF file. Either parse_gguf refuses
// it with neuron::Error, or every tensor it describes can be read in full,
// sliced and dequantized without leaving the buffer (ASan checks that), and
// the metadata getters, config mapping, the hybrids' storage undo
// (io/gguf_hybrid.hpp) and tokenizer builder only ever throw neuron::Error.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "io/gguf.hpp"
#include "io/gguf_hybrid.hpp"
#include "io/gguf_names.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> file(size);  // a private copy so ASan sees the exact bounds
  for (std::size_t i = 0; i < size; ++i) file[i] = static_cast<std::byte>(data[i]);
  neuron::io::GgufContents c;
  try {
    c = neuron::io::parse_gguf(std::span<const std::byte>(file), "fuzz");
  } catch (const neuron::Error&) {
    return 0;
  }
  volatile float sink = 0;
  for (const auto& t : c.tensors) {
    try {
      const auto view = t.view();
      if (view.numel() > (1 << 20)) continue;  // a valid but large tensor: reading it proves nothing more
      for (float v : view.to_f32()) sink = sink + v;
      if (view.rank() == 2 && view.dim(0) > 0 && view.dim(1) > 0) {
        for (float v : view.rows(view.dim(0) / 2, view.dim(0)).to_f32()) sink = sink + v;
        for (std::uint16_t v : view.cols(0, view.dim(1)).to_bf16()) sink = sink + static_cast<float>(v);
      }
    } catch (const neuron::Error&) {
    }
  }
  try {  // the hybrids' storage undone over the tensors under their Hugging Face names, as io::Checkpoint does
    const std::string arch = c.metadata.string("general.architecture").value_or("");
    std::map<std::string, neuron::io::TensorView> views;
    std::map<std::string, std::string> names;
    for (const auto& t : c.tensors) {
      const std::string name = neuron::io::hf_name_for_gguf(t.name).value_or(t.name);
      if (views.emplace(name, t.view()).second) names.emplace(name, t.name);
    }
    neuron::io::GgufOwned owned;
    neuron::io::undo_hybrid_storage(c.metadata, arch, views, names, owned, "fuzz");
    for (const auto& [name, view] : views)
      if (view.numel() <= (1 << 20))
        for (float v : view.to_f32()) sink = sink + v;
  } catch (const neuron::Error&) {
  }
  try {
    (void)neuron::tokenizer::tokenizer_from_gguf(c.metadata);
  } catch (const neuron::Error&) {
  }
  return 0;
}
