#include "io/gguf_hybrid.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <span>

#include "quant/ggml_type.hpp"
#include "util/error.hpp"

namespace neuron::io {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return TensorView(DType::f32, shape, nullptr).shape_string(); }

// A copy of `bytes` bytes, kept alive by `owned`.
std::byte* own(GgufOwned& owned, std::size_t bytes) {
  return owned.emplace_back(std::make_unique<std::byte[]>(bytes)).get();
}

TensorView own_f32(GgufOwned& owned, std::vector<std::int64_t> shape, std::span<const float> values) {
  std::byte* p = own(owned, values.size() * sizeof(float));
  std::memcpy(p, values.data(), values.size() * sizeof(float));
  return TensorView(DType::f32, std::move(shape), p);
}

class Undo {
 public:
  Undo(const GgufMetadata& md, std::string_view arch, GgufOwned& owned, const std::string& what)
      : s_(gguf_linear_shape(md, arch)), fused_(arch == "qwen3next"), tiled_(!fused_ && s_.key_heads != s_.value_heads),
        r_(s_.value_heads / s_.key_heads), owned_(owned), what_(what) {}

  // Stored value head of Hugging Face's value head h (tiled order: j Hk + g for h = g r + j).
  std::int64_t stored_head(std::int64_t h) const noexcept {
    return tiled_ ? (h % r_) * s_.key_heads + h / r_ : h;
  }

  TensorView tensor(const std::string& hf, const TensorView& v, const std::string& gguf) const {
    const std::string w = what_ + ": tensor '" + gguf + "'";
    if (ends_with(hf, "norm.weight") && !ends_with(hf, "linear_attn.norm.weight")) {
      std::vector<float> x = v.to_f32();  // [numel] f32, the norm's shape
      for (float& f : x) f -= 1.0f;
      return own_f32(owned_, v.shape(), x);
    }
    if (ends_with(hf, "linear_attn.A_log")) {
      expect(v, {s_.value_heads}, w);
      const std::vector<float> a = v.to_f32();  // [Hv] as stored
      std::vector<float> x(a.size());           // [Hv] A_log, Hugging Face's head order
      for (std::int64_t h = 0; h < s_.value_heads; ++h) {
        const float stored = a[static_cast<std::size_t>(stored_head(h))];
        if (!(stored < 0) || !std::isfinite(stored))
          fail(errc::bad_model, w + " holds " + std::to_string(stored) + "; llama.cpp stores -exp(A_log), which is negative");
        x[static_cast<std::size_t>(h)] = static_cast<float>(std::log(-static_cast<double>(stored)));
      }
      return own_f32(owned_, v.shape(), x);
    }
    if (ends_with(hf, "linear_attn.dt_bias")) {
      if (!tiled_) return v;
      expect(v, {s_.value_heads}, w);
      return rows(v, 0, 1);
    }
    if (ends_with(hf, "linear_attn.conv1d.weight")) {
      const std::int64_t channels = 2 * s_.key_dim() + s_.value_dim();
      expect(v, {channels, s_.conv_kernel}, w);
      const TensorView u = tiled_ ? rows(v, 2 * s_.key_dim(), s_.value_head_dim) : v;
      return TensorView(u.ggml_type(), {channels, 1, s_.conv_kernel}, u.data());
    }
    if (!tiled_) return v;
    if (ends_with(hf, "linear_attn.in_proj_qkv.weight")) {
      expect_rows(v, 2 * s_.key_dim() + s_.value_dim(), w);
      return rows(v, 2 * s_.key_dim(), s_.value_head_dim);
    }
    if (ends_with(hf, "linear_attn.in_proj_z.weight")) {
      expect_rows(v, s_.value_dim(), w);
      return rows(v, 0, s_.value_head_dim);
    }
    if (ends_with(hf, "linear_attn.in_proj_b.weight") || ends_with(hf, "linear_attn.in_proj_a.weight")) {
      expect_rows(v, s_.value_heads, w);
      return rows(v, 0, 1);
    }
    if (ends_with(hf, "linear_attn.out_proj.weight")) {
      if (v.rank() != 2 || v.dim(1) != s_.value_dim())
        fail(errc::bad_model, w + " has shape " + v.shape_string() + "; ssm.inner_size gives " +
                                  std::to_string(s_.value_dim()) + " columns");
      return columns(v);
    }
    return v;
  }

