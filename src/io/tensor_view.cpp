#include "io/tensor_view.hpp"

#include <cstring>

#include "quant/dequantize.hpp"
#include "util/error.hpp"

namespace neuron::io {

TensorView::TensorView(DType dtype, std::vector<std::int64_t> shape, const std::byte* data)
    : dtype_(dtype), shape_(std::move(shape)), data_(data) {
  std::int64_t row = 1;
  for (std::size_t i = 1; i < shape_.size(); ++i) row *= shape_[i];
  row_stride_ = row * static_cast<std::int64_t>(dtype_size(dtype_));
}

TensorView::TensorView(quant::GgmlType type, std::vector<std::int64_t> shape, const std::byte* data)
    : shape_(std::move(shape)), data_(data) {
  switch (type) {
    case quant::GgmlType::f32: dtype_ = DType::f32; break;
    case quant::GgmlType::f16: dtype_ = DType::f16; break;
    case quant::GgmlType::bf16: dtype_ = DType::bf16; break;
    default: quantized_ = true; qtype_ = type;
  }
  std::int64_t row = 1;
  for (std::size_t i = 1; i < shape_.size(); ++i) row *= shape_[i];
  row_stride_ = quantized_ ? static_cast<std::int64_t>(quant::row_bytes(qtype_, row))
                           : row * static_cast<std::int64_t>(dtype_size(dtype_));
}

quant::GgmlType TensorView::ggml_type() const noexcept {
  if (quantized_) return qtype_;
  switch (dtype_) {
    case DType::f32: return quant::GgmlType::f32;
    case DType::f16: return quant::GgmlType::f16;
    case DType::bf16: return quant::GgmlType::bf16;
  }
  return quant::GgmlType::f32;
}

std::int64_t TensorView::width() const noexcept {
  if (shape_.size() < 2) return numel();
  std::int64_t row = 1;
  for (std::size_t i = 1; i < shape_.size(); ++i) row *= shape_[i];
  return row;
}

std::int64_t TensorView::byte_offset(std::int64_t elements, const char* what) const {
  if (!quantized_) return elements * static_cast<std::int64_t>(dtype_size(dtype_));
  const quant::GgmlTypeTraits tr = quant::traits(qtype_);
  if (elements % tr.block_size != 0)
    fail(errc::bad_tensor_parallel, std::string(what) + " at element " + std::to_string(elements) + " of a " +
                                        std::string(tr.name) + " tensor " + shape_string() +
                                        " is not on a block boundary (blocks of " + std::to_string(tr.block_size) + ")");
  return elements / tr.block_size * static_cast<std::int64_t>(tr.type_size);
}

std::int64_t TensorView::numel() const noexcept {
  std::int64_t n = 1;
  for (auto d : shape_) n *= d;
  return n;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (std::size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + "]";
}

bool TensorView::contiguous() const noexcept {
  if (shape_.size() < 2) return true;
  const std::int64_t row = width();
  if (quantized_) return row_stride_ == static_cast<std::int64_t>(quant::row_bytes(qtype_, row));
  return row_stride_ == row * static_cast<std::int64_t>(dtype_size(dtype_));
}

TensorView TensorView::rows(std::int64_t begin, std::int64_t end) const {
  if (shape_.empty() || begin < 0 || end < begin || end > shape_[0])
    fail(errc::invalid_argument, "row slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                                     ") outside tensor " + shape_string());
  if (shape_.size() == 1) {
    const std::int64_t b = byte_offset(begin, "row slice begin");
    byte_offset(end, "row slice end");
    TensorView v = *this;
    v.shape_[0] = end - begin;
    v.data_ = data_ + b;
    return v;
  }
  TensorView v = *this;
  v.shape_[0] = end - begin;
  v.data_ = data_ + begin * row_stride_;
  return v;
}

TensorView TensorView::cols(std::int64_t begin, std::int64_t end) const {
  if (shape_.size() != 2 || begin < 0 || end < begin || end > shape_[1])
    fail(errc::invalid_argument, "column slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                                     ") outside tensor " + shape_string());
  const std::int64_t b = byte_offset(begin, "column slice begin");
  byte_offset(end, "column slice end");
  TensorView v = *this;
  v.shape_[1] = end - begin;
  v.data_ = data_ + b;
  return v;
}

namespace {
template <typename Out, typename Convert>
void convert_rows(const TensorView& v, std::int64_t row_stride, std::span<Out> out, Convert convert) {
  if (static_cast<std::int64_t>(out.size()) != v.numel())
    fail(errc::invalid_argument, "conversion buffer size mismatch for tensor " + v.shape_string());
  if (v.numel() == 0) return;  // [2^29, 0] holds nothing: no loop over its empty rows
  const std::int64_t nrows = v.rank() >= 2 ? v.dim(0) : 1;
  const std::int64_t width = nrows ? v.numel() / (nrows ? nrows : 1) : 0;
  const std::size_t es = dtype_size(v.dtype());
  for (std::int64_t r = 0; r < nrows; ++r) {
    const std::byte* src = v.data() + r * row_stride;
    Out* dst = out.data() + r * width;
    for (std::int64_t c = 0; c < width; ++c) dst[c] = convert(src + c * es);
  }
}
}  // namespace

namespace {
// A quantized view, row by row: dequantize a row to f32, then `store` each element.
template <typename Out, typename Store>
void dequantize_rows(const TensorView& v, std::span<Out> out, Store store) {
  if (static_cast<std::int64_t>(out.size()) != v.numel())
    fail(errc::invalid_argument, "conversion buffer size mismatch for tensor " + v.shape_string());
  if (v.numel() == 0) return;
  const std::int64_t nrows = v.rank() >= 2 ? v.dim(0) : 1;
  const std::int64_t width = v.numel() / nrows;
  std::vector<float> row(static_cast<std::size_t>(width));
  for (std::int64_t r = 0; r < nrows; ++r) {
    quant::dequantize_row(v.ggml_type(), v.data() + r * v.row_stride(), row.data(), width);
    Out* dst = out.data() + r * width;
    for (std::int64_t c = 0; c < width; ++c) dst[c] = store(row[static_cast<std::size_t>(c)]);
  }
}

}  // namespace

void TensorView::to_f32(std::span<float> out) const {
  if (quantized_) return dequantize_rows(*this, out, [](float f) { return f; });
  const std::int64_t stride = rank() >= 2 ? row_stride_ : 0;
  switch (dtype_) {
    case DType::f32:
      convert_rows(*this, stride, out, [](const std::byte* p) { float f; std::memcpy(&f, p, 4); return f; });
      break;
    case DType::bf16:
      convert_rows(*this, stride, out, [](const std::byte* p) { std::uint16_t h; std::memcpy(&h, p, 2); return bf16_to_f32(h); });
      break;
    case DType::f16:
      convert_rows(*this, stride, out, [](const std::byte* p) { std::uint16_t h; std::memcpy(&h, p, 2); return f16_to_f32(h); });
      break;
  }
}

void TensorView::to_bf16(std::span<std::uint16_t> out) const {
  if (quantized_) return dequantize_rows(*this, out, [](float f) { return f32_to_bf16(f); });
  const std::int64_t stride = rank() >= 2 ? row_stride_ : 0;
  switch (dtype_) {
    case DType::f32:
      convert_rows(*this, stride, out, [](const std::byte* p) { float f; std::memcpy(&f, p, 4); return f32_to_bf16(f); });
      break;
    case DType::bf16:
      convert_rows(*this, stride, out, [](const std::byte* p) { std::uint16_t h; std::memcpy(&h, p, 2); return h; });
      break;
    case DType::f16:
      convert_rows(*this, stride, out, [](const std::byte* p) { std::uint16_t h; std::memcpy(&h, p, 2); return f32_to_bf16(f16_to_f32(h)); });
      break;
  }
}

std::vector<float> TensorView::to_f32() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  to_f32(out);
  return out;
}

std::vector<std::uint16_t> TensorView::to_bf16() const {
  std::vector<std::uint16_t> out(static_cast<std::size_t>(numel()));
  to_bf16(out);
  return out;
}

}  // namespace neuron::io
