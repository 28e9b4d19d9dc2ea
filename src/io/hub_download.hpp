#pragma once
// Downloading a hub revision into the Hugging Face cache, in the layout every
// HF tool shares (<cache> = HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub):
//   <cache>/models--org--name/blobs/<etag>                the files' contents
//   <cache>/models--org--name/blobs/<etag>.incomplete     a download in progress (resumed with Range)
//   <cache>/models--org--name/snapshots/<commit>/<file>   relative symlinks to ../../blobs/<etag>
//   <cache>/models--org--name/refs/<revision>             the commit, no newline
//   <cache>/.locks/models--org--name/<etag>.lock          flock'd while a blob is written
//                                                         (huggingface_hub's lock file too)
// Every file's size is checked, and its sha256 where the hub gives one (LFS
// files); a mismatch removes the partial file and fails with
// checksum_mismatch. Files download in parallel (HubOptions::parallel_downloads),
// each retried (HubOptions::attempts) after a network error, resuming where it
// stopped. The snapshot becomes visible only once every file is verified:
// its symlinks are made last (config.json last of all, which is what
// resolve_model looks for) and refs/<revision> after them; a failed or
// cancelled download leaves blobs and partial files to resume from, never a
// snapshot that looks complete.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/hub_client.hpp"

namespace neuron::io {

struct TransferProgress {
  std::int64_t bytes_done = 0, bytes_total = 0;  // over every file (cached ones count as done)
  std::int64_t files_done = 0, files_total = 0;
};
// Called from the download threads, one call at a time, at most every 100 ms
// and whenever a file completes.
using ProgressFn = std::function<void(const TransferProgress&)>;

// Downloads `files` of `rev` (blobs already in the cache are kept) and
// publishes the snapshot. Returns the snapshot directory. Errors: those of
// HubClient, checksum_mismatch, io (disk full, a write failed), cancelled.
std::filesystem::path download_snapshot(const HubClient& hub, const RepoRevision& rev, const std::vector<std::string>& files,
                                        const ProgressFn& progress = {}, const std::function<bool()>& cancelled = {});

// `neuron pull`: the revision of `ref` (org/name[@revision]) resolved on the
// hub, the model's files selected (select_model_files with `quant`) and
// downloaded; files already in the cache are not fetched again. Offline, the
// cached snapshot (resolve_model) or its not_found.
std::filesystem::path pull_model(std::string_view ref, const std::optional<std::string>& quant, const HubClient& hub,
                                 const ProgressFn& progress = {}, const std::function<bool()>& cancelled = {});

// "1.5 GB" (decimal units, as the hub shows sizes).
std::string format_bytes(std::int64_t bytes);

}  // namespace neuron::io