  // qwen3next: each layer's in_proj_qkv and in_proj_z regrouped into in_proj_qkvz (rows per key head).
  void fuse(std::map<std::string, TensorView>& views, const std::map<std::string, std::string>& gguf_names) const {
    if (!fused_) return;
    constexpr std::string_view kQkv = "linear_attn.in_proj_qkv.weight", kZ = "linear_attn.in_proj_z.weight";
    std::set<std::string> layers;  // "model.layers.N." of every layer with either part
    for (const auto& [name, _] : views)
      for (std::string_view part : {kQkv, kZ})
        if (ends_with(name, part)) layers.insert(name.substr(0, name.size() - part.size()));
    for (const std::string& p : layers) {
      const auto qkv = views.find(p + std::string(kQkv)), z = views.find(p + std::string(kZ));
      if (qkv == views.end() || z == views.end()) {
        const auto& present = qkv == views.end() ? z : qkv;
        fail(errc::bad_model, what_ + ": tensor '" + gguf_names.at(present->first) + "' has no '" +
                                  (qkv == views.end() ? "attn_qkv" : "attn_gate") +
                                  "' beside it; qwen3next stores in_proj_qkvz as the two");
      }
      const std::string wq = what_ + ": tensor '" + gguf_names.at(qkv->first) + "'";
      const std::string wz = what_ + ": tensor '" + gguf_names.at(z->first) + "'";
      expect_rows(qkv->second, 2 * s_.key_dim() + s_.value_dim(), wq);
      expect_rows(z->second, s_.value_dim(), wz);
      if (z->second.dim(1) != qkv->second.dim(1))
        fail(errc::bad_model, wz + " has shape " + z->second.shape_string() + "; attn_qkv's rows are " +
                                  std::to_string(qkv->second.dim(1)) + " long");
      TensorView a = qkv->second, b = z->second;
      std::vector<float> fa, fb;  // [rows, cols] each: both as f32 when their types differ
      if (a.ggml_type() != b.ggml_type()) {
        fa = a.to_f32();
        fb = b.to_f32();
        a = TensorView(DType::f32, a.shape(), reinterpret_cast<const std::byte*>(fa.data()));
        b = TensorView(DType::f32, b.shape(), reinterpret_cast<const std::byte*>(fb.data()));
      }
      const std::int64_t dk = s_.key_head_dim, vr = r_ * s_.value_head_dim, hk = s_.key_heads;
      const std::int64_t rows = hk * (2 * dk + 2 * vr);
      const auto row = static_cast<std::size_t>(a.row_stride());
      // [rows, cols] of a's type: per key head g, q_g, k_g, v_g, z_g.
      std::byte* out = own(owned_, static_cast<std::size_t>(rows) * row);
      std::int64_t at = 0;
      auto copy = [&](const TensorView& src, std::int64_t first, std::int64_t count) {
        std::memcpy(out + static_cast<std::size_t>(at) * row, src.row_data(first), static_cast<std::size_t>(count) * row);
        at += count;
      };
      for (std::int64_t g = 0; g < hk; ++g) {
        copy(a, g * dk, dk);
        copy(a, hk * dk + g * dk, dk);
        copy(a, 2 * hk * dk + g * vr, vr);
        copy(b, g * vr, vr);
      }
      const TensorView fused(a.ggml_type(), {rows, a.dim(1)}, out);
      views.erase(qkv);
      views.erase(z);
      views.emplace(p + "linear_attn.in_proj_qkvz.weight", fused);
    }
  }

 private:
  static void expect(const TensorView& v, const std::vector<std::int64_t>& shape, const std::string& w) {
    if (v.shape() != shape)
      fail(errc::bad_model, w + " has shape " + v.shape_string() + "; the ssm.* metadata gives " + shape_text(shape));
  }
  static void expect_rows(const TensorView& v, std::int64_t rows, const std::string& w) {
    if (v.rank() != 2 || v.dim(0) != rows)
      fail(errc::bad_model, w + " has shape " + v.shape_string() + "; the ssm.* metadata gives " + std::to_string(rows) +
                                " rows");
  }

