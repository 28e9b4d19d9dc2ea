#include "io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "io/gguf.hpp"
#include "io/gguf_hybrid.hpp"
#include "io/gguf_names.hpp"
#include "util/error.hpp"
#include "util/json_parse.hpp"

namespace neuron::io {

using nlohmann::json;

namespace {

// A header is {name: {dtype, shape: [...], data_offsets: [...]}, __metadata__: {...}}: 3 levels.
constexpr int kMaxHeaderDepth = 8;

[[noreturn]] void bad_file(const std::string& what, const std::string& msg) { fail(errc::bad_model, what + ": " + msg); }

std::uint64_t checked_product(std::uint64_t a, std::uint64_t b, const std::string& what, const std::string& name) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) bad_file(what, "tensor '" + name + "': shape overflows");
  return a * b;
}

}  // namespace

const std::filesystem::path& require_regular_file(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) fail(errc::not_found, "no such file: " + path.string());
  if (ec) fail(errc::io, "cannot stat " + path.string() + ": " + ec.message());
  if (fs::is_regular_file(st)) return path;
  const char* kind = fs::is_directory(st)        ? "a directory"
                     : fs::is_character_file(st) ? "a character device"
                     : fs::is_block_file(st)     ? "a block device"
                     : fs::is_fifo(st)           ? "a FIFO"
                     : fs::is_socket(st)         ? "a socket"
                                                 : "not a regular file";
  fail(errc::bad_model, path.string() + " is " + kind + "; checkpoint files must be regular files");
}

std::map<std::string, TensorView> parse_safetensors(std::span<const std::byte> file, const std::string& what) {
  if (file.size() < 8) bad_file(what, "file too short for a safetensors header (" + std::to_string(file.size()) + " bytes)");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<std::uint8_t>(file[static_cast<std::size_t>(i)]);
  if (header_len > kMaxSafetensorsHeader) bad_file(what, "header length " + std::to_string(header_len) + " exceeds the 100 MiB limit");
  if (header_len > file.size() - 8)
    bad_file(what, "header length " + std::to_string(header_len) + " runs past the end of the file (" + std::to_string(file.size()) + " bytes)");

  const char* hdr = reinterpret_cast<const char*>(file.data() + 8);
  const json j = parse_json(std::string_view(hdr, header_len), what + ": header", errc::bad_model, kMaxHeaderDepth);
  if (!j.is_object()) bad_file(what, "header is not a JSON object");

  const std::byte* data = file.data() + 8 + header_len;
  const std::uint64_t data_len = file.size() - 8 - header_len;

  std::map<std::string, TensorView> out;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  std::vector<std::string> range_names;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) bad_file(what, "__metadata__ is not an object");
      continue;
    }
    const json& e = *it;
    if (!e.is_object()) bad_file(what, "tensor '" + name + "': entry is not an object");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) bad_file(what, "tensor '" + name + "': missing or non-string dtype");
    if (sh == e.end() || !sh->is_array()) bad_file(what, "tensor '" + name + "': missing or non-array shape");
    if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      bad_file(what, "tensor '" + name + "': data_offsets must be two non-negative integers");
    DType dtype;
    if (!parse_dtype(dt->get<std::string>(), dtype))
      bad_file(what, "tensor '" + name + "': unsupported dtype " + dt->get<std::string>() + " (supported: F32, BF16, F16)");
    if (sh->size() > 8) bad_file(what, "tensor '" + name + "': rank " + std::to_string(sh->size()) + " is too high");
    std::vector<std::int64_t> shape;
    std::uint64_t numel = 1;
    // With a zero dimension numel is 0 whatever the others are, yet views still
    // multiply the other dimensions (row strides): bound their product too.
    std::uint64_t extent = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) bad_file(what, "tensor '" + name + "': shape entries must be non-negative integers");
      std::uint64_t v = d.get<std::uint64_t>();
      if (v > (1ull << 40)) bad_file(what, "tensor '" + name + "': dimension " + std::to_string(v) + " is too large");
      numel = checked_product(numel, v, what, name);
      extent = checked_product(extent, std::max<std::uint64_t>(v, 1), what, name);
      shape.push_back(static_cast<std::int64_t>(v));
    }
    if (extent > (1ull << 58)) bad_file(what, "tensor '" + name + "': shape " + sh->dump() + " is too large");
    std::uint64_t nbytes = checked_product(numel, dtype_size(dtype), what, name);
    std::uint64_t b = (*off)[0].get<std::uint64_t>(), en = (*off)[1].get<std::uint64_t>();
    if (en < b) bad_file(what, "tensor '" + name + "': data_offsets end before they begin");
    if (en > data_len)
      bad_file(what, "tensor '" + name + "': data range [" + std::to_string(b) + ", " + std::to_string(en) +
                    ") lies outside the data section (" + std::to_string(data_len) + " bytes)");
    if (en - b != nbytes)
      bad_file(what, "tensor '" + name + "': shape and dtype need " + std::to_string(nbytes) + " bytes but data_offsets span " +
                    std::to_string(en - b));
    ranges.emplace_back(b, en);
    range_names.push_back(name);
    out.emplace(name, TensorView(dtype, std::move(shape), data + b));
  }
  std::vector<std::size_t> order(ranges.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return ranges[a] < ranges[b]; });
  // Empty ranges own no bytes and overlap nothing; every other range must
  // start at or after the furthest end seen so far (not just its neighbour's:
  // an empty range between two overlapping ones must not hide the overlap).
  std::optional<std::size_t> furthest;
  for (std::size_t i : order) {
    const auto& cur = ranges[i];
    if (cur.second == cur.first) continue;
    if (furthest && cur.first < ranges[*furthest].second)
      bad_file(what, "tensors '" + range_names[*furthest] + "' and '" + range_names[i] + "' overlap");
    if (!furthest || cur.second > ranges[*furthest].second) furthest = i;
  }
  return out;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(require_regular_file(path)) {
  tensors_ = parse_safetensors(file_.bytes(), path.string());
}

