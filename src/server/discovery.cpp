#include "server/discovery.hpp"

#include "model/arch/family.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "backend/device.hpp"
#include "server/model_spec.hpp"
#include "util/json_parse.hpp"

namespace neuron::server {
namespace {

std::string read_file(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The value of `key` in a "key: value" (/proc/cpuinfo) or "KEY=value" (/etc/os-release) listing.
std::string kv_field(const std::string& text, const std::string& key, char sep) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    auto at = line.find(sep, key.size());
    if (at == std::string::npos || line.find_first_not_of(" \t", key.size()) != at) continue;
    auto start = line.find_first_not_of(" \t", at + 1);
    std::string value = start == std::string::npos ? std::string{} : line.substr(start);
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
    return value;
  }
  return {};
}

nlohmann::json optional_string(const std::optional<std::string>& s) { return s ? nlohmann::json(*s) : nlohmann::json(nullptr); }

// max_position_embeddings of a model folder's config.json (or its text_config's); 0 when unreadable.
std::int64_t max_positions(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir / "config.json", ec)) return 0;
  try {
    const nlohmann::json c = parse_json(read_file((dir / "config.json").c_str()), "config.json");
    for (const nlohmann::json* j : {&c, c.contains("text_config") ? &c["text_config"] : nullptr}) {
      if (j && j->is_object() && j->contains("max_position_embeddings") && (*j)["max_position_embeddings"].is_number_integer())
        return (*j)["max_position_embeddings"].get<std::int64_t>();
    }
  } catch (const std::exception&) {
    // Not a config we can read: this folder says nothing.
  }
  return 0;
}

}  // namespace

std::int64_t max_prompt_tokens_under(const std::vector<std::filesystem::path>& roots) {
  std::int64_t best = 0;
  for (const auto& root : roots) {
    std::error_code ec;
    for (const auto& top : std::filesystem::directory_iterator(root, ec)) {
      if (!top.is_directory(ec)) continue;
      best = std::max(best, max_positions(top.path()) - 1);
      for (const auto& sub : std::filesystem::directory_iterator(top.path(), ec))  // org/name
        if (sub.is_directory(ec)) best = std::max(best, max_positions(sub.path()) - 1);
    }
  }
  return best;
}

nlohmann::json discover(const std::filesystem::path& nvidia_driver) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  utsname uts{};
  const bool have_uts = ::uname(&uts) == 0;
  std::string os = kv_field(read_file("/etc/os-release"), "PRETTY_NAME", '=');
  if (os.empty() && have_uts) os = uts.sysname;
  const MemInfo mem = read_meminfo();
  const long online = sysconf(_SC_NPROCESSORS_ONLN);

  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : backend::cuda_devices())
    devices.push_back({{"index", d.index},
                       {"name", d.name},
                       {"vram_total_mb", d.total_bytes >> 20},
                       {"compute_capability", d.compute_capability}});
  nlohmann::json out = {
      {"hostname", host},
      {"os", os},
      {"kernel", have_uts ? std::string(uts.release) : std::string{}},
      {"cuda_version", optional_string(backend::cuda_runtime_version())},
      {"driver_version", optional_string(backend::cuda_driver_version())},
      {"devices", devices},
      {"harnesses", std::vector<std::string>(std::begin(kHarnesses), std::end(kHarnesses))},
      {"architectures", model::supported_model_types()},  // the model families this node loads (model/arch)
      // Extra fields (the contract allows them): the host's CPUs and memory, and our version.
      {"cpu",
       {{"model", kv_field(read_file("/proc/cpuinfo"), "model name", ':')},
        {"logical_cores", online > 0 ? online : 0},
        {"usable_threads", std::thread::hardware_concurrency()}}},
      {"memory", {{"total_bytes", mem.total_bytes}, {"available_bytes", mem.available_bytes}}},
      {"version", NEURON_VERSION}};
  std::error_code ec;
  if (devices.empty() && std::filesystem::exists(nvidia_driver, ec)) {
    std::string driver = read_file(nvidia_driver.c_str());
    driver = driver.substr(0, driver.find('\n'));
    out["cuda_unavailable_reason"] = "the NVIDIA kernel driver is loaded (" + driver + ") but CUDA finds no usable device (" +
                                     backend::cuda_unavailable_reason() +
                                     "): a driver/library version mismatch wants a reboot; CUDA loads fail until then";
  }
  return out;
}

}  // namespace neuron::server
