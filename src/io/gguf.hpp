#pragma once
// GGUF files (llama.cpp's single-file model format, versions 2 and 3,
// little-endian), mapped and validated.
//
// Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count; the
// metadata as (string key, u32 type, value) triples; one info per tensor
// (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset); then,
// at the next multiple of `general.alignment` (default 32), the data section.
// A string is a u64 length and that many bytes; an array a u32 element type,
// a u64 count and the elements. ne[0] is a row's length (ggml's order, the
// reverse of PyTorch's shape).
//
// Nothing is trusted: every length and count is checked against the bytes
// left before anything is allocated (a huge count is an error, never a huge
// allocation), keys and tensor names must be unique, types known, rows whole
// blocks, offsets aligned, and tensors inside the data section without
// overlapping. Errors are Error{bad_model} naming the file, the item and the
// problem.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/tensor_view.hpp"
#include "quant/ggml_type.hpp"
#include "util/mapped_file.hpp"

namespace neuron::io {

enum class GgufType : std::uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9, u64 = 10, i64 = 11,
  f64 = 12,
};
std::string_view gguf_type_name(GgufType t) noexcept;  // "u32", "string", "array", ...

// One metadata value. Scalars: every integer type and bool in `integer` (a
// u64 above INT64_MAX is refused at parse), f32/f64 in `real`, a string in
// `str`. Arrays (type == array, elements of type `elem`, never arrays):
// integers and bools in `integers`, floats in `reals`, strings in `strings`.
struct GgufValue {
  GgufType type = GgufType::u8;
  GgufType elem = GgufType::u8;
  std::int64_t integer = 0;
  double real = 0;
  std::string str;
  std::vector<std::int64_t> integers;
  std::vector<double> reals;
  std::vector<std::string> strings;

  bool is_integer() const noexcept;  // a scalar of an integer type (not bool)
  bool is_real() const noexcept;     // f32 / f64 scalar
};

// The metadata, with typed getters that name the key and the type found when
// it is not what the caller needs (Error{bad_model}).
class GgufMetadata {
 public:
  const GgufValue* find(const std::string& key) const noexcept;
  bool contains(const std::string& key) const noexcept { return find(key) != nullptr; }
  std::optional<std::string> string(const std::string& key) const;
  std::optional<std::int64_t> integer(const std::string& key) const;
  std::optional<double> real(const std::string& key) const;  // f32, f64 or an integer
  std::optional<bool> boolean(const std::string& key) const;
  const std::vector<std::string>* strings(const std::string& key) const;   // an array of strings
  const std::vector<std::int64_t>* integers(const std::string& key) const;  // an array of integers
  const std::vector<std::int64_t>* booleans(const std::string& key) const;  // an array of bools, as 0 / 1
  // The required forms: Error{bad_model} naming the missing key.
  std::string require_string(const std::string& key) const;
  std::int64_t require_integer(const std::string& key) const;

  std::map<std::string, GgufValue>& values() noexcept { return values_; }
  const std::map<std::string, GgufValue>& values() const noexcept { return values_; }
  std::string what;  // the file, for messages

 private:
  std::map<std::string, GgufValue> values_;
};

struct GgufTensor {
  std::string name;
  quant::GgmlType type = quant::GgmlType::f32;
  std::vector<std::int64_t> ne;  // [n_dims] ggml order: ne[0] is the row length
  std::uint64_t offset = 0;      // from the start of the data section
  std::uint64_t nbytes = 0;
  const std::byte* data = nullptr;  // into the parsed bytes

  // The tensor in PyTorch's order (ne reversed), as a (possibly quantized) view.
  TensorView view() const;
};

struct GgufContents {
  std::uint32_t version = 0;
  std::uint64_t alignment = 32;
  GgufMetadata metadata;
  std::vector<GgufTensor> tensors;  // in file order
};

inline constexpr std::size_t kMaxGgufTensorName = 63;  // ggml's GGML_MAX_NAME - 1
inline constexpr std::size_t kMaxGgufDims = 4;

// Parses and validates `file` (the whole file's bytes; the result points into
// them). Throws Error{bad_model}. Exposed for fuzzing.
GgufContents parse_gguf(std::span<const std::byte> file, const std::string& what);

// True when `path` ends in ".gguf" (any case): how checkpoint file lists and
// model references tell a GGUF file from safetensors.
bool is_gguf_path(const std::filesystem::path& path);

class GgufFile {
 public:
  explicit GgufFile(const std::filesystem::path& path);  // throws not_found / io / bad_model

  const GgufContents& contents() const noexcept { return contents_; }
  const GgufMetadata& metadata() const noexcept { return contents_.metadata; }
  const std::vector<GgufTensor>& tensors() const noexcept { return contents_.tensors; }
  const std::filesystem::path& path() const noexcept { return file_.path(); }

 private:
  MappedFile file_;
  GgufContents contents_;  // views into file_
};

}  // namespace neuron::io
