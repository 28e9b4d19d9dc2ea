#include "backend/packed_weights.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/chunk_pool.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_view.hpp"
#include "quant/quantize.hpp"
#include "tensor/dtype.hpp"
#include "util/error.hpp"

namespace neuron::backend {

std::size_t packed_bytes(const model::SliceSpec& spec, quant::GgmlType type) {
  return static_cast<std::size_t>(spec.rows()) * quant::row_bytes(type, spec.cols());
}

void check_quantizable(const model::SliceSpec& spec, quant::GgmlType type) {
  const std::int64_t block = quant::traits(type).block_size;
  const std::int64_t full_cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
  if (spec.cols() % block == 0) return;
  const std::string what = "cannot quantize " + spec.name + " to " + std::string(quant::ggml_type_name(type));
  if (spec.cols() == full_cols)
    fail(errc::unsupported_arch, what + ": rows of " + std::to_string(spec.cols()) + " are not whole blocks of " +
                                     std::to_string(block));
  fail(errc::bad_tensor_parallel, what + ": this rank's columns [" + std::to_string(spec.col_begin) + ", " +
                                      std::to_string(spec.col_end) + ") do not fall on block boundaries (" +
                                      std::to_string(block) + "); choose a tensor_parallel that splits them evenly");
}

void quantize_slice(const io::Checkpoint* ckpt, const model::SliceSpec& spec, quant::GgmlType type,
                    std::span<std::byte> dst) {
  check_quantizable(spec, type);
  const std::int64_t rows = spec.rows(), cols = spec.cols();
  const std::size_t row_bytes = quant::row_bytes(type, cols);
  NEURON_ASSERT(dst.size() == static_cast<std::size_t>(rows) * row_bytes);
  std::optional<io::TensorView> view;
  std::vector<std::uint16_t> dummy;  // [rows, cols] bf16 stand-in weights (fill_dummy is parallel itself)
  if (ckpt) {
    view = model::slice_view(*ckpt, spec);
  } else {
    dummy.resize(static_cast<std::size_t>(spec.numel()));
    model::fill_dummy(spec, dummy);
  }
  std::mutex failed_mu;
  std::exception_ptr failed;
  const std::int64_t chunk = 16;
  cpu::ChunkPool::shared().run((rows + chunk - 1) / chunk, [&](std::int64_t c) {
    try {
      std::vector<float> row(static_cast<std::size_t>(cols));  // [cols] f32
      for (std::int64_t r = c * chunk; r < std::min(rows, (c + 1) * chunk); ++r) {
        if (view)
          view->rows(r, r + 1).to_f32(row);
        else
          for (std::int64_t i = 0; i < cols; ++i)
            row[static_cast<std::size_t>(i)] = bf16_to_f32(dummy[static_cast<std::size_t>(r * cols + i)]);
        quant::quantize_row(type, row.data(), dst.data() + static_cast<std::size_t>(r) * row_bytes, cols);
      }
    } catch (...) {  // the pool's tasks must not throw: the first failure is rethrown below
      std::lock_guard lock(failed_mu);
      if (!failed) failed = std::current_exception();
    }
  });
  if (failed) std::rethrow_exception(failed);
}

void copy_packed(const model::SliceSpec& spec, const io::TensorView& view, std::span<std::byte> dst) {
  const std::size_t row_bytes = quant::row_bytes(view.ggml_type(), spec.cols());
  NEURON_ASSERT(dst.size() == static_cast<std::size_t>(spec.rows()) * row_bytes);
  for (std::int64_t r = 0; r < spec.rows(); ++r)
    std::memcpy(dst.data() + static_cast<std::size_t>(r) * row_bytes, view.row_data(r), row_bytes);
}

}  // namespace neuron::backend
