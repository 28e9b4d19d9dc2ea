#include "server/model_spec.hpp"

#include <cctype>

#include <sstream>

#include "engine/model_task.hpp"
#include "server/api_error.hpp"
#include "server/keep_alive.hpp"
#include "util/json_parse.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;

const json* spec_field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

int small_int(const json& v, const std::string& name, int lo, int hi) {
  if (!v.is_number_integer()) throw FieldError(name, "'" + name + "' must be an integer");
  if (v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)
                             : (v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi))
    throw FieldError(name, "'" + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + v.dump());
  return static_cast<int>(v.get<std::int64_t>());
}

// "scheme:org/name" -> "org/name" for the schemes this node has a source for
// (as the gateway's ModelSourceId parses it: the first ':' ends the scheme).
// huggingface: must be followed by org/name; another word before a ':' is a
// scheme only when org/name follows ("helexa:Org/Name"), so a folder named
// "dir:with:colons" or a path "/srv/a:b/qwen" stays an id.
std::string without_scheme(const std::string& id) {
  const auto colon = id.find(':');
  if (colon == std::string::npos || colon == 0 || id.find('/') < colon) return id;
  const std::string scheme = id.substr(0, colon), rest = id.substr(colon + 1);
  for (char c : scheme)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return id;
  const bool org_name = rest.find('/') != std::string::npos && rest.find(':') == std::string::npos;
  if (scheme != kDefaultSourceScheme && !org_name) return id;
  if (scheme != kDefaultSourceScheme)
    throw FieldError("model_id", "no source for the registry scheme '" + scheme + "' on this node (it loads " +
                                     kDefaultSourceScheme + ":org/name, Hugging Face ids and folders under --models-dir)");
  const auto slash = rest.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == rest.size() || rest.find(':') != std::string::npos)
    throw FieldError("model_id", "'" + id + "' must be " + kDefaultSourceScheme + ":org/name");
  return rest;
}

}  // namespace

bool known_harness(const std::string& name) {
  for (const char* h : kHarnesses)
    if (name == h) return true;
  return false;
}

LoadRequest parse_load_request(const json& body) {
  LoadRequest r;
  const json* id = spec_field(body, "model_id");
  if (!id) id = spec_field(body, "model");  // OpenAI-style name, for convenience
  if (!id) throw FieldError("model_id", "'model_id' is required");
  if (!id->is_string()) throw FieldError("model_id", "'model_id' must be a string");
  r.spec.model_id = id->get<std::string>();
  if (r.spec.model_id.empty()) throw FieldError("model_id", "'model_id' must not be empty");
  for (char c : r.spec.model_id)
    if (static_cast<unsigned char>(c) < 0x20) throw FieldError("model_id", "'model_id' must not contain control characters");
  r.spec.model_id = without_scheme(r.spec.model_id);
  if (const json* tp = spec_field(body, "tensor_parallel")) r.spec.tensor_parallel = small_int(*tp, "tensor_parallel", 1, 64);
  if (const json* ep = spec_field(body, "expert_parallel")) {
    if (!ep->is_boolean()) throw FieldError("expert_parallel", "'expert_parallel' must be a boolean");
    r.spec.expert_parallel = ep->get<bool>();
  }
  if (const json* devices = spec_field(body, "devices")) {
    if (!devices->is_array()) throw FieldError("devices", "'devices' must be an array of CUDA ordinals");
    for (std::size_t i = 0; i < devices->size(); ++i)
      r.spec.devices.push_back(small_int((*devices)[i], "devices[" + std::to_string(i) + "]", 0, 1023));
  }
  if (const json* device = spec_field(body, "device")) {
    if (!device->is_string()) throw FieldError("device", "'device' must be a string (\"cpu\", \"cuda\" or \"cuda:N\")");
    r.spec.device = device->get<std::string>();
  }
  if (const json* quant = spec_field(body, "quant")) {
    if (!quant->is_string()) throw FieldError("quant", "'quant' must be a string or null");
    r.spec.quant = quant->get<std::string>();
  }
  for (const char* name : {"task", "pooling"}) {
    const json* v = spec_field(body, name);
    if (!v) continue;
    if (!v->is_string()) throw FieldError(name, std::string("'") + name + "' must be a string");
    std::string value = v->get<std::string>();
    if (std::string_view(name) == "task") {
      if (!engine::parse_task(value)) throw FieldError(name, "'task' must be generate, embed or rerank");
      r.spec.task = std::move(value);
    } else {
      if (!engine::parse_pooling(value)) throw FieldError(name, "'pooling' must be " + std::string(engine::kPoolingNames));
      r.spec.pooling = std::move(value);
    }
  }
  if (const json* mc = spec_field(body, "max_context")) r.spec.max_context = small_int(*mc, "max_context", 0, 1 << 24);
  if (const json* keep_alive = spec_field(body, "keep_alive")) {
    try {
      r.spec.keep_alive = parse_keep_alive_json(*keep_alive);
    } catch (const Error& e) {
      throw FieldError("keep_alive", e.what());
    }
  }
  if (const json* name = spec_field(body, "served_model_name")) {
    if (!name->is_string() || name->get_ref<const std::string&>().empty())
      throw FieldError("served_model_name", "'served_model_name' must be a non-empty string");
    r.spec.served_name = name->get<std::string>();
    if (r.spec.served_name.size() > 256) throw FieldError("served_model_name", "'served_model_name' is longer than 256 bytes");
    for (char c : r.spec.served_name)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        throw FieldError("served_model_name", "'served_model_name' must not contain control characters");
  }
  if (const json* harness = spec_field(body, "harness")) {
    if (!harness->is_string()) throw FieldError("harness", "'harness' must be a string");
    r.harness = harness->get<std::string>();
  }
  if (const json* wait = spec_field(body, "wait")) {
    if (!wait->is_boolean()) throw FieldError("wait", "'wait' must be a boolean");
    r.wait = wait->get<bool>();
  }
  return r;
}

