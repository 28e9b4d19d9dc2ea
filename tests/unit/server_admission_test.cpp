// Admission per principal (server/admission.hpp): shares, the anonymous
// remainder, refusals with Retry-After, places given back by their tickets.
#include <gtest/gtest.h>

#include <functional>

#include "server/admission.hpp"
#include "server/api_error.hpp"
#include "util/retry_later.hpp"

namespace neuron::server {
namespace {

std::string refusal(const std::function<void()>& f, int* retry_after = nullptr) {
  try {
    f();
  } catch (const RetryLaterError& e) {
    if (retry_after) *retry_after = static_cast<int>(e.retry_after().count());
    return e.kind();
  }
  return "admitted";
}

TEST(Admission, OnePrincipalHoldsItsShareAnonymousCallersTheRest) {
  Admission admission;  // default share: a quarter of the capacity
  const std::size_t capacity = 8;
  EXPECT_EQ(admission.per_principal(capacity), 2u);
  EXPECT_EQ(admission.anon_ceiling(capacity), 6u);
  const std::optional<std::string> a = principal_of("acct-a", "key-1"), b = principal_of("acct-b", "key-1");
  auto a1 = admission.enter("m", a, 1, capacity);
  auto a2 = admission.enter("m", a, 1, capacity);
  int retry = 0;
  EXPECT_EQ(refusal([&] { admission.enter("m", a, 1, capacity); }, &retry), http_errc::rate_limit_exceeded);
  EXPECT_GE(retry, 1);
  EXPECT_EQ(classify(http_errc::rate_limit_exceeded, "").status, 429);
  auto b1 = admission.enter("m", b, 2, capacity);  // another key of its own share
  EXPECT_EQ(refusal([&] { admission.enter("other-model", a, 3, capacity); }), http_errc::rate_limit_exceeded) << "n choices count";
  auto other = admission.enter("other-model", a, 2, capacity);  // shares are per model
  std::vector<std::unique_ptr<Admission::Ticket>> anon;
  for (int i = 0; i < 6; ++i) anon.push_back(admission.enter("m", std::nullopt, 1, capacity));
  EXPECT_EQ(refusal([&] { admission.enter("m", std::nullopt, 1, capacity); }, &retry), errc::overloaded);
  EXPECT_GE(retry, 1);
  AdmissionCounts c = admission.counts("m", capacity);
  EXPECT_EQ(c.anon_in_flight, 6u);
  EXPECT_EQ(c.anon_max_in_flight, 6u);
  EXPECT_EQ(c.rejected_per_principal, 1u);
  EXPECT_EQ(c.rejected_anon_yield, 1u);
  // Tickets give their places back.
  a1.reset();
  EXPECT_EQ(refusal([&] { admission.enter("m", a, 1, capacity).reset(); }), "admitted");
  anon.pop_back();
  EXPECT_EQ(admission.counts("m", capacity).anon_in_flight, 5u);
  EXPECT_EQ(refusal([&] { admission.enter("m", std::nullopt, 1, capacity).reset(); }), "admitted");
}

TEST(Admission, PrincipalsNeedBothHeadersAndSharesHaveBounds) {
  EXPECT_EQ(principal_of("acct", "key"), "acct/key");
  EXPECT_FALSE(principal_of("acct", ""));
  EXPECT_FALSE(principal_of("", "key"));
  Admission one({.per_principal = 1});
  EXPECT_EQ(one.per_principal(4), 1u);
  EXPECT_EQ(one.anon_ceiling(4), 3u);
  EXPECT_EQ(one.per_principal(2), 1u);
  EXPECT_EQ(one.anon_ceiling(1), 1u) << "a one-seat model still serves anonymous callers";
  Admission big({.per_principal = 100});
  EXPECT_EQ(big.per_principal(8), 8u) << "never more than the whole capacity";
  EXPECT_EQ(big.anon_ceiling(8), 1u);
  Admission small;
  EXPECT_EQ(small.per_principal(3), 1u) << "at least one";
}

}  // namespace
}  // namespace neuron::server
