#include "io/gguf.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "io/safetensors.hpp"
#include "util/error.hpp"

namespace neuron::io {

namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32

[[noreturn]] void bad(const std::string& what, const std::string& msg) { fail(errc::bad_model, what + ": " + msg); }

// A cursor over the file's bytes: every read checks what is left first.
class Reader {
 public:
  Reader(std::span<const std::byte> bytes, const std::string& what) : bytes_(bytes), what_(what) {}

  std::uint64_t pos() const noexcept { return pos_; }
  std::uint64_t left() const noexcept { return bytes_.size() - pos_; }

  template <typename T>
  T read(const char* item) {
    if (left() < sizeof(T)) truncated(item);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string string(const std::string& item) {
    const auto n = read<std::uint64_t>(item.c_str());
    if (n > left())
      bad(what_, item + ": string length " + std::to_string(n) + " runs past the end of the file (" +
                     std::to_string(left()) + " bytes left)");
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<std::size_t>(n));
    pos_ += n;
    return s;
  }

  // Before reserving `count` items of at least `min_size` bytes each.
  void need(std::uint64_t count, std::uint64_t min_size, const std::string& item) const {
    if (count > left() / min_size)
      bad(what_, item + ": count " + std::to_string(count) + " cannot fit in the " + std::to_string(left()) +
                     " bytes left in the file");
  }

  [[noreturn]] void truncated(const std::string& item) const {
    bad(what_, "file ends inside " + item + " (at byte " + std::to_string(pos_) + " of " + std::to_string(bytes_.size()) + ")");
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& what_;
  std::uint64_t pos_ = 0;
};

// Smallest encoding of one element of `t` (arrays: type + count).
std::uint64_t min_size(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: case GgufType::string: return 8;
    case GgufType::array: return 12;
  }
  return 1;
}

bool known_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(GgufType::f64); }

bool integer_type(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::u16: case GgufType::i16: case GgufType::u32:
    case GgufType::i32: case GgufType::u64: case GgufType::i64: return true;
    default: return false;
  }
}

// One integer or bool scalar of type t as int64.
std::int64_t read_integer(Reader& r, GgufType t, const std::string& item, const std::string& what) {
  switch (t) {
    case GgufType::u8: return r.read<std::uint8_t>(item.c_str());
    case GgufType::i8: return r.read<std::int8_t>(item.c_str());
    case GgufType::u16: return r.read<std::uint16_t>(item.c_str());
    case GgufType::i16: return r.read<std::int16_t>(item.c_str());
    case GgufType::u32: return r.read<std::uint32_t>(item.c_str());
    case GgufType::i32: return r.read<std::int32_t>(item.c_str());
    case GgufType::i64: return r.read<std::int64_t>(item.c_str());
    case GgufType::u64: {
      const auto v = r.read<std::uint64_t>(item.c_str());
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        bad(what, item + ": u64 value " + std::to_string(v) + " is out of range");
      return static_cast<std::int64_t>(v);
    }
    case GgufType::boolean: {
      const auto b = r.read<std::uint8_t>(item.c_str());
      if (b > 1) bad(what, item + ": bool value " + std::to_string(b) + " is neither 0 nor 1");
      return b;
    }
    default: break;
  }
  NEURON_ASSERT(false);
  return 0;
}

// An f32 becomes the double of its shortest decimal spelling (1e-06f reads
// as 1e-06, not 9.99999997e-07): the value the config.json a converter read
// it from most likely held, so both formats give equal configs.
double read_real(Reader& r, GgufType t, const std::string& item) {
  if (t == GgufType::f64) return r.read<double>(item.c_str());
  const float f = r.read<float>(item.c_str());
  if (!std::isfinite(f)) return f;
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f);
  double d = f;
  if (ec == std::errc()) std::from_chars(buf, end, d);
  return d;
}

GgufValue read_value(Reader& r, GgufType t, const std::string& item, const std::string& what) {
  GgufValue v;
  v.type = t;
  if (t == GgufType::string) {
    v.str = r.string(item);
  } else if (t == GgufType::f32 || t == GgufType::f64) {
    v.real = read_real(r, t, item);
  } else if (t != GgufType::array) {
    v.integer = read_integer(r, t, item, what);
  } else {
    const auto et = r.read<std::uint32_t>(item.c_str());
    if (!known_type(et)) bad(what, item + ": unknown array element type " + std::to_string(et));
    v.elem = static_cast<GgufType>(et);
    if (v.elem == GgufType::array) bad(what, item + ": arrays of arrays are not supported");
    const auto n = r.read<std::uint64_t>(item.c_str());
    r.need(n, min_size(v.elem), item);
    const auto count = static_cast<std::size_t>(n);
    if (v.elem == GgufType::string) {
      v.strings.reserve(count);
      for (std::size_t i = 0; i < count; ++i) v.strings.push_back(r.string(item));
    } else if (v.elem == GgufType::f32 || v.elem == GgufType::f64) {
      v.reals.reserve(count);
      for (std::size_t i = 0; i < count; ++i) v.reals.push_back(read_real(r, v.elem, item));
    } else {
      v.integers.reserve(count);
      for (std::size_t i = 0; i < count; ++i) v.integers.push_back(read_integer(r, v.elem, item, what));
    }
  }
  return v;
}

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& what, const std::string& item) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) bad(what, item + ": size overflows");
  return a * b;
}

}  // namespace

