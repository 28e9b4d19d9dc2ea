#include "io/safetensors_writer.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace neuron::io {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian; so is every host neuron targets");

std::uint64_t TensorSpec::numel() const noexcept {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::vector<std::byte> encode_values(std::span<const float> values, DType dtype) {
  std::vector<std::byte> out(values.size() * dtype_size(dtype));
  switch (dtype) {
    case DType::f32:
      if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
      break;
    case DType::bf16:
    case DType::f16:
      for (std::size_t i = 0; i < values.size(); ++i) {
        std::uint16_t h = dtype == DType::bf16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
  }
  return out;
}

SafetensorsWriter::SafetensorsWriter(std::filesystem::path path, std::vector<TensorSpec> specs,
                                     const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), specs_(std::move(specs)) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& s : specs_) {
    if (s.name.empty() || s.name == "__metadata__")
      fail(errc::invalid_argument, path_.string() + ": tensor name '" + s.name + "' is reserved or empty");
    if (!names.insert(s.name).second) fail(errc::invalid_argument, path_.string() + ": tensor '" + s.name + "' declared twice");
    for (auto d : s.shape)
      if (d < 0) fail(errc::invalid_argument, path_.string() + ": tensor '" + s.name + "' has a negative dimension");
    const std::uint64_t end = offset + s.nbytes();
    header[s.name] = {{"dtype", std::string(dtype_name(s.dtype))}, {"shape", s.shape}, {"data_offsets", {offset, end}}};
    ends_.push_back(end);
    offset = end;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  tmp_path_ = path_;
  tmp_path_ += ".tmp";
  out_.open(tmp_path_, std::ios::binary | std::ios::trunc);
  if (!out_) fail(errc::io, "cannot create " + tmp_path_.string());
  std::byte len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::byte>((text.size() >> (8 * i)) & 0xff);
  out_.write(reinterpret_cast<const char*>(len), 8);
  out_.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out_) fail(errc::io, "cannot write the header of " + tmp_path_.string());
}

SafetensorsWriter::~SafetensorsWriter() {
  if (finished_) return;
  out_.close();
  std::error_code ec;
  std::filesystem::remove(tmp_path_, ec);
}

void SafetensorsWriter::write(std::span<const std::byte> bytes) {
  const std::uint64_t total = ends_.empty() ? 0 : ends_.back();
  if (finished_) fail(errc::invalid_argument, path_.string() + ": write after finish");
  if (bytes.size() > total - written_)
    fail(errc::invalid_argument, path_.string() + ": " + std::to_string(bytes.size()) + " bytes written past the end of the data section (" +
                                     std::to_string(total - written_) + " left)");
  out_.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out_) fail(errc::io, "cannot write " + tmp_path_.string());
  written_ += bytes.size();
}

void SafetensorsWriter::write_values(std::span<const float> values) {
  // Check the whole span fits before writing any of it, so a refused call leaves the file as it was.
  std::uint64_t room = 0, pos = written_;
  for (auto it = std::upper_bound(ends_.begin(), ends_.end(), pos); it != ends_.end() && room < values.size(); ++it) {
    room += (*it - pos) / dtype_size(specs_[static_cast<std::size_t>(it - ends_.begin())].dtype);
    pos = *it;
  }
  if (room < values.size())
    fail(errc::invalid_argument, path_.string() + ": " + std::to_string(values.size()) + " values written past the end of the data section (" +
                                     std::to_string(room) + " left)");
  while (!values.empty()) {
    // The tensor that the next byte belongs to (zero-size tensors own no bytes).
    auto it = std::upper_bound(ends_.begin(), ends_.end(), written_);
    if (it == ends_.end()) fail(errc::invalid_argument, path_.string() + ": values written past the last tensor");
    const TensorSpec& spec = specs_[static_cast<std::size_t>(it - ends_.begin())];
    const std::uint64_t left = (*it - written_) / dtype_size(spec.dtype);
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, values.size()));
    write(encode_values(values.first(n), spec.dtype));
    values = values.subspan(n);
  }
}

void SafetensorsWriter::finish() {
  const std::uint64_t total = ends_.empty() ? 0 : ends_.back();
  if (written_ != total)
    fail(errc::invalid_argument, path_.string() + ": only " + std::to_string(written_) + " of " + std::to_string(total) +
                                     " data bytes were written");
  out_.close();
  if (!out_) fail(errc::io, "cannot flush " + tmp_path_.string());
  std::error_code ec;
  std::filesystem::rename(tmp_path_, path_, ec);
  if (ec) fail(errc::io, "cannot move " + tmp_path_.string() + " to " + path_.string() + ": " + ec.message());
  finished_ = true;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<HostTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& t : tensors) {
    if (t.bytes.size() != t.spec.nbytes())
      fail(errc::invalid_argument, path.string() + ": tensor '" + t.spec.name + "' has " + std::to_string(t.bytes.size()) +
                                       " bytes but its shape and dtype need " + std::to_string(t.spec.nbytes()));
    specs.push_back(t.spec);
  }
  SafetensorsWriter w(path, std::move(specs), metadata);
  for (const auto& t : tensors) w.write(t.bytes);
  w.finish();
}

}  // namespace neuron::io
