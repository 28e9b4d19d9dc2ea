#include "server/activation.hpp"

#include <algorithm>

namespace neuron::server {

void Activation::expect(const std::string& model_id) {
  std::lock_guard lock(mu_);
  if (std::find(expected_.begin(), expected_.end(), model_id) == expected_.end()) expected_.push_back(model_id);
}

void Activation::close_startup() {
  std::lock_guard lock(mu_);
  startup_open_ = false;
  // Outcomes of loads that were not startup models (an early POST /models/load) are not ours to keep.
  for (auto it = outcomes_.begin(); it != outcomes_.end();) {
    if (std::find(expected_.begin(), expected_.end(), it->first) == expected_.end()) it = outcomes_.erase(it);
    else ++it;
  }
  ended_.notify_all();
}

void Activation::load_ended(const engine::ModelInfo& info) {
  std::lock_guard lock(mu_);
  const bool expected = std::find(expected_.begin(), expected_.end(), info.model_id) != expected_.end();
  // A startup model's first outcome is its pre-warm's; later reloads or loads of it are not.
  if ((!expected && !startup_open_) || outcomes_.count(info.model_id)) return;
  Outcome o;
  o.ok = info.status == engine::ModelStatus::loaded;
  if (!o.ok) o.error = info.error_kind + ": " + info.error_message;
  outcomes_.emplace(info.model_id, std::move(o));
  ended_.notify_all();
}

bool Activation::ready() const {
  return !startup_open_ &&
         std::all_of(expected_.begin(), expected_.end(), [this](const std::string& id) { return outcomes_.count(id) > 0; });
}

bool Activation::wait_ready(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return ended_.wait_for(lock, timeout, [this] { return ready(); });
}

nlohmann::json Activation::to_json(const std::vector<engine::ModelInfo>& models,
                                   std::string (*name_of)(const engine::ModelInfo&)) const {
  std::lock_guard lock(mu_);
  nlohmann::json pending = nlohmann::json::array(), completed = nlohmann::json::array(), failed = nlohmann::json::array();
  nlohmann::json in_progress = nullptr;
  for (const auto& id : expected_) {
    const auto m = std::find_if(models.begin(), models.end(), [&](const engine::ModelInfo& i) { return i.model_id == id; });
    engine::ModelInfo bare;
    bare.model_id = id;
    const std::string name = name_of(m != models.end() ? *m : bare);
    if (auto it = outcomes_.find(id); it != outcomes_.end()) {
      if (it->second.ok) completed.push_back(name);
      else failed.push_back({{"model_id", name}, {"error", it->second.error}});
    } else if (m != models.end() && m->status == engine::ModelStatus::loading && !m->queued && in_progress.is_null()) {
      in_progress = name;
    } else {
      pending.push_back(name);
    }
  }
  const bool warming = !pending.empty() || !in_progress.is_null();
  return {{"state", warming ? "pre_warming" : "ready"},
          {"pending", pending},
          {"in_progress", in_progress},
          {"completed", completed},
          {"failed", failed}};
}

}  // namespace neuron::server