std::string_view gguf_type_name(GgufType t) noexcept {
  switch (t) {
    case GgufType::u8: return "u8";
    case GgufType::i8: return "i8";
    case GgufType::u16: return "u16";
    case GgufType::i16: return "i16";
    case GgufType::u32: return "u32";
    case GgufType::i32: return "i32";
    case GgufType::f32: return "f32";
    case GgufType::boolean: return "bool";
    case GgufType::string: return "string";
    case GgufType::array: return "array";
    case GgufType::u64: return "u64";
    case GgufType::i64: return "i64";
    case GgufType::f64: return "f64";
  }
  return "?";
}

bool GgufValue::is_integer() const noexcept { return integer_type(type); }
bool GgufValue::is_real() const noexcept { return type == GgufType::f32 || type == GgufType::f64; }

// ---- GgufMetadata

const GgufValue* GgufMetadata::find(const std::string& key) const noexcept {
  const auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

namespace {
[[noreturn]] void wrong_type(const std::string& what, const std::string& key, const GgufValue& v, const char* wanted) {
  std::string got(gguf_type_name(v.type));
  if (v.type == GgufType::array) got += " of " + std::string(gguf_type_name(v.elem));
  bad(what, "metadata '" + key + "' is " + got + ", expected " + wanted);
}
}  // namespace

std::optional<std::string> GgufMetadata::string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::string) wrong_type(what, key, *v, "a string");
  return v->str;
}

std::optional<std::int64_t> GgufMetadata::integer(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) wrong_type(what, key, *v, "an integer");
  return v->integer;
}

std::optional<double> GgufMetadata::real(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_real()) return v->real;
  if (v->is_integer()) return static_cast<double>(v->integer);
  wrong_type(what, key, *v, "a number");
}

std::optional<bool> GgufMetadata::boolean(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::boolean) wrong_type(what, key, *v, "a bool");
  return v->integer != 0;
}

const std::vector<std::string>* GgufMetadata::strings(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type != GgufType::array || v->elem != GgufType::string) wrong_type(what, key, *v, "an array of strings");
  return &v->strings;
}

const std::vector<std::int64_t>* GgufMetadata::integers(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type != GgufType::array || !integer_type(v->elem)) wrong_type(what, key, *v, "an array of integers");
  return &v->integers;
}

const std::vector<std::int64_t>* GgufMetadata::booleans(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type != GgufType::array || v->elem != GgufType::boolean) wrong_type(what, key, *v, "an array of bools");
  return &v->integers;
}

std::string GgufMetadata::require_string(const std::string& key) const {
  auto s = string(key);
  if (!s) bad(what, "metadata '" + key + "' is missing");
  return *s;
}

std::int64_t GgufMetadata::require_integer(const std::string& key) const {
  auto i = integer(key);
  if (!i) bad(what, "metadata '" + key + "' is missing");
  return *i;
}

// ---- tensors

TensorView GgufTensor::view() const {
  std::vector<std::int64_t> shape(ne.rbegin(), ne.rend());
  return TensorView(type, std::move(shape), data);
}

