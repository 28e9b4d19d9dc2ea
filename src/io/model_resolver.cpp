#include "io/model_resolver.hpp"

#include <algorithm>
#include <cctype>
#include <vector>
#include <cstdlib>
#include <fstream>
#include <system_error>

#include "io/gguf.hpp"
#include "util/error.hpp"

namespace neuron::io {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxIdPart = 96;  // the Hub's limit on org and repo names
constexpr std::size_t kMaxRevision = 255;

[[noreturn]] void bad_id(std::string_view ref, const std::string& why) {
  fail(errc::invalid_argument, "invalid model id '" + std::string(ref) + "': " + why);
}

bool is_hex40(std::string_view s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool has_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// The Hub's own rule for org and repo names.
void check_id_part(std::string_view ref, std::string_view part, const char* what) {
  if (part.empty()) bad_id(ref, std::string(what) + " is empty");
  if (part.size() > kMaxIdPart) bad_id(ref, std::string(what) + " is longer than " + std::to_string(kMaxIdPart) + " characters");
  for (char c : part) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) bad_id(ref, std::string(what) + " may only hold letters, digits, '.', '_' and '-'");
  }
  if (part.find("..") != std::string_view::npos || part.find("--") != std::string_view::npos)
    bad_id(ref, std::string(what) + " may not contain '..' or '--'");
  if (part.front() == '.' || part.front() == '-' || part.back() == '.' || part.back() == '-')
    bad_id(ref, std::string(what) + " may not start or end with '.' or '-'");
}

// Branch and tag names may contain '/', but never an empty, "." or ".." component.
void check_revision(std::string_view ref, std::string_view rev) {
  if (rev.empty()) bad_id(ref, "revision after '@' is empty");
  if (rev.size() > kMaxRevision) bad_id(ref, "revision is too long");
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = rev.find('/', start);
    const std::string_view comp = rev.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (comp.empty() || comp == "." || comp == "..") bad_id(ref, "revision has an empty, '.' or '..' path component");
    for (char c : comp) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' || c == '+';
      if (!ok) bad_id(ref, "revision may only hold letters, digits, '.', '_', '-', '+' and '/'");
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
}

std::string trimmed(std::string s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && ws(s.back())) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && ws(s[i])) ++i;
  return s.substr(i);
}

// `child` is `root` or inside it, compared component by component ("/models2" is not under "/models").
bool is_within(const fs::path& child, const fs::path& root) {
  auto c = child.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++c) {
    if (r->empty() && std::next(r) == root.end()) break;  // trailing separator
    if (c == child.end() || *c != *r) return false;
  }
  return true;
}

// The real path of the directory or .gguf file `ref` names; nullopt when it names neither.
std::optional<fs::path> real_directory(std::string_view ref) {
  if (ref.empty() || has_control(ref)) return std::nullopt;
  std::error_code ec;
  const fs::path path{std::string(ref)};
  if (!fs::is_directory(path, ec) && !(is_gguf_path(path) && fs::is_regular_file(path, ec))) return std::nullopt;
  fs::path real = fs::canonical(path, ec);
  if (ec) return std::nullopt;
  return real;
}

