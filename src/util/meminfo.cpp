#include "util/meminfo.hpp"

#include <fstream>
#include <sstream>
#include <string>

namespace neuron {

MemInfo parse_meminfo(std::string_view text) {
  MemInfo m;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string key, unit;
    std::uint64_t value = 0;
    if (!(ls >> key >> value)) continue;
    ls >> unit;
    const std::uint64_t scale = unit == "kB" ? 1024 : 1;
    if (key == "MemTotal:") m.total_bytes = value * scale;
    else if (key == "MemAvailable:") m.available_bytes = value * scale;
  }
  return m;
}

MemInfo read_meminfo() {
  std::ifstream in("/proc/meminfo");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_meminfo(ss.str());
}

}  // namespace neuron
