// CORS policy: which origins are allowed, what a preflight answers, and the
// --allowed-origins setting refusing what is not an origin.
#include <gtest/gtest.h>

#include <map>

#include "server/cors.hpp"
#include "server/serve_options.hpp"
#include "util/error.hpp"

namespace neuron::server {
namespace {

TEST(ServerCors, NothingIsAllowedByDefault) {
  CorsPolicy none;
  EXPECT_FALSE(none.enabled());
  EXPECT_FALSE(none.allow_origin("https://a.example"));
  EXPECT_FALSE(CorsPolicy::parse("", "--allowed-origins").enabled());
  EXPECT_FALSE(CorsPolicy::parse(" , ", "--allowed-origins").enabled());
}

TEST(ServerCors, ListedOriginsAreEchoedWithVary) {
  const CorsPolicy p = CorsPolicy::parse("https://a.example, http://localhost:5173", "--allowed-origins");
  EXPECT_TRUE(p.enabled());
  EXPECT_EQ(p.allow_origin("https://a.example").value_or(""), "https://a.example");
  EXPECT_EQ(p.allow_origin("HTTPS://A.example").value_or(""), "HTTPS://A.example") << "scheme and host compare in any case";
  EXPECT_EQ(p.allow_origin("http://localhost:5173").value_or(""), "http://localhost:5173");
  EXPECT_FALSE(p.allow_origin("http://localhost:5174"));
  EXPECT_FALSE(p.allow_origin("https://a.example.evil"));
  EXPECT_FALSE(p.allow_origin(""));
  std::vector<std::pair<std::string, std::string>> headers;
  p.decorate("https://a.example", headers);
  EXPECT_EQ(headers, (std::vector<std::pair<std::string, std::string>>{{"Access-Control-Allow-Origin", "https://a.example"},
                                                                        {"Vary", "Origin"}}));
  headers.clear();
  p.decorate("https://other.example", headers);
  EXPECT_TRUE(headers.empty());
}

TEST(ServerCors, StarAllowsAnyOriginWithoutVary) {
  const CorsPolicy p = CorsPolicy::parse("*", "--allowed-origins");
  EXPECT_EQ(p.allow_origin("https://anything.example").value_or(""), "*");
  std::vector<std::pair<std::string, std::string>> headers;
  p.decorate("null", headers);
  EXPECT_EQ(headers, (std::vector<std::pair<std::string, std::string>>{{"Access-Control-Allow-Origin", "*"}}));
}

TEST(ServerCors, PreflightNamesTheClientsHeaders) {
  EXPECT_TRUE(CorsPolicy::is_preflight("OPTIONS", "https://a.example", "POST"));
  EXPECT_FALSE(CorsPolicy::is_preflight("OPTIONS", "", "POST"));
  EXPECT_FALSE(CorsPolicy::is_preflight("OPTIONS", "https://a.example", ""));
  EXPECT_FALSE(CorsPolicy::is_preflight("POST", "https://a.example", "POST"));
  const CorsPolicy p = CorsPolicy::parse("https://a.example", "--allowed-origins");
  const HttpResponse r = p.preflight("https://a.example", "authorization, Content-Type, X-Stainless-OS, x-stainless-lang, x-evil\r\nx");
  EXPECT_EQ(r.status, 204);
  EXPECT_TRUE(r.body.empty());
  EXPECT_EQ(r.header("Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_EQ(r.header("Vary"), "Origin");
  EXPECT_EQ(r.header("Access-Control-Allow-Methods"), "GET, POST, OPTIONS");
  EXPECT_EQ(r.header("Access-Control-Max-Age"), "600");
  const std::string allowed = r.header("Access-Control-Allow-Headers");
  for (const char* h : {"authorization", "content-type", "x-api-key", "openai-beta", "anthropic-version", "x-stainless-os",
                        "x-stainless-lang"})
    EXPECT_NE(allowed.find(h), std::string::npos) << h << " in " << allowed;
  EXPECT_EQ(allowed.find("x-evil"), std::string::npos) << "only the SDKs' x-stainless-* headers are echoed";
  const HttpResponse refused = p.preflight("https://b.example", "");
  EXPECT_EQ(refused.status, 403);
  EXPECT_TRUE(refused.header("Access-Control-Allow-Origin").empty());
}

TEST(ServerCors, AllowedOriginsSettingRefusesWhatIsNotAnOrigin) {
  auto env = [](std::map<std::string, std::string> vars) -> EnvLookup {
    return [vars](const std::string& name) -> std::optional<std::string> {
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  };
  ServeFlags flags;
  flags.allowed_origins = "https://a.example,*";
  EXPECT_EQ(resolve_serve_options(flags, env({})).allowed_origins, "https://a.example,*");
  EXPECT_EQ(resolve_serve_options({}, env({{"NEURON_ALLOWED_ORIGINS", "*"}})).allowed_origins, "*");
  for (const char* bad : {"a.example", "https://a.example/", "https://a.example/path", "https://", "://x"}) {
    flags.allowed_origins = bad;
    try {
      resolve_serve_options(flags, env({}));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--allowed-origins"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace neuron::server
