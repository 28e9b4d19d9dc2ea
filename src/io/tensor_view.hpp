#pragma once
// A typed, possibly strided, window onto bytes held elsewhere (an mmap'd
// checkpoint). Slicing never copies: a TP rank takes rows(b, e) or cols(b, e)
// of a 2-D weight and converts only those elements.
//
// Elements are a plain DType (safetensors, GGUF's F32/F16/BF16) or a GGUF
// block-quantized type (Q8_0, Q4_K, ...: quant/ggml_type.hpp), whose rows are
// whole blocks: such a view converts by dequantizing, and its columns can be
// sliced only at block boundaries.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "quant/ggml_type.hpp"
#include "tensor/dtype.hpp"

namespace neuron::io {

class TensorView {
 public:
  TensorView() = default;
  // `data` holds the tensor row-major and contiguous; the caller has checked the byte range.
  TensorView(DType dtype, std::vector<std::int64_t> shape, const std::byte* data);
  // A GGUF tensor in PyTorch order; the last dimension is a multiple of the type's block size (checked by the caller).
  TensorView(quant::GgmlType type, std::vector<std::int64_t> shape, const std::byte* data);

  DType dtype() const noexcept { return dtype_; }  // meaningful when !quantized()
  bool quantized() const noexcept { return quantized_; }
  // The storage type in ggml's terms (F32/F16/BF16 for plain views).
  quant::GgmlType ggml_type() const noexcept;
  // Bytes between rows (2-D; a 1-D view is one row).
  std::int64_t row_stride() const noexcept { return row_stride_; }
  const std::vector<std::int64_t>& shape() const noexcept { return shape_; }
  std::int64_t dim(std::size_t i) const { return shape_.at(i); }
  std::size_t rank() const noexcept { return shape_.size(); }
  std::int64_t numel() const noexcept;
  std::string shape_string() const;  // "[64, 32]"

  // Rows [begin, end) / columns [begin, end) of a 2-D view (1-D views: rows() slices elements).
  // A quantized view's column bounds (and a 1-D one's element bounds) must
  // fall on block boundaries: Error{bad_tensor_parallel} otherwise.
  TensorView rows(std::int64_t begin, std::int64_t end) const;
  TensorView cols(std::int64_t begin, std::int64_t end) const;

  // Converts the viewed elements, row-major, into `out` (out.size() == numel()).
  void to_f32(std::span<float> out) const;
  void to_bf16(std::span<std::uint16_t> out) const;
  std::vector<float> to_f32() const;
  std::vector<std::uint16_t> to_bf16() const;

  // Raw row pointer (2-D) for zero-copy consumers of contiguous views.
  const std::byte* row_data(std::int64_t r) const noexcept { return data_ + r * row_stride_; }
  const std::byte* data() const noexcept { return data_; }
  bool contiguous() const noexcept;

 private:
  DType dtype_ = DType::f32;
  bool quantized_ = false;
  quant::GgmlType qtype_ = quant::GgmlType::f32;  // when quantized_
  std::vector<std::int64_t> shape_;
  const std::byte* data_ = nullptr;  // first element
  std::int64_t row_stride_ = 0;      // bytes between rows (2-D); full row width unless cols() sliced

  std::int64_t width() const noexcept;                           // elements per row (1-D: all)
  std::int64_t byte_offset(std::int64_t elements, const char* what) const;  // of `elements` within a row
};

}  // namespace neuron::io
