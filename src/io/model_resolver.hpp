#pragma once
// Turning a model reference into a directory that holds config.json, or a
// .gguf file.
//
// A reference is either
//   - a directory (absolute or relative) containing config.json,
//   - a .gguf file (absolute or relative), or
//   - a Hugging Face id `org/name` or `name`, optionally `@revision`, found in
//     the local Hugging Face cache: <cache>/models--org--name/refs/<revision>
//     holds a commit hash and <cache>/models--org--name/snapshots/<hash>/ the
//     files. A revision that is itself a 40-hex commit names the snapshot
//     directly. Nothing is downloaded. A snapshot of GGUF files (no
//     config.json) resolves to its one .gguf file, or, when it holds
//     several, to the one whose name ends in ResolveOptions::gguf_quant
//     ("Qwen3-0.6B-Q4_K_M.gguf" for "Q4_K_M", any case).
// An existing directory wins over an id of the same spelling, as in
// transformers. Ids are validated before they touch the file system, so no
// id can name a path outside the cache.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace neuron::io {

struct HfModelId {
  std::string org;       // empty for an id without an organisation ("gpt2")
  std::string name;
  std::string revision;  // "main" unless given after '@'

  std::string repo() const { return org.empty() ? name : org + "/" + name; }
  std::string cache_folder() const;  // "models--org--name"
};

// Parses `org/name[@revision]`. Throws Error{invalid_argument} naming the
// problem for anything that could escape the cache or that the Hub would not
// accept: empty parts, "..", "--", absolute or backslashed parts, control
// characters, characters outside [A-Za-z0-9._-] in org/name.
HfModelId parse_hf_model_id(std::string_view ref);

// HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// $HOME/.cache/huggingface/hub (the order huggingface_hub uses).
std::filesystem::path default_hf_hub_cache();

struct ResolveOptions {
  std::optional<std::filesystem::path> hf_hub_cache;  // default_hf_hub_cache() when unset
  // When non-empty, directory references must lie under one of these roots
  // after resolving symlinks (a daemon serving only configured model
  // folders). Ids resolved in the Hugging Face cache are always allowed.
  std::vector<std::filesystem::path> allowed_roots;
  // False: only Hugging Face ids; a reference that names an existing
  // directory is refused (a daemon with no configured model roots).
  bool allow_directories = true;
  // Picks the GGUF file of a cached repo by its quantization tag ("Q4_K_M");
  // empty: config.json, else the repo's only .gguf file.
  std::string gguf_quant;
};

// The one spelling of a model reference, used as the model's id: for a
// reference naming an existing directory, its real path (".", "..", repeated
// and trailing separators and symlinks resolved), so "/m/x", "/m/x/", "/m//x",
// "/m/./x" and a link to it are one model; anything else (a Hugging Face id,
// a missing path) unchanged. Touches the file system, never throws, checks
// nothing: resolve_model() decides whether the reference may be loaded.
std::string canonical_model_ref(std::string_view ref);

// Returns the model's directory or .gguf file (canonical for path
// references; the snapshot directory or its .gguf file for cache hits). Throws Error{invalid_argument} for a
// malformed id or a directory outside the allowed roots, Error{not_found}
// naming the places it looked, Error{bad_model} for a corrupt cache ref.
std::filesystem::path resolve_model(std::string_view ref, const ResolveOptions& opts = {});

}  // namespace neuron::io
