#pragma once
// safetensors files and checkpoints made of them.
//
// Layout: u64 little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the data section. Nothing in the header is trusted: its length is
// bounded, every entry's dtype, shape and byte range are checked, and ranges
// must lie inside the data section without overlapping.
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/tensor_view.hpp"
#include "util/mapped_file.hpp"

namespace neuron::io {

class GgufFile;

inline constexpr std::uint64_t kMaxSafetensorsHeader = 100ull << 20;  // 100 MiB, as the reference reader

// Weights are mapped and an index is read whole, so only a regular file will
// do: a directory, a device (/dev/zero never ends) or a FIFO (whose open
// blocks) in a model folder is a broken checkpoint, refused before any open.
// Returns `path`; throws Error{not_found|io|bad_model}.
const std::filesystem::path& require_regular_file(const std::filesystem::path& path);

// Parses and validates a header over `file` bytes (the whole file). Throws
// Error{bad_model} naming the tensor and the problem. Exposed for fuzzing.
std::map<std::string, TensorView> parse_safetensors(std::span<const std::byte> file, const std::string& what);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);  // throws not_found / io / bad_model

  const std::map<std::string, TensorView>& tensors() const noexcept { return tensors_; }
  const TensorView* find(const std::string& name) const noexcept;
  const std::filesystem::path& path() const noexcept { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;  // views into file_
};

// All tensors of a model: one model.safetensors, the shards listed by
// model.safetensors.index.json, or one GGUF file (its tensors under the
// Hugging Face names and in their layout, io/gguf_names.hpp: stacked experts
// as one view each, LLaMA q/k rows un-permuted into copies; possibly
// block-quantized views).
// Tensor names must be unique across shards.
class Checkpoint {
 public:
  Checkpoint();
  ~Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;

  // A directory with model.safetensors or model.safetensors.index.json.
  static Checkpoint open_dir(const std::filesystem::path& dir);
  // An explicit file list (what the TP wire protocol carries): safetensors
  // shards, or exactly one .gguf file. A bare decoder's tensors (no `model.`
  // prefix: `embed_tokens.weight`, `layers.N...`, `norm.weight`, as
  // sentence-transformers saves Qwen3-Embedding) are found under the prefixed
  // names the families use.
  static Checkpoint open_files(const std::vector<std::filesystem::path>& files);

  // Throws Error{not_found} naming the tensor.
  const TensorView& tensor(const std::string& name) const;
  const TensorView* find(const std::string& name) const noexcept;
  std::vector<std::filesystem::path> files() const;
  std::size_t tensor_count() const noexcept { return index_.size(); }
  std::vector<std::string> names() const;
  // The GGUF file this checkpoint is, or nullptr for safetensors.
  const GgufFile* gguf() const noexcept { return gguf_.get(); }

 private:
  // A copy of a GGUF q/k weight ([heads * head_dim, cols]) with llama.cpp's rotary row permutation undone (io/gguf_names.hpp).
  TensorView unpermute_rope_rows(const TensorView& view, std::int64_t heads, const std::string& what);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unique_ptr<GgufFile> gguf_;
  std::map<std::string, TensorView> gguf_views_;     // HF name -> view into gguf_ or gguf_owned_
  std::vector<std::unique_ptr<std::byte[]>> gguf_owned_;  // [rows * row bytes] each: un-permuted q/k weights
  std::map<std::string, const TensorView*> index_;  // into files_ or gguf_views_
};

// Files a checkpoint directory is made of, in a stable order (for the wire
// protocol); a .gguf file is its own single file.
std::vector<std::filesystem::path> checkpoint_files(const std::filesystem::path& dir);

}  // namespace neuron::io
