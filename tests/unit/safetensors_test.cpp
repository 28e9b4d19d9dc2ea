// safetensors: the writer's files read back exactly, slices read only their
// elements, and every malformed file or index is refused with a message that
// names the problem (never a crash, never a read outside the file).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "io/safetensors.hpp"
#include "io/safetensors_writer.hpp"
#include "util/error.hpp"
#include "support/temp_dir.hpp"

namespace neuron::io {
namespace {

namespace fs = std::filesystem;

using test_support::TempDir;

// A file made of an 8-byte length, the header text and `data_bytes` bytes of data.
std::vector<std::byte> raw_file(const std::string& header, std::size_t data_bytes, std::uint64_t claimed_len = ~0ull) {
  const std::uint64_t len = claimed_len == ~0ull ? header.size() : claimed_len;
  std::vector<std::byte> out(8 + header.size() + data_bytes, std::byte{0});
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::byte>((len >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

void write_bytes(const fs::path& p, const std::vector<std::byte>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::byte> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// Runs `f`, expecting an Error of `kind` whose message contains every needle.
template <typename F>
void expect_error(F&& f, const std::string& kind, std::initializer_list<std::string> needles) {
  try {
    f();
    FAIL() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << e.what() << "' lacks '" << n << "'";
  }
}

void expect_bad_header(const std::string& header, std::size_t data_bytes, std::initializer_list<std::string> needles) {
  SCOPED_TRACE(header);
  auto bytes = raw_file(header, data_bytes);
  expect_error([&] { parse_safetensors(bytes, "bad.safetensors"); }, errc::bad_model, needles);
}

HostTensor f32_tensor(std::string name, std::vector<std::int64_t> shape, const std::vector<float>& values, DType dtype = DType::f32) {
  return {{std::move(name), dtype, std::move(shape)}, encode_values(values, dtype)};
}

std::vector<float> iota(std::size_t n, float start = 0.0f) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

TEST(SafetensorsWriter, RoundTripsAllDtypes) {
  TempDir dir;
  const auto a = iota(12, -5.0f);                                      // small integers: exact in every dtype
  const std::vector<float> b = {0.5f, -1.25f, 3.0f, 1024.0f, 0.0f, -0.0f};
  write_safetensors(dir / "m.safetensors", {f32_tensor("a", {3, 4}, a, DType::f32), f32_tensor("b", {6}, b, DType::bf16),
                                            f32_tensor("c", {2, 3}, b, DType::f16), f32_tensor("empty", {0, 7}, {}, DType::bf16),
                                            f32_tensor("scalar", {}, {7.5f}, DType::f32)});
  SafetensorsFile f(dir / "m.safetensors");
  ASSERT_EQ(f.tensors().size(), 5u);
  const TensorView* va = f.find("a");
  ASSERT_NE(va, nullptr);
  EXPECT_EQ(va->dtype(), DType::f32);
  EXPECT_EQ(va->shape(), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(va->to_f32(), a);
  EXPECT_EQ(f.find("b")->dtype(), DType::bf16);
  EXPECT_EQ(f.find("b")->to_f32(), b);
  EXPECT_EQ(f.find("c")->dtype(), DType::f16);
  EXPECT_EQ(f.find("c")->shape_string(), "[2, 3]");
  EXPECT_EQ(f.find("c")->to_f32(), b);
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_EQ(f.find("scalar")->to_f32(), std::vector<float>{7.5f});
  EXPECT_EQ(f.find("nope"), nullptr);

  // Reference layout: the header is padded to 8 bytes so every tensor is aligned in the mmap.
  auto bytes = read_bytes(dir / "m.safetensors");
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<std::uint8_t>(bytes[static_cast<std::size_t>(i)]);
  EXPECT_EQ(len % 8, 0u);
  auto header = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data() + 8), len));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({0, 48}));
  EXPECT_EQ(header["b"]["dtype"], "BF16");
  EXPECT_EQ(bytes.size(), 8 + len + 48 + 12 + 12 + 0 + 4);
  EXPECT_FALSE(fs::exists(dir / "m.safetensors.tmp"));
}

TEST(SafetensorsWriter, StreamedValuesFollowEachTensorsDtype) {
  TempDir dir;
  {
    SafetensorsWriter w(dir / "s.safetensors", {{"x", DType::bf16, {3}}, {"y", DType::f32, {2}}, {"z", DType::f16, {2}}});
    const std::vector<float> all = {1, 2, 3, 4, 5, 6, 7};
    w.write_values(std::span(all).first(2));  // chunks need not follow tensor boundaries
    w.write_values(std::span(all).subspan(2));
    w.finish();
  }
  SafetensorsFile f(dir / "s.safetensors");
  EXPECT_EQ(f.find("x")->to_f32(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(f.find("y")->to_f32(), (std::vector<float>{4, 5}));
  EXPECT_EQ(f.find("z")->to_f32(), (std::vector<float>{6, 7}));
}

TEST(SafetensorsWriter, RefusesMisuseAndLeavesNoPartialFile) {
  TempDir dir;
  expect_error([&] { SafetensorsWriter(dir / "d.safetensors", {{"x", DType::f32, {1}}, {"x", DType::f32, {1}}}); },
               errc::invalid_argument, {"'x'", "twice"});
  expect_error([&] { SafetensorsWriter(dir / "n.safetensors", {{"x", DType::f32, {-1}}}); }, errc::invalid_argument, {"negative"});
  {
    SafetensorsWriter w(dir / "p.safetensors", {{"x", DType::f32, {2}}});
    std::vector<float> three = {1, 2, 3};
    expect_error([&] { w.write_values(three); }, errc::invalid_argument, {"past"});
    expect_error([&] { w.finish(); }, errc::invalid_argument, {"0 of 8"});
  }
  EXPECT_FALSE(fs::exists(dir / "p.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "p.safetensors.tmp"));
  expect_error([&] { write_safetensors(dir / "q.safetensors", {{{"x", DType::f32, {2}}, std::vector<std::byte>(4)}}); },
               errc::invalid_argument, {"'x'", "8"});
}

TEST(TensorView, RowAndColumnSlicesReadOnlyTheirElements) {
  TempDir dir;
  // w[r][c] = 10 r + c, 4 x 5, in every dtype.
  std::vector<float> w;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 5; ++c) w.push_back(static_cast<float>(10 * r + c));
  write_safetensors(dir / "w.safetensors", {f32_tensor("f32", {4, 5}, w, DType::f32), f32_tensor("bf16", {4, 5}, w, DType::bf16),
                                            f32_tensor("f16", {4, 5}, w, DType::f16), f32_tensor("vec", {6}, iota(6), DType::bf16)});
  SafetensorsFile f(dir / "w.safetensors");
  for (const char* name : {"f32", "bf16", "f16"}) {
    SCOPED_TRACE(name);
    const TensorView& t = *f.find(name);
    TensorView rows = t.rows(1, 3);
    EXPECT_EQ(rows.shape(), (std::vector<std::int64_t>{2, 5}));
    EXPECT_TRUE(rows.contiguous());
    EXPECT_EQ(rows.to_f32(), (std::vector<float>{10, 11, 12, 13, 14, 20, 21, 22, 23, 24}));
    TensorView cols = t.cols(2, 4);
    EXPECT_EQ(cols.shape(), (std::vector<std::int64_t>{4, 2}));
    EXPECT_FALSE(cols.contiguous());
    EXPECT_EQ(cols.to_f32(), (std::vector<float>{2, 3, 12, 13, 22, 23, 32, 33}));
    // A TP rank's block: rows then columns compose.
    EXPECT_EQ(t.rows(2, 4).cols(1, 3).to_f32(), (std::vector<float>{21, 22, 31, 32}));
    EXPECT_EQ(t.cols(4, 5).to_bf16().size(), 4u);
    EXPECT_EQ(bf16_to_f32(t.cols(4, 5).to_bf16()[3]), 34.0f);
    EXPECT_EQ(t.rows(2, 2).numel(), 0);
    expect_error([&] { t.rows(3, 5); }, errc::invalid_argument, {"[3, 5)", "[4, 5]"});
    expect_error([&] { t.cols(-1, 2); }, errc::invalid_argument, {"column"});
    expect_error([&] { t.cols(4, 3); }, errc::invalid_argument, {"column"});
  }
  const TensorView& vec = *f.find("vec");
  EXPECT_EQ(vec.rows(2, 5).to_f32(), (std::vector<float>{2, 3, 4}));
  expect_error([&] { vec.cols(0, 1); }, errc::invalid_argument, {"column"});
  std::vector<float> wrong(3);
  expect_error([&] { vec.to_f32(wrong); }, errc::invalid_argument, {"size"});
}

TEST(TensorView, ConvertsBetweenDtypes) {
  TempDir dir;
  const std::vector<float> v = {1.0f, -2.0f, 0.333333f, 65504.0f};
  write_safetensors(dir / "c.safetensors", {f32_tensor("f32", {4}, v, DType::f32), f32_tensor("f16", {4}, v, DType::f16)});
  SafetensorsFile f(dir / "c.safetensors");
  auto bf = f.find("f32")->to_bf16();
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(bf[i], f32_to_bf16(v[i]));
  auto from_f16 = f.find("f16")->to_f32();
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_EQ(from_f16[i], f16_to_f32(f32_to_f16(v[i])));
  EXPECT_NEAR(from_f16[2], 0.333333f, 1e-3);
}

TEST(SafetensorsReader, RejectsTruncatedFiles) {
  TempDir dir;
  write_safetensors(dir / "ok.safetensors", {f32_tensor("weight", {4, 4}, iota(16))});
  const auto good = read_bytes(dir / "ok.safetensors");
  EXPECT_NO_THROW(parse_safetensors(good, "ok"));
  // Cut inside the data, inside the header, inside the length prefix, and to nothing.
  const std::pair<std::size_t, const char*> cuts[] = {
      {good.size() - 1, "'weight'"}, {good.size() - 64, "'weight'"}, {20, "runs past the end"}, {5, "too short"}, {0, "too short"}};
  for (const auto& [size, needle] : cuts) {
    SCOPED_TRACE(size);
    std::vector<std::byte> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(size));
    write_bytes(dir / "cut.safetensors", cut);
    expect_error([&] { SafetensorsFile f(dir / "cut.safetensors"); }, errc::bad_model, {needle, "cut.safetensors"});
  }
}

TEST(SafetensorsReader, RejectsBadHeaders) {
  expect_bad_header("{not json", 0, {"not valid JSON"});
  expect_bad_header("[1, 2]", 0, {"not a JSON object"});
  expect_bad_header(R"({"__metadata__": 3})", 0, {"__metadata__"});
  expect_bad_header(R"({"w": 5})", 0, {"'w'", "not an object"});
  expect_bad_header(R"({"w": [1, 2]})", 0, {"'w'", "not an object"});
  expect_bad_header(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", 4, {"'w'", "dtype"});
  expect_bad_header(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4, {"'w'", "shape"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1]}})", 4, {"'w'", "data_offsets"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4, {"'w'", "data_offsets"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4, {"'w'", "data_offsets"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4, {"'w'", "shape"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4, {"'w'", "shape"});
  expect_bad_header(R"({"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8, {"'w'", "unsupported dtype I64"});
  expect_bad_header(R"({"w": {"dtype": 7, "shape": [1], "data_offsets": [0, 4]}})", 4, {"'w'", "dtype"});
}

TEST(SafetensorsReader, RejectsHeaderLengthPastTheFile) {
  auto bytes = raw_file("{}", 0, /*claimed_len=*/1000);
  expect_error([&] { parse_safetensors(bytes, "x"); }, errc::bad_model, {"header length 1000", "past the end"});
  auto huge = raw_file("{}", 0, /*claimed_len=*/~0ull - 1);
  expect_error([&] { parse_safetensors(huge, "x"); }, errc::bad_model, {"100 MiB"});
}

TEST(SafetensorsReader, RejectsBadOffsets) {
  // Out of range: 16 bytes claimed, 8 present.
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8, {"'w'", "outside the data section"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [18446744073709551612, 18446744073709551615]}})", 8,
                    {"'w'"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8, {"'w'", "end before"});
  // Shape and size disagree.
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 8]}})", 16, {"'w'", "need 16 bytes", "span 8"});
  expect_bad_header(R"({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 16]}})", 16, {"'w'", "need 8 bytes"});
  // Shapes whose element count overflows.
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 4]}})", 4, {"'w'"});
  expect_bad_header(R"({"w": {"dtype": "F32", "shape": [0, 1099511627776, 1099511627776], "data_offsets": [0, 0]}})", 4, {"'w'"});
  // Overlaps, including one hidden behind an empty tensor between the two.
  expect_bad_header(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                        "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
                    24, {"'a'", "'b'", "overlap"});
  expect_bad_header(R"({"a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},
                        "b": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]},
                        "c": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})",
                    32, {"'a'", "'c'", "overlap"});
  expect_bad_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                        "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                    8, {"overlap"});
  // Adjacent and empty tensors are fine.
  auto ok = raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]},
                         "b": {"dtype": "F16", "shape": [2], "data_offsets": [8, 12]}})",
                     12);
  EXPECT_EQ(parse_safetensors(ok, "ok").size(), 3u);
}