const TensorView* SafetensorsFile::find(const std::string& name) const noexcept {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::filesystem::path> checkpoint_files(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  if (is_gguf_path(dir) && !fs::is_directory(dir)) return {require_regular_file(dir)};
  fs::path single = dir / "model.safetensors";
  fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream in(require_regular_file(index));
    if (!in) fail(errc::io, "cannot read " + index.string());
    const json j = parse_json(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), index.string(),
                              errc::bad_model, kMaxHeaderDepth);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail(errc::bad_model, index.string() + ": not a valid index (needs a weight_map object)");
    std::set<std::string> names;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string()) fail(errc::bad_model, index.string() + ": weight_map['" + tensor + "'] is not a string");
      std::string f = file.get<std::string>();
      // Shard names are plain file names: nothing may point outside the model directory.
      const bool control = std::any_of(f.begin(), f.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x20; });
      if (f.empty() || control || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
        fail(errc::bad_model, index.string() + ": shard name '" + f + "' is not a plain file name");
      names.insert(f);
    }
    if (names.empty()) fail(errc::bad_model, index.string() + ": weight_map is empty");
    std::vector<fs::path> files;
    for (const auto& n : names) files.push_back(dir / n);
    return files;
  }
  if (fs::exists(single)) return {require_regular_file(single)};
  fail(errc::not_found, "no model.safetensors or model.safetensors.index.json in " + dir.string());
}

Checkpoint::Checkpoint() = default;
Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;

Checkpoint Checkpoint::open_dir(const std::filesystem::path& dir) { return open_files(checkpoint_files(dir)); }

