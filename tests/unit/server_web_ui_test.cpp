// The built-in web UI's routes: every embedded file is served with its type
// and the Content-Security-Policy, the page references only files that are
// embedded (nothing from another host), and the UI needs no API key while
// the API behind it still does.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "engine/registry.hpp"
#include "server/api.hpp"
#include "server/router.hpp"
#include "server/web_ui.hpp"

namespace neuron::server {
namespace {

HttpRequest get(const std::string& path) { return HttpRequest{"GET", path, {}, "", "test"}; }

std::set<std::string> asset_paths() {
  std::set<std::string> out;
  for (const WebAsset& a : web_assets()) out.insert(std::string(a.path));
  return out;
}

TEST(WebUi, ServesTheIndexAndEveryFileWithThePolicy) {
  Router router;
  add_web_ui_routes(router);
  HttpResponse index = router.dispatch(get("/"));
  ASSERT_EQ(index.status, 200);
  EXPECT_EQ(index.content_type, "text/html; charset=utf-8");
  EXPECT_NE(index.body.find("<script type=\"module\" src=\"/ui/main.js\">"), std::string::npos);
  ASSERT_FALSE(web_assets().empty());
  for (const WebAsset& a : web_assets()) {
    HttpResponse r = router.dispatch(get("/ui/" + std::string(a.path)));
    ASSERT_EQ(r.status, 200) << a.path;
    EXPECT_EQ(r.body, a.bytes) << a.path;
    EXPECT_EQ(r.header("Content-Security-Policy"), kWebUiCsp) << a.path;
    EXPECT_EQ(r.header("X-Content-Type-Options"), "nosniff") << a.path;
    if (a.path.ends_with(".js")) {
      EXPECT_EQ(r.content_type, "text/javascript; charset=utf-8");
    } else if (a.path.ends_with(".css")) {
      EXPECT_EQ(r.content_type, "text/css; charset=utf-8");
    }
  }
  EXPECT_EQ(index.header("Content-Security-Policy"), kWebUiCsp);
  // Only the daemon's own origin: no inline script, no eval, no other host.
  EXPECT_EQ(std::string(kWebUiCsp).find("unsafe"), std::string::npos);
  EXPECT_EQ(std::string(kWebUiCsp).find("http"), std::string::npos);
}

TEST(WebUi, UnknownFilesAre404AndNoPathEscapes) {
  Router router;
  add_web_ui_routes(router);
  EXPECT_EQ(router.dispatch(get("/ui/nope.js")).status, 404);
  EXPECT_EQ(router.dispatch(get("/ui/../CMakeLists.txt")).status, 404);
  EXPECT_EQ(router.dispatch(get("/ui/")).status, 404);
  EXPECT_EQ(router.dispatch(get("/index.html")).status, 404);
  EXPECT_EQ(router.dispatch(HttpRequest{"POST", "/", {}, "", "test"}).status, 405);
}

TEST(WebUi, EveryReferenceResolvesToAnEmbeddedFile) {
  const std::set<std::string> paths = asset_paths();
  // HTML and CSS name files as /ui/NAME; modules import './NAME'.
  const std::regex ui_ref(R"((?:src|href)="/ui/([^"]+)\")");
  const std::regex import_ref(R"(from '\./([^']+)')");
  int refs = 0;
  for (const WebAsset& a : web_assets()) {
    const std::string text(a.bytes);
    for (const std::regex* re : {&ui_ref, &import_ref})
      for (auto it = std::sregex_iterator(text.begin(), text.end(), *re); it != std::sregex_iterator(); ++it, ++refs)
        EXPECT_TRUE(paths.count((*it)[1].str())) << a.path << " names " << (*it)[1].str();
    // Nothing is fetched from elsewhere (the UI works offline, and the policy would block it).
    EXPECT_EQ(text.find("from 'http"), std::string::npos) << a.path;
    EXPECT_EQ(text.find("src=\"http"), std::string::npos) << a.path;
    EXPECT_EQ(text.find("href=\"http"), std::string::npos) << a.path;
    // Untrusted text must never be parsed as HTML.
    EXPECT_EQ(text.find("innerHTML"), std::string::npos) << a.path;
    EXPECT_EQ(text.find("insertAdjacentHTML"), std::string::npos) << a.path;
  }
  EXPECT_GE(refs, 10);
}

TEST(WebUi, ThePageNeedsNoKeyButTheApiDoes) {
  engine::Registry registry(engine::RegistryOptions{});
  Api api(registry, ApiOptions{.api_key = "k3y"});
  EXPECT_EQ(api.handle(get("/")).status, 200);
  EXPECT_EQ(api.handle(get("/ui/main.js")).status, 200);
  EXPECT_EQ(api.handle(get("/ui/missing.js")).status, 404);
  EXPECT_EQ(api.handle(get("/models")).status, 401);
  EXPECT_EQ(api.handle(get("/metrics")).status, 401);
  EXPECT_TRUE(is_web_ui_path("/"));
  EXPECT_TRUE(is_web_ui_path("/ui/app.css"));
  EXPECT_FALSE(is_web_ui_path("/uix"));
  EXPECT_FALSE(is_web_ui_path("/v1/models"));
}

}  // namespace
}  // namespace neuron::server