TEST(Checkpoint, MissingTensorIsNamed) {
  TempDir dir;
  write_safetensors(dir / "model.safetensors", {f32_tensor("present", {2}, {1, 2})});
  Checkpoint c = Checkpoint::open_dir(dir.path());
  EXPECT_EQ(c.tensor_count(), 1u);
  EXPECT_EQ(c.tensor("present").to_f32(), (std::vector<float>{1, 2}));
  EXPECT_EQ(c.find("absent"), nullptr);
  expect_error([&] { c.tensor("model.layers.0.mlp.up_proj.weight"); }, errc::not_found, {"'model.layers.0.mlp.up_proj.weight'"});
}

TEST(Checkpoint, OpensShardedIndex) {
  TempDir dir;
  write_safetensors(dir / "model-00001-of-00002.safetensors", {f32_tensor("a", {2}, {1, 2})});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {f32_tensor("b", {1}, {3}, DType::bf16)});
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 10}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";
  Checkpoint c = Checkpoint::open_dir(dir.path());
  EXPECT_EQ(c.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.tensor("b").to_f32(), std::vector<float>{3});
  EXPECT_EQ(c.files().size(), 2u);
  EXPECT_EQ(checkpoint_files(dir.path()), c.files());
}

TEST(Checkpoint, DuplicateTensorAcrossShards) {
  TempDir dir;
  write_safetensors(dir / "one.safetensors", {f32_tensor("dup", {1}, {1})});
  write_safetensors(dir / "two.safetensors", {f32_tensor("dup", {1}, {2}), f32_tensor("other", {1}, {3})});
  expect_error([&] { Checkpoint::open_files({dir / "one.safetensors", dir / "two.safetensors"}); }, errc::bad_model,
               {"'dup'", "more than one shard", "two.safetensors"});
}

