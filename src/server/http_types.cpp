#include "server/http_types.hpp"

#include <algorithm>
#include <cctype>

namespace neuron::server {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string find_header(const std::vector<std::pair<std::string, std::string>>& headers, std::string_view name) {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const { return find_header(headers, name); }
std::string HttpResponse::header(std::string_view name) const { return find_header(headers, name); }

}  // namespace neuron::server
