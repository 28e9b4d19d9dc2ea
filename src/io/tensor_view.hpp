#pragma once
// A typed, possibly strided, window onto bytes held elsewhere (an mmap'd
// checkpoint). Slicing never copies: a TP rank takes rows(b, e) or cols(b, e)
// of a 2-D weight and converts only those elements.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensor/dtype.hpp"

namespace neuron::io {

class TensorView {
 public:
  TensorView() = default;
  // `data` holds the tensor row-major and contiguous; the caller has checked the byte range.
  TensorView(DType dtype, std::vector<std::int64_t> shape, const std::byte* data);

  DType dtype() const noexcept { return dtype_; }
  const std::vector<std::int64_t>& shape() const noexcept { return shape_; }
  std::int64_t dim(std::size_t i) const { return shape_.at(i); }
  std::size_t rank() const noexcept { return shape_.size(); }
  std::int64_t numel() const noexcept;
  std::string shape_string() const;  // "[64, 32]"

  // Rows [begin, end) / columns [begin, end) of a 2-D view (1-D views: rows() slices elements).
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
  std::vector<std::int64_t> shape_;
  const std::byte* data_ = nullptr;  // first element
  std::int64_t row_stride_ = 0;      // bytes between rows (2-D); full row width unless cols() sliced
};

}  // namespace neuron::io
