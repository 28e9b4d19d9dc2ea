#include "backend/batch.hpp"

#include <string>
#include <unordered_map>

#include "util/error.hpp"

namespace neuron::backend {

void Batch::add(std::span<const std::int32_t> new_tokens, std::int32_t position, std::span<const std::int32_t> blocks,
                LogitsWanted logits, std::int32_t state_slot) {
  SequenceStep s;
  s.state_slot = state_slot;
  s.token_begin = static_cast<std::int32_t>(tokens.size());
  s.num_tokens = static_cast<std::int32_t>(new_tokens.size());
  s.position = position;
  s.block_begin = static_cast<std::int32_t>(block_ids.size());
  s.num_blocks = static_cast<std::int32_t>(blocks.size());
  s.logits = logits;
  tokens.insert(tokens.end(), new_tokens.begin(), new_tokens.end());
  block_ids.insert(block_ids.end(), blocks.begin(), blocks.end());
  seqs.push_back(s);
}

void Batch::clear() {
  tokens.clear();
  seqs.clear();
  block_ids.clear();
}

std::int64_t logit_rows_of(const SequenceStep& s) noexcept {
  if (s.logits == LogitsWanted::last) return 1;
  return s.logits == LogitsWanted::all ? s.num_tokens : 0;
}

std::int64_t hidden_rows_of(const SequenceStep& s) noexcept {
  if (s.logits == LogitsWanted::hidden_last) return 1;
  return s.logits == LogitsWanted::hidden_all ? s.num_tokens : 0;
}

std::int64_t Batch::logit_rows() const noexcept {
  std::int64_t rows = 0;
  for (const SequenceStep& s : seqs) rows += logit_rows_of(s);
  return rows;
}

std::int64_t Batch::hidden_rows() const noexcept {
  std::int64_t rows = 0;
  for (const SequenceStep& s : seqs) rows += hidden_rows_of(s);
  return rows;
}

std::int64_t Batch::pick_rows() const noexcept {
  std::int64_t rows = 0;
  for (const SequenceStep& s : seqs) rows += s.logits == LogitsWanted::argmax ? 1 : 0;
  return rows;
}

void check_batch(const Batch& batch, const model::ModelConfig& cfg, const KvPoolShape& pool, std::int32_t max_context,
                 std::span<const float> logits, std::span<const std::int32_t> picks, std::span<const float> hidden) {
  if (batch.seqs.empty()) fail(errc::invalid_argument, "step: the batch has no sequence");
  if (pool.block_size <= 0 || pool.num_blocks <= 0) fail(errc::invalid_argument, "step: the runner has no KV pool");
  const auto n_tokens = static_cast<std::int64_t>(batch.tokens.size());
  const auto n_ids = static_cast<std::int64_t>(batch.block_ids.size());
  for (std::int64_t i = 0; i < n_tokens; ++i) {
    const std::int32_t t = batch.tokens[static_cast<std::size_t>(i)];
    if (t < 0 || t >= cfg.vocab_size)
      fail(errc::invalid_argument, "step: token id " + std::to_string(t) + " at index " + std::to_string(i) +
                                       " is outside the vocabulary of " + std::to_string(cfg.vocab_size));
  }
  // Which sequence writes each block this step, and at which entry of its table; a written block must be in
  // no other table and at no other entry of the writer's own (a repeated entry would alias two positions).
  struct Writer {
    std::size_t seq;
    std::int32_t entry;
  };
  std::unordered_map<std::int32_t, Writer> writer;
  std::unordered_map<std::int32_t, std::size_t> slot_owner;  // state slot -> the sequence naming it
  std::int64_t covered = 0;
  for (std::size_t si = 0; si < batch.seqs.size(); ++si) {
    const SequenceStep& s = batch.seqs[si];
    const std::string who = "step: sequence " + std::to_string(si) + ": ";
    if (s.num_tokens < 1) fail(errc::invalid_argument, who + "no new tokens");
    if (s.token_begin != covered)
      fail(errc::invalid_argument, who + "tokens start at " + std::to_string(s.token_begin) + ", expected " +
                                       std::to_string(covered) + " (sequences' tokens must be consecutive)");
    covered += s.num_tokens;
    if (covered > n_tokens) fail(errc::invalid_argument, who + "tokens run past the batch's " + std::to_string(n_tokens));
    if (s.position < 0) fail(errc::invalid_argument, who + "position " + std::to_string(s.position) + " is negative");
    if (pool.state_slots > 0) {
      if (s.state_slot < 0 || s.state_slot >= pool.state_slots)
        fail(errc::invalid_argument, who + "state slot " + std::to_string(s.state_slot) + " is outside [0, " +
                                         std::to_string(pool.state_slots) + ")");
      const auto [it, inserted] = slot_owner.emplace(s.state_slot, si);
      if (!inserted)
        fail(errc::invalid_argument, who + "state slot " + std::to_string(s.state_slot) + " is sequence " +
                                         std::to_string(it->second) + "'s too");
    } else if (s.state_slot != -1) {
      fail(errc::invalid_argument, who + "names state slot " + std::to_string(s.state_slot) +
                                       " but the model keeps no recurrent state");
    }
    const std::int64_t end = static_cast<std::int64_t>(s.position) + s.num_tokens;
    if (end > max_context)
      fail(errc::context_length_exceeded, who + "positions up to " + std::to_string(end) + " exceed the context of " +
                                              std::to_string(max_context) + " tokens");
    const std::int64_t need = (end + pool.block_size - 1) / pool.block_size;
    if (s.num_blocks < need)
      fail(errc::invalid_argument, who + "block table has " + std::to_string(s.num_blocks) + " blocks; positions up to " +
                                       std::to_string(end) + " need " + std::to_string(need));
    if (s.num_blocks > pool.num_blocks)
      fail(errc::invalid_argument, who + "block table has " + std::to_string(s.num_blocks) + " blocks; the pool has " +
                                       std::to_string(pool.num_blocks));
    if (s.block_begin < 0 || static_cast<std::int64_t>(s.block_begin) + s.num_blocks > n_ids)
      fail(errc::invalid_argument, who + "block table runs outside the batch's block ids");
    for (std::int32_t b = 0; b < s.num_blocks; ++b) {
      const std::int32_t id = batch.block_ids[static_cast<std::size_t>(s.block_begin + b)];
      if (id < 0 || id >= pool.num_blocks)
        fail(errc::invalid_argument, who + "block id " + std::to_string(id) + " is outside the pool [0, " +
                                         std::to_string(pool.num_blocks) + ")");
    }
    const std::int32_t first_written = s.position / pool.block_size;
    const auto last_written = static_cast<std::int32_t>((end - 1) / pool.block_size);
    for (std::int32_t b = first_written; b <= last_written; ++b) {
      const std::int32_t id = batch.block_ids[static_cast<std::size_t>(s.block_begin + b)];
      const auto [it, inserted] = writer.emplace(id, Writer{si, b});
      if (!inserted && it->second.seq != si)
        fail(errc::invalid_argument, who + "writes block " + std::to_string(id) + ", which sequence " +
                                         std::to_string(it->second.seq) + " also writes");
      if (!inserted)
        fail(errc::invalid_argument, who + "writes block " + std::to_string(id) + " through table entries " +
                                         std::to_string(it->second.entry) + " and " + std::to_string(b));
    }
  }
  if (covered != n_tokens)
    fail(errc::invalid_argument, "step: the sequences cover " + std::to_string(covered) + " of the batch's " +
                                     std::to_string(n_tokens) + " tokens");
  for (std::size_t si = 0; si < batch.seqs.size(); ++si) {
    const SequenceStep& s = batch.seqs[si];
    for (std::int32_t b = 0; b < s.num_blocks; ++b) {
      const std::int32_t id = batch.block_ids[static_cast<std::size_t>(s.block_begin + b)];
      const auto it = writer.find(id);
      if (it != writer.end() && it->second.seq != si)
        fail(errc::invalid_argument, "step: sequence " + std::to_string(si) + " reads block " + std::to_string(id) +
                                         ", which sequence " + std::to_string(it->second.seq) + " writes in the same step");
      if (it != writer.end() && it->second.entry != b)
        fail(errc::invalid_argument, "step: sequence " + std::to_string(si) + " reads block " + std::to_string(id) +
                                         " through table entry " + std::to_string(b) + " and writes it through entry " +
                                         std::to_string(it->second.entry));
    }
  }
  if (logits.empty() && picks.empty() && hidden.empty()) return;  // no LM head
  const auto want = static_cast<std::uint64_t>(batch.logit_rows()) * static_cast<std::uint64_t>(cfg.vocab_size);
  if (logits.size() != want)
    fail(errc::invalid_argument, "step: logits buffer holds " + std::to_string(logits.size()) + " floats; the batch wants " +
                                     std::to_string(want) + " (" + std::to_string(batch.logit_rows()) + " rows)");
  if (picks.size() != static_cast<std::uint64_t>(batch.pick_rows()))
    fail(errc::invalid_argument, "step: picks buffer holds " + std::to_string(picks.size()) + " ids; the batch has " +
                                     std::to_string(batch.pick_rows()) + " argmax sequences");
  const auto want_hidden = static_cast<std::uint64_t>(batch.hidden_rows()) * static_cast<std::uint64_t>(cfg.hidden_size);
  if (hidden.size() != want_hidden)
    fail(errc::invalid_argument, "step: hidden buffer holds " + std::to_string(hidden.size()) + " floats; the batch wants " +
                                     std::to_string(want_hidden) + " (" + std::to_string(batch.hidden_rows()) + " rows)");
}

}  // namespace neuron::backend