// `real` is canonical: containment is checked on the resolved path, so
// neither ".." nor a symlink can lead out of the roots.
fs::path resolve_directory(const fs::path& real, const ResolveOptions& opts) {
  if (!opts.allowed_roots.empty()) {
    const bool allowed = std::any_of(opts.allowed_roots.begin(), opts.allowed_roots.end(), [&](const fs::path& root) {
      std::error_code rec;
      const fs::path r = fs::canonical(root, rec);
      return !rec && is_within(real, r);
    });
    if (!allowed) {
      std::string roots;
      for (const auto& r : opts.allowed_roots) roots += (roots.empty() ? "" : ", ") + r.string();
      fail(errc::invalid_argument, "model directory " + real.string() + " is outside the allowed model roots (" + roots + ")");
    }
  }
  if (fs::is_regular_file(real)) return real;  // a .gguf file (real_directory checked)
  if (!fs::is_regular_file(real / "config.json")) fail(errc::not_found, "model directory " + real.string() + " has no config.json");
  return real;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The quantization tag of a GGUF file name: what follows the last '-' or '.'
// of its stem ("Qwen3-0.6B-Q4_K_M.gguf" -> "Q4_K_M").
std::string gguf_quant_tag(const fs::path& file) {
  const std::string stem = file.stem().string();
  const auto cut = stem.find_last_of("-.");
  return cut == std::string::npos ? stem : stem.substr(cut + 1);
}

bool gguf_has_quant(const fs::path& file, const std::string& quant) { return upper(gguf_quant_tag(file)) == upper(quant); }

fs::path resolve_in_cache(std::string_view ref, const HfModelId& id, const fs::path& cache, const std::string& gguf_quant) {
  const fs::path repo = cache / id.cache_folder();
  const std::string where = " (cache " + cache.string() + "; set HF_HUB_CACHE or HF_HOME to use another)";
  if (!fs::is_directory(repo))
    fail(errc::not_found, "model '" + std::string(ref) + "' is not a directory and not in the Hugging Face cache: " + repo.string() +
                              " does not exist" + where);
  std::string commit;
  if (is_hex40(id.revision)) {
    commit = id.revision;
  } else {
    const fs::path ref_file = repo / "refs" / id.revision;
    std::ifstream in(ref_file);
    if (!in || fs::is_directory(ref_file))
      fail(errc::not_found, "revision '" + id.revision + "' of '" + id.repo() + "' is not in the Hugging Face cache: no " +
                                ref_file.string() + where);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    commit = trimmed(std::move(text));
    // The ref's content becomes a path component: only a commit hash may.
    if (!is_hex40(commit)) fail(errc::bad_model, ref_file.string() + " does not hold a 40-hex commit hash");
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  if (!fs::is_directory(snapshot))
    fail(errc::not_found, "snapshot " + snapshot.string() + " of '" + id.repo() + "@" + id.revision + "' is missing" + where);
  std::vector<fs::path> ggufs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(snapshot, ec))
    if (is_gguf_path(e.path()) && fs::is_regular_file(e.path(), ec)) ggufs.push_back(e.path());
  std::sort(ggufs.begin(), ggufs.end());
  std::string names;
  for (const auto& g : ggufs) names += (names.empty() ? "" : ", ") + g.filename().string();
  if (!gguf_quant.empty() && !ggufs.empty()) {
    std::vector<fs::path> match;
    for (const auto& g : ggufs)
      if (gguf_has_quant(g, gguf_quant)) match.push_back(g);
    if (match.size() == 1) return match.front();
    if (match.empty())
      fail(errc::not_found, "'" + id.repo() + "' has no GGUF file for quant '" + gguf_quant + "' (" +
                                (ggufs.empty() ? std::string("it has no .gguf files") : "it has " + names) + ")");
    fail(errc::invalid_argument, "several GGUF files of '" + id.repo() + "' match quant '" + gguf_quant + "': " + names);
  }
  if (fs::exists(snapshot / "config.json")) return snapshot;
  if (ggufs.size() == 1) return ggufs.front();
  if (ggufs.size() > 1)
    fail(errc::invalid_argument, "'" + id.repo() + "' holds several GGUF files (" + names + "); pick one with quant, e.g. \"" +
                                     gguf_quant_tag(ggufs.front()) + "\"");
  fail(errc::not_found, "snapshot " + snapshot.string() + " of '" + id.repo() + "' has no config.json (incomplete download?)");
}

}  // namespace

std::string HfModelId::cache_folder() const { return org.empty() ? "models--" + name : "models--" + org + "--" + name; }

HfModelId parse_hf_model_id(std::string_view ref) {
  if (ref.empty()) bad_id(ref, "it is empty");
  if (has_control(ref)) bad_id(ref, "it contains control characters");
  if (ref.find('\\') != std::string_view::npos) bad_id(ref, "it contains a backslash");
  if (ref.front() == '/') bad_id(ref, "it is an absolute path that is not a model directory");
  HfModelId id;
  std::string_view repo = ref;
  if (const auto at = ref.find('@'); at != std::string_view::npos) {
    repo = ref.substr(0, at);
    id.revision = std::string(ref.substr(at + 1));
    check_revision(ref, id.revision);
  } else {
    id.revision = "main";
  }
  const auto slash = repo.find('/');
  if (slash == std::string_view::npos) {
    check_id_part(ref, repo, "name");
    id.name = std::string(repo);
  } else {
    if (repo.find('/', slash + 1) != std::string_view::npos) bad_id(ref, "expected 'org/name' with a single '/'");
    check_id_part(ref, repo.substr(0, slash), "organisation");
    check_id_part(ref, repo.substr(slash + 1), "name");
    id.org = std::string(repo.substr(0, slash));
    id.name = std::string(repo.substr(slash + 1));
  }
  return id;
}

fs::path default_hf_hub_cache() {
  auto env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
  if (auto v = env("HF_HUB_CACHE")) return *v;
  if (auto v = env("HF_HOME")) return fs::path(*v) / "hub";
  if (auto v = env("XDG_CACHE_HOME")) return fs::path(*v) / "huggingface" / "hub";
  if (auto v = env("HOME")) return fs::path(*v) / ".cache" / "huggingface" / "hub";
  return fs::path(".cache") / "huggingface" / "hub";
}

std::string canonical_model_ref(std::string_view ref) {
  const auto real = real_directory(ref);
  return real ? real->string() : std::string(ref);
}

fs::path resolve_model(std::string_view ref, const ResolveOptions& opts) {
  if (ref.empty()) fail(errc::invalid_argument, "model reference is empty");
  if (has_control(ref)) fail(errc::invalid_argument, "model reference contains control characters");
  if (const auto real = real_directory(ref)) {
    if (!opts.allow_directories)
      fail(errc::invalid_argument, "model reference '" + std::string(ref) + "' names a directory; only Hugging Face ids are allowed here");
    return resolve_directory(*real, opts);
  }
  // Something spelled like a path but absent is a missing directory, not a Hub id.
  if (ref.front() == '/' || ref.starts_with("./") || ref.starts_with("../") || ref == "." || ref == "..")
    fail(errc::not_found, "model directory " + std::string(ref) + " does not exist");
  const HfModelId id = parse_hf_model_id(ref);
  return resolve_in_cache(ref, id, opts.hf_hub_cache ? *opts.hf_hub_cache : default_hf_hub_cache(), opts.gguf_quant);
}

}  // namespace neuron::io