engine::ModelSpec parse_model_spec_text(const std::string& text) {
  try {
    if (!text.empty() && text.front() == '{') {
      const json j = parse_json(text, "model spec JSON");
      if (!j.is_object()) fail(errc::invalid_argument, "model spec JSON must be an object");
      return parse_load_request(j).spec;
    }
    json j = json::object();
    std::string id = text;
    // Options follow the first ':' that is followed by `key=`, so an id or path
    // that itself contains ':' still works, and so does a value with one
    // (`device=cuda:0`).
    auto options_colon = [&text]() -> std::size_t {
      for (auto c = text.find(':'); c != std::string::npos; c = text.find(':', c + 1)) {
        std::size_t k = c + 1;
        while (k < text.size() && (std::isalpha(static_cast<unsigned char>(text[k])) || text[k] == '_')) ++k;
        if (k > c + 1 && k < text.size() && text[k] == '=') return c;
      }
      return std::string::npos;
    };
    if (auto colon = options_colon(); colon != std::string::npos) {
      id = text.substr(0, colon);
      std::stringstream ss(text.substr(colon + 1));
      for (std::string item; std::getline(ss, item, ',');) {
        auto eq = item.find('=');
        if (eq == std::string::npos) fail(errc::invalid_argument, "model spec option '" + item + "' must be key=value");
        std::string key = item.substr(0, eq), value = item.substr(eq + 1);
        auto as_int = [&](const std::string& name) {
          try {
            std::size_t used = 0;
            long v = std::stol(value, &used);
            if (used == value.size()) return json(v);
          } catch (const std::exception&) {
          }
          fail(errc::invalid_argument, "model spec option '" + name + "' must be an integer, got '" + value + "'");
        };
        if (key == "tp" || key == "tensor_parallel") j["tensor_parallel"] = as_int("tensor_parallel");
        else if (key == "ep" || key == "expert_parallel") {
          if (value != "true" && value != "false" && value != "1" && value != "0")
            fail(errc::invalid_argument, "model spec option 'expert_parallel' must be true or false, got '" + value + "'");
          j["expert_parallel"] = value == "true" || value == "1";
        }
        else if (key == "device") j["device"] = value;
        else if (key == "quant") j["quant"] = value;
        else if (key == "task") j["task"] = value;
        else if (key == "pooling") j["pooling"] = value;
        else if (key == "max_context") j["max_context"] = as_int("max_context");
        else if (key == "keep_alive") j["keep_alive"] = value;
        else if (key == "name" || key == "served_model_name") j["served_model_name"] = value;
        else if (key == "devices") {
          json list = json::array();
          std::stringstream ds(value);
          for (std::string d; std::getline(ds, d, '+');) {
            value = d;
            list.push_back(as_int("devices"));
          }
          j["devices"] = list;
        } else {
          fail(errc::invalid_argument, "unknown model spec option '" + key + "' (known: tp, ep, device, devices, quant, max_context, keep_alive, name)");
        }
      }
    }
    j["model_id"] = id;
    return parse_load_request(j).spec;
  } catch (const FieldError& e) {
    fail(errc::invalid_argument, "model spec '" + text + "': " + e.what());
  }
}

}  // namespace neuron::server