TEST(Checkpoint, BadIndexFiles) {
  TempDir dir;
  write_safetensors(dir / "model-00001-of-00001.safetensors", {f32_tensor("a", {1}, {1})});
  auto index_with = [&](const std::string& text) {
    std::ofstream(dir / "model.safetensors.index.json", std::ios::trunc) << text;
  };
  for (const char* name : {"../model-00001-of-00001.safetensors", "sub/x.safetensors", "/etc/passwd", "..", "a\\\\b", ""}) {
    SCOPED_TRACE(name);
    index_with(std::string(R"({"weight_map": {"a": ")") + name + "\"}}");
    expect_error([&] { Checkpoint::open_dir(dir.path()); }, errc::bad_model, {"not a plain file name", "index.json"});
  }
  index_with(R"({"weight_map": {"a": "model\u0001.safetensors"}})");
  expect_error([&] { Checkpoint::open_dir(dir.path()); }, errc::bad_model, {"not a plain file name"});
  index_with("{broken");
  expect_error([&] { Checkpoint::open_dir(dir.path()); }, errc::bad_model, {"index.json", "not valid JSON"});
  index_with("[]");
  expect_error([&] { Checkpoint::open_dir(dir.path()); }, errc::bad_model, {"weight_map"});
  index_with(R"({"weight_map": {"a": 5}})");
  expect_error([&] { Checkpoint::open_dir(dir.path()); }, errc::bad_model, {"weight_map['a']"});
  index_with(R"({"weight_map": {}})");
  expect_error([&] { Checkpoint::open_dir(dir.path()); }, errc::bad_model, {"empty"});
  index_with(R"({"weight_map": {"a": "model-00009-of-00009.safetensors"}})");
  expect_error([&] { Checkpoint::open_dir(dir.path()); }, errc::not_found, {"model-00009-of-00009.safetensors"});
}

