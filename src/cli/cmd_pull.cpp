// `neuron pull <id>`: downloads a model from the Hugging Face hub into the
// shared cache (HF_HOME / HF_HUB_CACHE), the way the daemon does for an id it
// does not find there. Progress goes to stderr, the snapshot directory to stdout.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "cli/command.hpp"
#include "io/hub_download.hpp"
#include "util/error.hpp"

namespace neuron::cli {
namespace {

struct PullArgs {
  std::string id;
  std::string revision;
  std::string quant;
};

Run setup_pull(CLI::App& sub) {
  auto a = std::make_shared<PullArgs>();
  sub.add_option("id", a->id, "Hugging Face model id: org/name[@revision]")->required();
  sub.add_option("--revision", a->revision, "Branch, tag or commit (default main)");
  sub.add_option("--quant", a->quant, "Fetch the one GGUF file whose name contains this (e.g. Q4_K_M) instead of safetensors");
  sub.footer("Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN, HF_HUB_OFFLINE, HF_HOME / HF_HUB_CACHE.");
  return [a]() {
    std::string ref = a->id;
    if (!a->revision.empty()) {
      if (ref.find('@') != std::string::npos) fail(errc::invalid_argument, "give the revision either after '@' or with --revision, not both");
      ref += "@" + a->revision;
    }
    const std::optional<std::string> quant = a->quant.empty() ? std::nullopt : std::optional<std::string>(a->quant);
    const io::HubClient hub(io::HubOptions::from_env());
    spdlog::set_level(spdlog::level::warn);  // the progress line below says it all
    auto last = std::chrono::steady_clock::now() - std::chrono::seconds(10);
    std::int64_t last_files = -1;
    const auto progress = [&](const io::TransferProgress& p) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::seconds(1) && p.files_done == last_files && p.files_done != p.files_total) return;
      last = now;
      last_files = p.files_done;
      const double pct = p.bytes_total > 0 ? 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 0;
      std::fprintf(stderr, "%s: %5.1f%%  %s of %s, %lld of %lld files\n", ref.c_str(), pct, io::format_bytes(p.bytes_done).c_str(),
                   io::format_bytes(p.bytes_total).c_str(), static_cast<long long>(p.files_done),
                   static_cast<long long>(p.files_total));
    };
    const auto dir = io::pull_model(ref, quant, hub, progress);
    std::printf("%s\n", dir.string().c_str());
    return 0;
  };
}

NEURON_COMMAND(pull, "Download a model from the Hugging Face hub into the local cache", setup_pull);

}  // namespace
}  // namespace neuron::cli