Checkpoint Checkpoint::open_files(const std::vector<std::filesystem::path>& files) {
  if (files.empty()) fail(errc::invalid_argument, "a checkpoint needs at least one safetensors file");
  Checkpoint c;
  if (std::any_of(files.begin(), files.end(), [](const auto& f) { return is_gguf_path(f); })) {
    if (files.size() != 1)
      fail(errc::invalid_argument, "a GGUF checkpoint is exactly one .gguf file (split GGUF files are not supported), got " +
                                       std::to_string(files.size()) + " files");
    c.gguf_ = std::make_unique<GgufFile>(files[0]);
    const std::string what = files[0].string();
    const GgufMetadata& md = c.gguf_->metadata();
    const std::string arch = md.string("general.architecture").value_or("");
    std::map<std::string, std::string> stored_names;  // HF name -> GGUF name, for messages
    auto add = [&](const std::string& name, const TensorView& view, const GgufTensor& t) {
      if (!c.gguf_views_.emplace(name, view).second)
        fail(errc::bad_model, what + ": tensor '" + t.name + "' names " + name + " a second time");
      stored_names.emplace(name, t.name);
    };
    for (const GgufTensor& t : c.gguf_->tensors()) {
      if (const auto experts = gguf_experts(t.name)) {
        if (t.ne.size() != 3)
          fail(errc::bad_model, what + ": tensor '" + t.name + "' has " + std::to_string(t.ne.size()) +
                                    " dimensions; stacked experts have 3 ([cols, rows, experts] in ggml's order)");
        const std::int64_t cols = t.ne[0], rows = t.ne[1];
        const auto expert_bytes = static_cast<std::size_t>(rows) * quant::row_bytes(t.type, cols);
        for (std::int64_t e = 0; e < t.ne[2]; ++e)
          add(hf_expert_name(experts->layer, e, experts->proj),
              TensorView(t.type, {rows, cols}, t.data + static_cast<std::size_t>(e) * expert_bytes), t);
        continue;
      }
      const std::string name = hf_name_for_gguf(t.name).value_or(t.name);
      const bool q = name.ends_with("self_attn.q_proj.weight"), k = name.ends_with("self_attn.k_proj.weight");
      if (gguf_permutes_qk(arch) && (q || k)) {
        const std::string key = arch + (q ? ".attention.head_count" : ".attention.head_count_kv");
        const std::int64_t heads = md.integer(key).value_or(md.integer(arch + ".attention.head_count").value_or(0));
        add(name, c.unpermute_rope_rows(t.view(), heads, what + ": tensor '" + t.name + "'"), t);
      } else {
        add(name, t.view(), t);
      }
    }
    undo_hybrid_storage(md, arch, c.gguf_views_, stored_names, c.gguf_owned_, what);
    for (const auto& [name, view] : c.gguf_views_) c.index_.emplace(name, &view);
    return c;
  }
  for (const auto& f : files) {
    c.files_.push_back(std::make_unique<SafetensorsFile>(f));
    for (const auto& [name, view] : c.files_.back()->tensors()) {
      if (!c.index_.emplace(name, &view).second)
        fail(errc::bad_model, "tensor '" + name + "' appears in more than one shard (again in " + f.string() + ")");
    }
  }
  // A bare decoder saved on its own (sentence-transformers' Qwen3-Embedding: Qwen3Model's tensors, no lm_head)
  // names its tensors without the causal LM's `model.` prefix: they answer to the prefixed names.
  if (c.index_.count("embed_tokens.weight") && !c.index_.count("model.embed_tokens.weight")) {
    std::map<std::string, const TensorView*> prefixed;
    for (const auto& [name, view] : c.index_) prefixed.emplace(name.starts_with("lm_head.") ? name : "model." + name, view);
    c.index_ = std::move(prefixed);
  }
  return c;
}

TensorView Checkpoint::unpermute_rope_rows(const TensorView& view, std::int64_t heads, const std::string& what) {
  if (view.rank() != 2 || heads < 1 || view.dim(0) % heads != 0 || (view.dim(0) / heads) % 2 != 0)
    fail(errc::bad_model, what + " of shape " + view.shape_string() + " does not split into " + std::to_string(heads) +
                              " heads of an even head_dim (attention.head_count / head_count_kv)");
  const std::int64_t rows = view.dim(0), head_dim = rows / heads, half = head_dim / 2;
  const auto row_bytes = static_cast<std::size_t>(view.row_stride());
  auto& owned = gguf_owned_.emplace_back(std::make_unique<std::byte[]>(static_cast<std::size_t>(rows) * row_bytes));
  // Stored row h * head_dim + 2 * i + s is Hugging Face's row h * head_dim + s * half + i.
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t s = 0; s < 2; ++s)
      for (std::int64_t i = 0; i < half; ++i)
        std::memcpy(owned.get() + static_cast<std::size_t>(h * head_dim + s * half + i) * row_bytes,
                    view.row_data(h * head_dim + 2 * i + s), row_bytes);
  return TensorView(view.ggml_type(), view.shape(), owned.get());
}

const TensorView* Checkpoint::find(const std::string& name) const noexcept {
  auto it = index_.find(name);
  // The converter drops "language_model." from a multimodal checkpoint's text model (io/gguf_names.hpp).
  constexpr std::string_view kNested = "model.language_model.";
  if (it == index_.end() && gguf_ && name.starts_with(kNested)) it = index_.find("model." + name.substr(kNested.size()));
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::tensor(const std::string& name) const {
  const TensorView* v = find(name);
  if (!v) fail(errc::not_found, "tensor '" + name + "' is missing from the checkpoint");
  return *v;
}

std::vector<std::filesystem::path> Checkpoint::files() const {
  std::vector<std::filesystem::path> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : index_) out.push_back(n);
  return out;
}

}  // namespace neuron::io