TEST(Checkpoint, WeightsThatAreNotRegularFilesAreABadModel) {
  // A directory, an endless device and a FIFO (whose open would block) where
  // model.safetensors or a shard should be: refused before any open or mmap.
  const auto make = [](const fs::path& p, int variant) {
    if (variant == 0) fs::create_directory(p);
    if (variant == 1) fs::create_symlink("/dev/zero", p);
    if (variant == 2) {
      ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
    }
  };
  const char* kinds[] = {"a directory", "a character device", "a FIFO"};
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(kinds[variant]);
    TempDir single;
    make(single / "model.safetensors", variant);
    expect_error([&] { Checkpoint::open_dir(single.path()); }, errc::bad_model, {"model.safetensors", kinds[variant], "regular file"});
    expect_error([&] { SafetensorsFile f(single / "model.safetensors"); }, errc::bad_model, {kinds[variant]});

    TempDir sharded;
    std::ofstream(sharded / "model.safetensors.index.json") << R"({"weight_map": {"a": "model-00001-of-00001.safetensors"}})";
    make(sharded / "model-00001-of-00001.safetensors", variant);
    expect_error([&] { Checkpoint::open_dir(sharded.path()); }, errc::bad_model, {"model-00001-of-00001.safetensors", kinds[variant]});

    TempDir index;
    make(index / "model.safetensors.index.json", variant);
    expect_error([&] { Checkpoint::open_dir(index.path()); }, errc::bad_model, {"index.json", kinds[variant]});
  }
}

TEST(Checkpoint, DirectoryWithoutWeights) {
  TempDir dir;
  expect_error([&] { Checkpoint::open_dir(dir.path()); }, errc::not_found, {"model.safetensors", dir.path().string()});
  expect_error([&] { Checkpoint::open_files({}); }, errc::invalid_argument, {"at least one"});
}

}  // namespace
}  // namespace neuron::io
