// Model references: directories and Hugging Face ids in a fake local cache,
// ids that could escape the cache, and the daemon's allow-list of roots.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "io/model_resolver.hpp"
#include "util/error.hpp"

namespace neuron::io {
namespace {

namespace fs = std::filesystem;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kOther = "fedcba9876543210fedcba9876543210fedcba98";

class ResolveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    root_ = fs::temp_directory_path() / ("neuron-resolve-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(root_);
    cache_ = root_ / "hub";
    // A cache as huggingface_hub lays it out: refs name commits, snapshots hold the files.
    add_snapshot("Qwen", "Qwen3-0.6B", kCommit, {{"main", kCommit + "\n"}});
    add_snapshot("Qwen", "Qwen3-0.6B", kOther, {{"dev", kOther}, {"refs/pr/1", kOther}});
    add_snapshot("", "gpt2", kCommit, {{"main", kCommit}});
    opts_.hf_hub_cache = cache_;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  void add_snapshot(const std::string& org, const std::string& name, const std::string& commit,
                    std::initializer_list<std::pair<std::string, std::string>> refs) {
    const fs::path repo = cache_ / (org.empty() ? "models--" + name : "models--" + org + "--" + name);
    fs::create_directories(repo / "snapshots" / commit);
    std::ofstream(repo / "snapshots" / commit / "config.json") << "{}";
    for (const auto& [ref, content] : refs) {
      fs::create_directories((repo / "refs" / ref).parent_path());
      std::ofstream(repo / "refs" / ref) << content;
    }
  }

  fs::path make_model_dir(const fs::path& p) {
    fs::create_directories(p);
    std::ofstream(p / "config.json") << "{}";
    return p;
  }

  template <typename F>
  void expect_error(F&& f, const std::string& kind, std::initializer_list<std::string> needles) {
    try {
      f();
      FAIL() << "no error thrown";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << e.what() << "' lacks '" << n << "'";
    }
  }

  fs::path root_, cache_;
  ResolveOptions opts_;
};

TEST_F(ResolveTest, HubIdFollowsRefsToSnapshots) {
  const fs::path repo = cache_ / "models--Qwen--Qwen3-0.6B";
  EXPECT_EQ(resolve_model("Qwen/Qwen3-0.6B", opts_), repo / "snapshots" / kCommit);
  EXPECT_EQ(resolve_model("Qwen/Qwen3-0.6B@main", opts_), repo / "snapshots" / kCommit);
  EXPECT_EQ(resolve_model("Qwen/Qwen3-0.6B@dev", opts_), repo / "snapshots" / kOther);
  EXPECT_EQ(resolve_model("Qwen/Qwen3-0.6B@refs/pr/1", opts_), repo / "snapshots" / kOther);
  EXPECT_EQ(resolve_model("Qwen/Qwen3-0.6B@" + kOther, opts_), repo / "snapshots" / kOther);  // a commit is used directly
  EXPECT_EQ(resolve_model("gpt2", opts_), cache_ / "models--gpt2" / "snapshots" / kCommit);
}

TEST_F(ResolveTest, CacheLocationFromEnvironment) {
  const char* saved[] = {std::getenv("HF_HUB_CACHE"), std::getenv("HF_HOME")};
  const std::string keep_hub = saved[0] ? saved[0] : "", keep_home = saved[1] ? saved[1] : "";
  ::setenv("HF_HUB_CACHE", cache_.c_str(), 1);
  EXPECT_EQ(default_hf_hub_cache(), cache_);
  EXPECT_EQ(resolve_model("Qwen/Qwen3-0.6B"), cache_ / "models--Qwen--Qwen3-0.6B" / "snapshots" / kCommit);
  ::unsetenv("HF_HUB_CACHE");
  ::setenv("HF_HOME", root_.c_str(), 1);  // root_/hub is the cache
  EXPECT_EQ(default_hf_hub_cache(), root_ / "hub");
  EXPECT_EQ(resolve_model("gpt2"), cache_ / "models--gpt2" / "snapshots" / kCommit);
  ::unsetenv("HF_HOME");
  if (std::getenv("HOME") && !std::getenv("XDG_CACHE_HOME")) {
    EXPECT_EQ(default_hf_hub_cache(), fs::path(std::getenv("HOME")) / ".cache" / "huggingface" / "hub");
  }
  if (!keep_hub.empty()) ::setenv("HF_HUB_CACHE", keep_hub.c_str(), 1);
  if (!keep_home.empty()) ::setenv("HF_HOME", keep_home.c_str(), 1);
}

TEST_F(ResolveTest, DirectoriesAbsoluteAndRelative) {
  const fs::path dir = make_model_dir(root_ / "models" / "tiny");
  EXPECT_EQ(resolve_model(dir.string(), opts_), fs::canonical(dir));
  const fs::path cwd = fs::current_path();
  fs::current_path(root_);
  EXPECT_EQ(resolve_model("models/tiny", opts_), fs::canonical(dir));  // a directory wins over an id of the same spelling
  EXPECT_EQ(resolve_model("./models/tiny/", opts_), fs::canonical(dir));
  fs::current_path(cwd);
  fs::create_directories(root_ / "empty");
  expect_error([&] { resolve_model((root_ / "empty").string(), opts_); }, errc::not_found, {"no config.json", "empty"});
  expect_error([&] { resolve_model((root_ / "absent").string(), opts_); }, errc::not_found, {"absent", "does not exist"});
  expect_error([&] { resolve_model("./absent", opts_); }, errc::not_found, {"does not exist"});
}

TEST_F(ResolveTest, EverySpellingOfADirectoryHasOneCanonicalRef) {
  const fs::path dir = make_model_dir(root_ / "models" / "tiny");
  fs::create_directory_symlink(dir, root_ / "link");
  fs::create_directory_symlink(root_ / "models", root_ / "models-link");
  const std::string real = fs::canonical(dir).string();
  const std::string m = (root_ / "models").string();
  const std::vector<std::string> spellings = {
      dir.string(),          dir.string() + "/",  m + "//tiny", m + "/./tiny", dir.string() + "/.", (root_ / "link").string(),
      (root_ / "models-link" / "tiny").string(), m + "/../models/tiny"};
  for (const auto& s : spellings) {
    EXPECT_EQ(canonical_model_ref(s), real) << s;
    EXPECT_EQ(resolve_model(s, opts_).string(), real) << s;
  }
  const fs::path cwd = fs::current_path();
  fs::current_path(root_);
  EXPECT_EQ(canonical_model_ref("models/tiny"), real);
  EXPECT_EQ(canonical_model_ref("./models//tiny/"), real);
  fs::current_path(cwd);
  // Anything that is not a directory stays as it is: Hub ids, missing paths, files.
  for (const std::string s : {"Qwen/Qwen3-8B", "gpt2@main", "/no/such/dir/", "", "a\nb"}) EXPECT_EQ(canonical_model_ref(s), s);
  EXPECT_EQ(canonical_model_ref((dir / "config.json").string()), (dir / "config.json").string());
}

TEST_F(ResolveTest, BundledModelResolves) {
  const fs::path tiny = fs::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";
  EXPECT_EQ(resolve_model(tiny.string()), fs::canonical(tiny));
}

TEST_F(ResolveTest, MissingModelsNameWhereTheyLooked) {
  expect_error([&] { resolve_model("Qwen/Qwen3-8B", opts_); }, errc::not_found, {"Qwen/Qwen3-8B", "models--Qwen--Qwen3-8B", cache_.string()});
  expect_error([&] { resolve_model("Qwen/Qwen3-0.6B@v2", opts_); }, errc::not_found, {"'v2'", (cache_ / "models--Qwen--Qwen3-0.6B" / "refs" / "v2").string()});
  expect_error([&] { resolve_model("Qwen/Qwen3-0.6B@" + std::string(40, 'a'), opts_); }, errc::not_found, {"snapshots", std::string(40, 'a')});
  // A ref that points at a snapshot that is gone.
  std::ofstream(cache_ / "models--Qwen--Qwen3-0.6B" / "refs" / "stale") << std::string(40, 'b');
  expect_error([&] { resolve_model("Qwen/Qwen3-0.6B@stale", opts_); }, errc::not_found, {std::string(40, 'b'), "missing"});
  // An incomplete download: snapshot without config.json.
  fs::remove(cache_ / "models--gpt2" / "snapshots" / kCommit / "config.json");
  expect_error([&] { resolve_model("gpt2", opts_); }, errc::not_found, {"config.json"});
}

TEST_F(ResolveTest, CorruptRefCannotRedirectOutsideTheCache) {
  std::ofstream(cache_ / "models--Qwen--Qwen3-0.6B" / "refs" / "evil") << "../../../../etc";
  expect_error([&] { resolve_model("Qwen/Qwen3-0.6B@evil", opts_); }, errc::bad_model, {"refs", "evil", "commit hash"});
}

TEST_F(ResolveTest, RefusesIdsThatCouldEscapeTheCache) {
  const char* bad[] = {
      "..",         "../x",          "org/..",        "../../etc/passwd", "org/name/extra", "org//name",  "/org/name",
      "org\\name",  "org/na\\me",    "org/name@../x", "org/name@a/../b",  "org/name@/abs",  "org/name@",  "org/name@a//b",
      "or g/name",  "org/name;rm",   "org/na$me",     "org/név",          "org/name\n",     "org/\tname", "/",
      "org/",       "/name",         "@main",         "org--x/name",      "org/-name",      "org/name.",  ".hidden/name",
      "org/a..b",   "org/name@a b",  "",
  };
  for (const char* ref : bad) {
    SCOPED_TRACE(ref);
    try {
      resolve_model(ref, opts_);
      FAIL() << "accepted";
    } catch (const Error& e) {
      // Refused as an id, or (for path spellings) as a missing directory: never found in or outside the cache.
      EXPECT_TRUE(e.kind() == errc::invalid_argument || e.kind() == errc::not_found) << e.kind() << ": " << e.what();
    }
  }
  // Each id-shaped one is refused by the parser itself, before touching the file system.
  for (const char* ref : {"org/..", "org/name/extra", "org//name", "org\\name", "org/name@../x", "org/na$me", "org/név", "org/name\n",
                          "org--x/name", "org/-name", "org/name.", "org/a..b", "@main", "org/"}) {
    SCOPED_TRACE(ref);
    expect_error([&] { parse_hf_model_id(ref); }, errc::invalid_argument, {"invalid model id"});
  }
}

TEST_F(ResolveTest, ParsesIdParts) {
  HfModelId id = parse_hf_model_id("Qwen/Qwen3-0.6B@refs/pr/1");
  EXPECT_EQ(id.org, "Qwen");
  EXPECT_EQ(id.name, "Qwen3-0.6B");
  EXPECT_EQ(id.revision, "refs/pr/1");
  EXPECT_EQ(id.cache_folder(), "models--Qwen--Qwen3-0.6B");
  EXPECT_EQ(parse_hf_model_id("gpt2").cache_folder(), "models--gpt2");
  EXPECT_EQ(parse_hf_model_id("gpt2").revision, "main");
  EXPECT_EQ(parse_hf_model_id("a_b/c.d-e").repo(), "a_b/c.d-e");
}

TEST_F(ResolveTest, AllowedRootsConfineDirectories) {
  const fs::path inside = make_model_dir(root_ / "allowed" / "m");
  const fs::path outside = make_model_dir(root_ / "allowed2" / "m");  // shares a string prefix with the root
  fs::create_symlink(outside, root_ / "allowed" / "link");               // escapes through a symlink
  ResolveOptions o = opts_;
  o.allowed_roots = {root_ / "allowed"};
  EXPECT_EQ(resolve_model(inside.string(), o), fs::canonical(inside));
  expect_error([&] { resolve_model(outside.string(), o); }, errc::invalid_argument, {"outside the allowed model roots"});
  expect_error([&] { resolve_model((root_ / "allowed" / "link").string(), o); }, errc::invalid_argument, {"outside the allowed"});
  expect_error([&] { resolve_model((root_ / "allowed" / ".." / "allowed2" / "m").string(), o); }, errc::invalid_argument, {"outside"});
  // Cache ids stay allowed: the id check already keeps them inside the cache.
  EXPECT_EQ(resolve_model("gpt2", o), cache_ / "models--gpt2" / "snapshots" / kCommit);
  // Directories can be refused outright while ids still resolve.
  ResolveOptions ids_only = opts_;
  ids_only.allow_directories = false;
  expect_error([&] { resolve_model(inside.string(), ids_only); }, errc::invalid_argument, {"names a directory"});
  EXPECT_EQ(resolve_model("gpt2", ids_only), cache_ / "models--gpt2" / "snapshots" / kCommit);
  // A trailing separator on the root changes nothing.
  o.allowed_roots = {root_ / "allowed" / ""};
  EXPECT_EQ(resolve_model(inside.string(), o), fs::canonical(inside));
}

// GGUF: a .gguf file is a model reference of its own; a cached GGUF repo
// (no config.json) resolves to its one file, or the one quant names.
TEST_F(ResolveTest, GgufFilesAndReposPickedByQuant) {
  const fs::path file = root_ / "models" / "tiny.gguf";
  fs::create_directories(file.parent_path());
  std::ofstream(file) << "GGUF";
  EXPECT_EQ(resolve_model(file.string(), opts_), fs::canonical(file));
  EXPECT_EQ(canonical_model_ref((root_ / "models" / "." / "tiny.gguf").string()), fs::canonical(file).string());
  ResolveOptions o = opts_;
  o.allowed_roots = {root_ / "elsewhere"};
  expect_error([&] { resolve_model(file.string(), o); }, errc::invalid_argument, {"outside the allowed model roots"});

  const fs::path snap = cache_ / "models--Qwen--Qwen3-0.6B-GGUF" / "snapshots" / kCommit;
  fs::create_directories(snap);
  fs::create_directories(cache_ / "models--Qwen--Qwen3-0.6B-GGUF" / "refs");
  std::ofstream(cache_ / "models--Qwen--Qwen3-0.6B-GGUF" / "refs" / "main") << kCommit;
  std::ofstream(snap / "Qwen3-0.6B-Q8_0.gguf") << "GGUF";
  EXPECT_EQ(resolve_model("Qwen/Qwen3-0.6B-GGUF", opts_), snap / "Qwen3-0.6B-Q8_0.gguf");  // the only one
  std::ofstream(snap / "Qwen3-0.6B-Q4_K_M.gguf") << "GGUF";
  std::ofstream(snap / "README.md") << "x";
  expect_error([&] { resolve_model("Qwen/Qwen3-0.6B-GGUF", opts_); }, errc::invalid_argument,
               {"several GGUF files", "Qwen3-0.6B-Q4_K_M.gguf, Qwen3-0.6B-Q8_0.gguf", "quant"});
  o = opts_;
  o.gguf_quant = "q4_k_m";
  EXPECT_EQ(resolve_model("Qwen/Qwen3-0.6B-GGUF", o), snap / "Qwen3-0.6B-Q4_K_M.gguf");
  o.gguf_quant = "Q8_0";
  EXPECT_EQ(resolve_model("Qwen/Qwen3-0.6B-GGUF", o), snap / "Qwen3-0.6B-Q8_0.gguf");
  o.gguf_quant = "Q5_K_M";
  expect_error([&] { resolve_model("Qwen/Qwen3-0.6B-GGUF", o); }, errc::not_found, {"no GGUF file for quant 'Q5_K_M'", "Q8_0.gguf"});
  // A safetensors repo ignores gguf_quant (the loader quantizes it instead).
  EXPECT_EQ(resolve_model("Qwen/Qwen3-0.6B", o), cache_ / "models--Qwen--Qwen3-0.6B" / "snapshots" / kCommit);
}

}  // namespace
}  // namespace neuron::io
