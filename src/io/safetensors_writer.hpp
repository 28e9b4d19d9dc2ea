#pragma once
// Writes safetensors files in the reference layout: u64 little-endian header
// length, the JSON header padded with spaces to a multiple of 8 bytes (so the
// data section, and every tensor in it, stays 8-byte aligned in an mmap),
// then the tensors' bytes back to back in the order they were declared.
//
// The header needs every tensor's size before any data, so the tensors are
// declared up front and their bytes streamed afterwards: a checkpoint larger
// than memory can be written one tensor (or one chunk) at a time.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tensor/dtype.hpp"

namespace neuron::io {

struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;

  std::uint64_t numel() const noexcept;
  std::uint64_t nbytes() const noexcept { return numel() * dtype_size(dtype); }
};

class SafetensorsWriter {
 public:
  // Validates the specs (unique non-empty names, non-negative dimensions) and
  // writes the header to `path`.tmp. Throws Error{invalid_argument|io}.
  SafetensorsWriter(std::filesystem::path path, std::vector<TensorSpec> specs,
                    const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
  // An unfinished file is removed: a crash mid-write never leaves a
  // truncated file under the real name.
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends raw bytes of the data section: the tensors' bytes in spec order,
  // in as many chunks as the caller likes. Throws invalid_argument past the end.
  void write(std::span<const std::byte> bytes);
  // Converts `values` to the dtype of the tensor being written and appends them.
  void write_values(std::span<const float> values);
  // Checks that every byte was written, then moves the file into place.
  void finish();

  const std::vector<TensorSpec>& specs() const noexcept { return specs_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path tmp_path_;
  std::vector<TensorSpec> specs_;
  std::vector<std::uint64_t> ends_;  // [specs] byte offset (in the data section) where each tensor ends
  std::ofstream out_;
  std::uint64_t written_ = 0;  // bytes of the data section written so far
  bool finished_ = false;
};

// Encodes f32 values as `dtype` (round-to-nearest-even for bf16/f16), little-endian.
std::vector<std::byte> encode_values(std::span<const float> values, DType dtype);

// A whole tensor in memory, for small files and tests.
struct HostTensor {
  TensorSpec spec;
  std::vector<std::byte> bytes;  // [nbytes] spec.dtype, row-major
};
void write_safetensors(const std::filesystem::path& path, const std::vector<HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace neuron::io
