// Error kinds -> HTTP status, OpenAI type and envelope; routing 404/405.
#include <gtest/gtest.h>

#include "server/api_error.hpp"
#include "server/router.hpp"

namespace neuron::server {
namespace {

HttpRequest make_request(std::string method, std::string path) {
  HttpRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  return r;
}

TEST(ServerApiError, MapsKindsToStatuses) {
  struct Case {
    const char* kind;
    int status;
  };
  const Case cases[] = {{errc::invalid_argument, 400},        {errc::context_length_exceeded, 400},
                        {errc::bad_tensor_parallel, 400},     {errc::unsupported_arch, 400},
                        {http_errc::unauthorized, 401},       {errc::not_found, 404},
                        {http_errc::model_not_found, 404},    {http_errc::method_not_allowed, 405},
                        {errc::conflict, 409},                {http_errc::payload_too_large, 413},
                        {errc::overloaded, 503},              {errc::loading, 503},
                        {errc::shutting_down, 503},           {errc::worker_failed, 500}};
  for (const auto& c : cases) {
    ApiError e = classify(c.kind, "m");
    EXPECT_EQ(e.status, c.status) << c.kind;
    EXPECT_EQ(e.code, c.kind);
  }
}

TEST(ServerApiError, OverloadAndLoadingAskToRetry) {
  HttpResponse r = error_response(classify(errc::overloaded, "queue full"));
  EXPECT_EQ(r.status, 503);
  EXPECT_FALSE(r.header("retry-after").empty());
  EXPECT_FALSE(error_response(classify(errc::loading, "wait")).header("Retry-After").empty());
}

TEST(ServerApiError, UnknownExceptionsRevealNothing) {
  ApiError e = from_exception(std::runtime_error("secret path /home/x"));
  EXPECT_EQ(e.status, 500);
  EXPECT_EQ(e.message.find("secret"), std::string::npos);
  ApiError unknown_kind = from_exception(Error("no_such_kind", "detail"));
  EXPECT_EQ(unknown_kind.status, 500);
}

TEST(ServerApiError, EnvelopeHasTheOpenAiShape) {
  auto j = nlohmann::json::parse(error_response(classify(errc::invalid_argument, "bad", "temperature")).body);
  EXPECT_EQ(j["error"]["message"], "bad");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["code"], "invalid_argument");
  EXPECT_EQ(j["error"]["param"], "temperature");
  auto no_param = nlohmann::json::parse(error_response(classify(errc::conflict, "dup")).body);
  EXPECT_TRUE(no_param["error"]["param"].is_null());
}

TEST(ServerApiError, DumpNeverThrowsOnInvalidUtf8) {
  nlohmann::json j = {{"text", std::string("ok \xff\xfe end")}};
  std::string s;
  ASSERT_NO_THROW(s = dump(j));
  nlohmann::json back;
  EXPECT_NO_THROW(back = nlohmann::json::parse(s));
  EXPECT_TRUE(back.contains("text"));
}

TEST(ServerRouter, DispatchesAnd404sAnd405s) {
  Router router;
  router.add("GET", "/health", [](const HttpRequest&) {
    HttpResponse r;
    r.body = "{}";
    return r;
  });
  router.add("POST", "/boom", [](const HttpRequest&) -> HttpResponse { throw Error(errc::conflict, "already loaded"); });
  router.add("DELETE", "/boom", [](const HttpRequest&) -> HttpResponse { throw std::logic_error("bug"); });

  EXPECT_EQ(router.dispatch(make_request("GET", "/health")).status, 200);
  EXPECT_EQ(router.dispatch(make_request("HEAD", "/health")).status, 200);
  HttpResponse missing = router.dispatch(make_request("GET", "/nope"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(nlohmann::json::parse(missing.body)["error"]["code"], "route_not_found");
  HttpResponse wrong = router.dispatch(make_request("GET", "/boom"));
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.header("Allow"), "POST, DELETE");
  EXPECT_EQ(router.dispatch(make_request("POST", "/boom")).status, 409);
  EXPECT_EQ(router.dispatch(make_request("DELETE", "/boom")).status, 500);
  router.add_prefix("GET", "/items/", "/items/{id}", [](const HttpRequest& r) {
    HttpResponse out;
    out.body = r.path.substr(7);
    return out;
  });
  router.add("GET", "/items/special", [](const HttpRequest&) {
    HttpResponse out;
    out.body = "exact";
    return out;
  });
  EXPECT_EQ(router.dispatch(make_request("GET", "/items/a/b")).body, "a/b");
  EXPECT_EQ(router.dispatch(make_request("GET", "/items/special")).body, "exact");
  EXPECT_EQ(router.dispatch(make_request("GET", "/items/")).status, 404);
  EXPECT_EQ(router.dispatch(make_request("POST", "/items/x")).status, 405);
  EXPECT_EQ(router.route_label("/items/secret-id"), "/items/{id}");
  EXPECT_EQ(router.route_label("/health"), "/health");
  EXPECT_EQ(router.route_label("/random/123"), "unmatched");
}

}  // namespace
}  // namespace neuron::server
