// neuron tokenize: a model's tokenizer from the command line.
//   neuron tokenize --model DIR --text T [--json]   ids, space separated, or {"tokens": [...], "count": n}
//   neuron tokenize --model DIR --bench [--bench-mb N]   load time and encode throughput (JSON)
#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"

namespace neuron::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  std::string text;
  bool json = false;
  bool bench = false;
  double bench_mb = 4.0;
  std::string bench_text_out;
};

fs::path tokenizer_path(const std::string& model) {
  const fs::path p(model);
  if (fs::is_directory(p)) return p / "tokenizer.json";
  if (fs::is_regular_file(p)) return p;
  fail(errc::not_found, "model directory not found: " + model);
}

// Deterministic text mixing what a tokenizer meets in practice: English prose,
// code, CJK, Cyrillic, emoji and numbers, in paragraphs of varying kinds.
std::string bench_corpus(std::size_t bytes) {
  static const char* const kProse[] = {
      "The committee reviewed the proposal carefully before it reached a decision. ",
      "However, several members wondered whether the budget was realistic, and they said so. ",
      "In 1987, researchers at the institute published 42 papers on distributed systems. ",
      "She'll arrive at 9:30 tomorrow; we're planning a short meeting afterwards. ",
  };
  static const char* const kCode[] = {
      "def parse(line):\n    key, _, value = line.partition('=')\n    return key.strip(), value.strip()\n\n",
      "for (std::size_t i = 0; i < n; ++i) {\n\tacc += weights[i] * inputs[i];\n}\n",
      "{\"id\": 1234, \"name\": \"widget\", \"tags\": [\"a\", \"b\"], \"price\": 19.99}\n",
  };
  static const char* const kOther[] = {
      "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
      "東京は日本の首都であり、世界最大の都市圏の一つです。",
      "Машинное обучение изучает методы построения алгоритмов. ",
      "Great job 👍🏽🎉 see you soon 😀🚀 ",
      "3.14159 2.71828 1,000,000 0x7FFF 2026-12-02 ",
  };
  std::mt19937 rng(20261202);
  std::string out;
  out.reserve(bytes + 256);
  while (out.size() < bytes) {
    switch (rng() % 4) {
      case 0: case 1: out += kProse[rng() % std::size(kProse)]; break;
      case 2: out += kCode[rng() % std::size(kCode)]; break;
      default: out += kOther[rng() % std::size(kOther)]; break;
    }
    if (rng() % 8 == 0) out += "\n\n";
  }
  return out;
}

int run_bench(const Options& o) {
  const fs::path path = tokenizer_path(o.model);
  const auto t0 = Clock::now();
  const std::clock_t c0 = std::clock();
  const auto tok = tokenizer::Tokenizer::from_file(path);
  // CPU time too: loading is single-threaded, so on a busy machine it is the
  // better estimate of the uncontended wall time.
  const double load_cpu_ms = 1000.0 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  const double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const std::string text = bench_corpus(static_cast<std::size_t>(o.bench_mb * 1024 * 1024));
  if (!o.bench_text_out.empty()) {
    std::FILE* f = std::fopen(o.bench_text_out.c_str(), "wb");
    if (f == nullptr) fail(errc::io, "cannot write " + o.bench_text_out);
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok) fail(errc::io, "cannot write " + o.bench_text_out);
  }
  double best_s = 1e30, best_cpu_s = 1e30;
  std::size_t n_tokens = 0;
  for (int rep = 0; rep < 3; ++rep) {  // the first run also fills the word cache
    const auto t = Clock::now();
    const std::clock_t c = std::clock();
    n_tokens = tok.encode(text).size();
    best_cpu_s = std::min(best_cpu_s, static_cast<double>(std::clock() - c) / CLOCKS_PER_SEC);
    best_s = std::min(best_s, std::chrono::duration<double>(Clock::now() - t).count());
  }
  // The same text as 4 KiB requests (cut at character boundaries), the size
  // of a typical prompt: per-call overhead shows here, not in one huge call.
  std::vector<std::string_view> chunks;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = std::min(text.size(), at + 4096);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    chunks.push_back(std::string_view(text).substr(at, end - at));
    at = end;
  }
  double chunked_cpu_s = 1e30;
  std::size_t chunked_tokens = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const std::clock_t c = std::clock();
    chunked_tokens = 0;
    for (std::string_view chunk : chunks) chunked_tokens += tok.encode(chunk).size();
    chunked_cpu_s = std::min(chunked_cpu_s, static_cast<double>(std::clock() - c) / CLOCKS_PER_SEC);
  }
  const nlohmann::json j = {{"tokenizer", path.string()},
                            {"load_ms", load_ms},
                            {"load_cpu_ms", load_cpu_ms},
                            {"text_bytes", text.size()},
                            {"tokens", n_tokens},
                            {"encode_s", best_s},
                            {"encode_mb_s", static_cast<double>(text.size()) / best_s / 1e6},
                            {"encode_cpu_mb_s", static_cast<double>(text.size()) / best_cpu_s / 1e6},
                            {"tokens_per_s", static_cast<double>(n_tokens) / best_s},
                            {"chunks_4k", chunks.size()},
                            {"chunked_tokens", chunked_tokens},
                            {"chunked_cpu_mb_s", static_cast<double>(text.size()) / chunked_cpu_s / 1e6}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

Run setup_tokenize(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("--model", o->model, "model directory holding tokenizer.json (or the file itself)")->required();
  CLI::Option* text = sub.add_option("--text", o->text, "text to tokenize");
  sub.add_flag("--json", o->json, "print {\"tokens\": [...], \"count\": n}");
  sub.add_flag("--bench", o->bench, "measure load time and encode throughput on generated mixed text");
  sub.add_option("--bench-mb", o->bench_mb, "size of the generated text for --bench, in MiB")->check(CLI::Range(0.001, 1024.0));
  sub.add_option("--bench-text-out", o->bench_text_out, "also write the generated --bench text to this file");
  return [o, text]() -> int {
    if (o->bench) return run_bench(*o);
    if (text->count() == 0) fail(errc::invalid_argument, "tokenize needs --text (or --bench)");
    const auto tok = tokenizer::Tokenizer::from_file(tokenizer_path(o->model));
    const auto ids = tok.encode(o->text);
    if (o->json) {
      const nlohmann::json j = {{"tokens", ids}, {"count", ids.size()}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::string line;
      for (std::size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
      std::printf("%s\n", line.c_str());
    }
    return 0;
  };
}

}  // namespace

NEURON_COMMAND(tokenize, "Tokenize text with a model's tokenizer", setup_tokenize);

}  // namespace neuron::cli