  // A copy of v (1-D: elements, as f32; 2-D: rows, as stored) whose value heads from `first` on, `group` rows each,
  // are put back in Hugging Face's order.
  TensorView rows(const TensorView& v, std::int64_t first, std::int64_t group) const {
    if (v.rank() == 1) {
      const std::vector<float> x = v.to_f32();  // [n] as stored
      std::vector<float> y(x);                  // [n] f32, Hugging Face's head order
      for (std::int64_t h = 0; h < s_.value_heads; ++h)
        std::copy_n(x.begin() + first + stored_head(h) * group, group, y.begin() + first + h * group);
      return own_f32(owned_, v.shape(), y);
    }
    const auto row = static_cast<std::size_t>(v.row_stride());
    const std::int64_t n = v.dim(0);
    std::byte* out = own(owned_, static_cast<std::size_t>(n) * row);  // [n rows] of v's type
    std::memcpy(out, v.data(), static_cast<std::size_t>(first) * row);
    for (std::int64_t h = 0; h < s_.value_heads; ++h)
      std::memcpy(out + static_cast<std::size_t>(first + h * group) * row,
                  v.row_data(first + stored_head(h) * group), static_cast<std::size_t>(group) * row);
    return TensorView(v.ggml_type(), v.shape(), out);
  }

  // out_proj [hidden, Hv dv] with its column groups put back; dequantized to f32 where a group splits a block.
  TensorView columns(const TensorView& v) const {
    const std::int64_t dv = s_.value_head_dim, n = v.dim(0);
    const quant::GgmlType t = v.ggml_type();
    if (dv % quant::traits(t).block_size == 0) {
      const std::size_t group = quant::row_bytes(t, dv), row = static_cast<std::size_t>(v.row_stride());
      std::byte* out = own(owned_, static_cast<std::size_t>(n) * row);  // [n, Hv dv] of v's type
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t h = 0; h < s_.value_heads; ++h)
          std::memcpy(out + static_cast<std::size_t>(r) * row + static_cast<std::size_t>(h) * group,
                      v.row_data(r) + static_cast<std::size_t>(stored_head(h)) * group, group);
      return TensorView(t, v.shape(), out);
    }
    const std::vector<float> x = v.to_f32();  // [n, Hv dv] as stored
    std::vector<float> y(x.size());           // [n, Hv dv] f32, Hugging Face's head order
    const std::int64_t cols = v.dim(1);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t h = 0; h < s_.value_heads; ++h)
        std::memcpy(&y[static_cast<std::size_t>(r * cols + h * dv)], &x[static_cast<std::size_t>(r * cols + stored_head(h) * dv)],
                    static_cast<std::size_t>(dv) * sizeof(float));
    return own_f32(owned_, v.shape(), y);
  }

  GgufLinearShape s_;
  bool fused_, tiled_;
  std::int64_t r_;
  GgufOwned& owned_;
  const std::string& what_;
};

}  // namespace

bool gguf_hybrid_architecture(std::string_view architecture) noexcept {
  return architecture == "qwen3next" || architecture == "qwen35" || architecture == "qwen35moe";
}

GgufLinearShape gguf_linear_shape(const GgufMetadata& md, std::string_view architecture) {
  const std::string p = std::string(architecture) + ".ssm.";
  // Bounded so that no product of two of them overflows (real models: tens of heads, sizes in the hundreds).
  constexpr std::int64_t kMax = std::int64_t{1} << 24;
  auto positive = [&](const char* key) {
    const std::int64_t v = md.require_integer(p + key);
    if (v < 1 || v > kMax)
      fail(errc::bad_model, md.what + ": " + p + key + " is " + std::to_string(v) + "; it must be in [1, " +
                                std::to_string(kMax) + "]");
    return v;
  };
  GgufLinearShape s;
  s.key_heads = positive("group_count");
  s.value_heads = positive("time_step_rank");
  s.key_head_dim = positive("state_size");
  s.conv_kernel = positive("conv_kernel");
  const std::int64_t inner = positive("inner_size");
  if (s.value_heads % s.key_heads != 0)
    fail(errc::bad_model, md.what + ": " + p + "time_step_rank (" + std::to_string(s.value_heads) +
                              " value heads) is not a multiple of " + p + "group_count (" + std::to_string(s.key_heads) +
                              " key heads)");
  if (inner % s.value_heads != 0)
    fail(errc::bad_model, md.what + ": " + p + "inner_size " + std::to_string(inner) + " is not a multiple of " + p +
                              "time_step_rank (" + std::to_string(s.value_heads) + " value heads)");
  s.value_head_dim = inner / s.value_heads;
  return s;
}

void undo_hybrid_storage(const GgufMetadata& md, std::string_view architecture, std::map<std::string, TensorView>& views,
                         const std::map<std::string, std::string>& gguf_names, GgufOwned& owned, const std::string& what) {
  if (!gguf_hybrid_architecture(architecture)) return;
  const Undo undo(md, architecture, owned, what);
  for (auto& [name, view] : views) view = undo.tensor(name, view, gguf_names.at(name));
  undo.fuse(views, gguf_names);
}

}  // namespace neuron::io
