#pragma once
// The Hugging Face hub's HTTP protocol, as huggingface_hub speaks it:
//   GET  {endpoint}/api/models/{repo}/revision/{rev}   -> {"sha": commit, "siblings": [{"rfilename"}...]}
//   HEAD {endpoint}/{repo}/resolve/{commit}/{file}     -> ETag (git sha1, or the sha256 for LFS
//        files, which also carry X-Linked-Etag and X-Linked-Size on the hub's 302 to its CDN),
//        X-Repo-Commit, Content-Length
//   GET  the same URL, following redirects, with Range to resume.
// The token (Authorization: Bearer) goes only to the endpoint's own origin,
// never to a CDN a redirect names. Hub answers are untrusted: commits must be
// 40 hex digits, etags a short [A-Za-z0-9_-] word, file names relative paths
// without "..", before any of them becomes a path.
//
// Errors: not_found (no such repo, revision or file; X-Error-Code
// RepoNotFound/RevisionNotFound/EntryNotFound, or 404), gated (X-Error-Code
// GatedRepo), unauthorized (other 401/403), unavailable (the hub could not be
// reached, answered 5xx or garbage; the cause named), cancelled.
#include <functional>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/http_client.hpp"
#include "io/model_resolver.hpp"

namespace neuron::io {

struct HubOptions {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT
  std::string token;                                // HF_TOKEN; empty: anonymous
  bool offline = false;                             // HF_HUB_OFFLINE=1: never touch the network
  std::optional<std::filesystem::path> cache;       // default_hf_hub_cache() when unset
  int parallel_downloads = 4;                       // files fetched at once
  int attempts = 3;                                 // per file; a network error resumes where it stopped
  std::chrono::seconds connect_timeout{10};
  std::chrono::seconds stall_timeout{60};           // a transfer slower than 1 byte/s this long fails

  // HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE (1/true/yes/on) over the defaults.
  // Throws Error{invalid_argument} for an endpoint that is not an http(s) URL.
  static HubOptions from_env();
  std::filesystem::path cache_dir() const { return cache ? *cache : default_hf_hub_cache(); }
};

// One revision of a repository as the hub's API describes it.
struct RepoRevision {
  HfModelId id;
  std::string commit;              // 40 hex digits
  std::vector<std::string> files;  // every file of the commit (validated relative paths)
};

// What a HEAD of one file tells: where it goes in the cache and how to check it.
struct FileMeta {
  std::string name;
  std::string etag;     // the blob's name in the cache
  std::int64_t size = 0;
  bool sha256 = false;  // etag is the file's sha256 (an LFS file): verified after download
};

class HubClient {
 public:
  explicit HubClient(HubOptions options);
  const HubOptions& options() const { return options_; }

  // The API call: resolves id.revision to a commit and lists the files.
  RepoRevision revision(const HfModelId& id, const std::function<bool()>& cancelled = {}) const;
  // HEAD of one file of `commit`: size and etag. Errors as above (an X-Repo-Commit
  // that differs from `commit` is unavailable: the hub moved under us).
  FileMeta file_meta(HttpSession& session, const RepoRevision& rev, const std::string& file,
                     const std::function<bool()>& cancelled = {}) const;
  // GETs one file from `offset` on into `sink`, following redirects. Returns the
  // status of the final answer (206: the range was honoured; 200: the whole file).
  long fetch(HttpSession& session, const RepoRevision& rev, const std::string& file, std::int64_t offset,
             const BodySink& sink, const std::function<bool()>& cancelled = {}) const;

 private:
  HttpRequest request(const std::string& url, const std::function<bool()>& cancelled) const;
  std::string file_url(const RepoRevision& rev, const std::string& file) const;
  HubOptions options_;
};

// The files a model needs from a revision: config.json, the tokenizer files
// (tokenizer.json, tokenizer_config.json, generation_config.json,
// special_tokens_map.json, chat_template.jinja) that exist, and the weights:
// every top-level *.safetensors with model.safetensors.index.json, or with a
// `quant` the one GGUF file whose name contains it (case-insensitive:
// "Q4_K_M" picks "*q4_k_m*.gguf"). Throws not_found naming what is missing
// (no config.json, no safetensors, no GGUF for the quant: the GGUF files
// there are listed) and invalid_argument when a quant matches several files.
std::vector<std::string> select_model_files(const RepoRevision& rev, const std::optional<std::string>& quant);

}  // namespace neuron::io
