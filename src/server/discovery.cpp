#include "server/discovery.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "backend/device.hpp"

namespace neuron::server {
namespace {

std::string read_file(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The value of `key` in a "key: value" (/proc/cpuinfo) or "KEY=value" (/etc/os-release) listing.
std::string field(const std::string& text, const std::string& key, char sep) {
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

}  // namespace

nlohmann::json discover() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  utsname uts{};
  const bool have_uts = ::uname(&uts) == 0;
  std::string os = field(read_file("/etc/os-release"), "PRETTY_NAME", '=');
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
      {"harnesses", {"neuron"}},
      // Extra fields (the contract allows them): the host's CPUs and memory, and our version.
      {"cpu",
       {{"model", field(read_file("/proc/cpuinfo"), "model name", ':')},
        {"logical_cores", online > 0 ? online : 0},
        {"usable_threads", std::thread::hardware_concurrency()}}},
      {"memory", {{"total_bytes", mem.total_bytes}, {"available_bytes", mem.available_bytes}}},
      {"version", NEURON_VERSION}};
  if (devices.empty()) out["cuda_unavailable_reason"] = backend::cuda_unavailable_reason();
  return out;
}

}  // namespace neuron::server
