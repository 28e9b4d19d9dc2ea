#include "server/discovery.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "backend/device.hpp"

#ifdef NEURON_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace neuron::server {
namespace {

std::string read_file(const char* path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string cpu_model() {
  std::istringstream in(read_file("/proc/cpuinfo"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto start = line.find_first_not_of(' ', colon + 1);
        return start == std::string::npos ? std::string{} : line.substr(start);
      }
    }
  }
  return {};
}

nlohmann::json gpus() {
  nlohmann::json list = nlohmann::json::array();
#ifdef NEURON_HAVE_CUDA
  int n = backend::cuda_device_count();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    list.push_back({{"index", i},
                    {"name", prop.name},
                    {"memory_total_bytes", static_cast<std::uint64_t>(prop.totalGlobalMem)},
                    {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)}});
  }
#endif
  return list;
}

nlohmann::json cuda_versions() {
#ifdef NEURON_HAVE_CUDA
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  auto fmt = [](int v) { return v > 0 ? std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10) : std::string{}; };
  return {{"runtime", fmt(runtime)}, {"driver", fmt(driver)}};
#else
  return nullptr;
#endif
}

}  // namespace

nlohmann::json discover() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  const MemInfo mem = read_meminfo();
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return {{"host", host},
          {"cpu", {{"model", cpu_model()}, {"logical_cores", online > 0 ? online : 0}, {"usable_threads", std::thread::hardware_concurrency()}}},
          {"memory", {{"total_bytes", mem.total_bytes}, {"available_bytes", mem.available_bytes}}},
          {"gpus", gpus()},
          {"cuda", cuda_versions()},
          {"version", NEURON_VERSION}};
}

}  // namespace neuron::server
