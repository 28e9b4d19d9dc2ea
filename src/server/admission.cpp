#include "server/admission.hpp"

#include <algorithm>

#include "server/api_error.hpp"
#include "util/retry_later.hpp"

namespace neuron::server {
namespace {

// A refused request's Retry-After: a place frees when one of the held requests ends.
constexpr auto kRetryAfter = std::chrono::seconds(1);

}  // namespace

Admission::Admission(AdmissionOptions options) : options_(options) {}

std::size_t Admission::per_principal(std::size_t capacity) const {
  const std::size_t share = options_.per_principal > 0 ? options_.per_principal : capacity / 4;
  return std::clamp<std::size_t>(share, 1, std::max<std::size_t>(capacity, 1));
}

std::size_t Admission::anon_ceiling(std::size_t capacity) const {
  const std::size_t kept = per_principal(capacity);
  return capacity > kept ? capacity - kept : 1;
}

std::unique_ptr<Admission::Ticket> Admission::enter(const std::string& model, const std::optional<std::string>& principal,
                                                    std::size_t sequences, std::size_t capacity) {
  std::lock_guard lock(mu_);
  Model& m = models_[model];
  if (principal) {
    std::size_t& held = m.by_principal[*principal];
    const std::size_t share = per_principal(capacity);
    if (held + sequences > share) {
      const std::size_t holds = held;  // `held` dies with its entry below
      if (holds == 0) m.by_principal.erase(*principal);
      ++m.rejected_per_principal;
      throw RetryLaterError(http_errc::rate_limit_exceeded,
                            "too many concurrent requests for this key on model " + model + ": it holds " + std::to_string(holds) +
                                " of its share of " + std::to_string(share) + " sequences; retry shortly",
                            kRetryAfter);
    }
    held += sequences;
  } else {
    const std::size_t ceiling = anon_ceiling(capacity);
    if (m.anonymous + sequences > ceiling) {
      ++m.rejected_anon_yield;
      throw RetryLaterError(errc::overloaded,
                            "model " + model + " has no capacity left for anonymous requests (" + std::to_string(m.anonymous) +
                                " of " + std::to_string(ceiling) + " sequences held; the rest is kept for identified callers); retry shortly",
                            kRetryAfter);
    }
    m.anonymous += sequences;
  }
  return std::make_unique<Ticket>(*this, model, principal, sequences);
}

void Admission::release(const std::string& model, const std::optional<std::string>& principal, std::size_t sequences) {
  std::lock_guard lock(mu_);
  auto it = models_.find(model);
  if (it == models_.end()) return;  // never: a ticket's model stays counted while it lives
  Model& m = it->second;
  if (principal) {
    auto p = m.by_principal.find(*principal);
    if (p == m.by_principal.end()) return;
    p->second -= std::min(p->second, sequences);
    if (p->second == 0) m.by_principal.erase(p);
  } else {
    m.anonymous -= std::min(m.anonymous, sequences);
  }
}

AdmissionCounts Admission::counts(const std::string& model, std::size_t capacity) const {
  std::lock_guard lock(mu_);
  AdmissionCounts c;
  c.anon_max_in_flight = anon_ceiling(capacity);
  auto it = models_.find(model);
  if (it == models_.end()) return c;
  c.anon_in_flight = it->second.anonymous;
  c.rejected_per_principal = it->second.rejected_per_principal;
  c.rejected_anon_yield = it->second.rejected_anon_yield;
  return c;
}

std::optional<std::string> principal_of(const std::string& account_id, const std::string& key_id) {
  if (account_id.empty() || key_id.empty()) return std::nullopt;
  return account_id + "/" + key_id;
}

}  // namespace neuron::server