GgufContents parse_gguf(std::span<const std::byte> file, const std::string& what) {
  Reader r(file, what);
  GgufContents c;
  c.metadata.what = what;
  if (file.size() < 4 || r.read<std::uint32_t>("the magic") != kMagic) bad(what, "not a GGUF file (bad magic)");
  c.version = r.read<std::uint32_t>("the version");
  if (c.version == 0x03000000u || c.version == 0x02000000u) bad(what, "big-endian GGUF files are not supported");
  if (c.version != 2 && c.version != 3)
    bad(what, "GGUF version " + std::to_string(c.version) + " is not supported (2 and 3 are)");
  const auto n_tensors = r.read<std::uint64_t>("the tensor count");
  const auto n_kv = r.read<std::uint64_t>("the metadata count");
  // A key is at least a length and a type; a tensor info at least a name length, n_dims, type and offset.
  r.need(n_kv, 8 + 4 + 1, "metadata count");
  r.need(n_tensors, 8 + 4 + 4 + 8, "tensor count");

  for (std::uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.string("metadata key " + std::to_string(i));
    const std::string item = "metadata '" + key + "'";
    const auto t = r.read<std::uint32_t>(item.c_str());
    if (!known_type(t)) bad(what, item + ": unknown value type " + std::to_string(t));
    GgufValue v = read_value(r, static_cast<GgufType>(t), item, what);
    if (!c.metadata.values().emplace(std::move(key), std::move(v)).second) bad(what, item + " appears twice");
  }

  if (const GgufValue* a = c.metadata.find("general.alignment")) {
    if (a->type != GgufType::u32) bad(what, "metadata 'general.alignment' must be a u32");
    const auto al = static_cast<std::uint64_t>(a->integer);
    if (al == 0 || (al & (al - 1)) != 0) bad(what, "general.alignment " + std::to_string(al) + " is not a power of two");
    c.alignment = al;
  }

  std::set<std::string> names;
  c.tensors.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = r.string("tensor info " + std::to_string(i));
    const std::string item = "tensor '" + t.name + "'";
    if (t.name.size() > kMaxGgufTensorName)
      bad(what, "tensor " + std::to_string(i) + ": name of " + std::to_string(t.name.size()) + " bytes is too long (at most " +
                    std::to_string(kMaxGgufTensorName) + ")");
    if (!names.insert(t.name).second) bad(what, item + " appears twice");
    const auto n_dims = r.read<std::uint32_t>(item.c_str());
    if (n_dims == 0 || n_dims > kMaxGgufDims)
      bad(what, item + ": " + std::to_string(n_dims) + " dimensions (1 to " + std::to_string(kMaxGgufDims) + " supported)");
    std::uint64_t numel = 1;
    // With a zero dimension numel is 0 whatever the others are, yet views
    // still multiply the other dimensions (row widths): bound their product too.
    std::uint64_t extent = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto v = r.read<std::uint64_t>(item.c_str());
      if (v > (1ull << 40)) bad(what, item + ": dimension " + std::to_string(v) + " is too large");
      numel = checked_mul(numel, v, what, item);
      extent = checked_mul(extent, std::max<std::uint64_t>(v, 1), what, item);
      t.ne.push_back(static_cast<std::int64_t>(v));
    }
    if (numel > (1ull << 50) || extent > (1ull << 58))
      bad(what, item + ": " + std::to_string(numel) + " elements (extent " + std::to_string(extent) + ") are too many");
    const auto type_id = r.read<std::uint32_t>(item.c_str());
    const auto tr = quant::ggml_type_traits(type_id);
    if (!tr) bad(what, item + ": unknown or unsupported ggml type " + std::to_string(type_id));
    t.type = static_cast<quant::GgmlType>(type_id);
    if (t.ne[0] % tr->block_size != 0)
      bad(what, item + ": a row of " + std::to_string(t.ne[0]) + " elements is not a whole number of " +
                    std::string(tr->name) + " blocks (" + std::to_string(tr->block_size) + ")");
    t.nbytes = numel / static_cast<std::uint64_t>(tr->block_size) * tr->type_size;
    t.offset = r.read<std::uint64_t>(item.c_str());
    if (t.offset % c.alignment != 0)
      bad(what, item + ": offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                    std::to_string(c.alignment));
    c.tensors.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const std::uint64_t end_of_infos = r.pos();
  const std::uint64_t pad = (c.alignment - end_of_infos % c.alignment) % c.alignment;
  if (!c.tensors.empty() && pad > r.left())
    bad(what, "file ends before its data section (at byte " + std::to_string(end_of_infos + pad) + ")");
  const std::uint64_t data_begin = std::min<std::uint64_t>(end_of_infos + pad, file.size());
  const std::uint64_t data_len = file.size() - data_begin;
  for (GgufTensor& t : c.tensors) {
    if (t.offset > data_len || t.nbytes > data_len - t.offset)
      bad(what, "tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) +
                    ") lies outside the data section (" + std::to_string(data_len) + " bytes)");
    t.data = file.data() + data_begin + t.offset;
  }
  // Every non-empty range must start at or after the furthest end seen so far.
  std::vector<const GgufTensor*> order;
  for (const GgufTensor& t : c.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const GgufTensor* a, const GgufTensor* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->nbytes < b->nbytes;
  });
  const GgufTensor* furthest = nullptr;
  for (const GgufTensor* t : order) {
    if (t->nbytes == 0) continue;
    if (furthest && t->offset < furthest->offset + furthest->nbytes)
      bad(what, "tensors '" + furthest->name + "' and '" + t->name + "' overlap");
    if (!furthest || t->offset + t->nbytes > furthest->offset + furthest->nbytes) furthest = t;
  }
  return c;
}

bool is_gguf_path(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext == ".gguf";
}

GgufFile::GgufFile(const std::filesystem::path& path) : file_(require_regular_file(path)) {
  contents_ = parse_gguf(file_.bytes(), path.string());
}

}  // namespace neuron::io
