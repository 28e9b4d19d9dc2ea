#include "backend/cuda/step_inputs.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "util/error.hpp"

namespace neuron::backend::cuda {

StepLayout StepLayout::make(int t, int s, int n_decode, int n_tiles, int n_rows, int n_block_ids, int n_picks) {
  StepLayout l;
  int at = 0;
  auto take = [&](int& field, int count) {
    field = at;
    at += count;
  };
  take(l.tokens, t);
  take(l.positions, t);
  take(l.slots, t);
  take(l.q_start, s);
  take(l.num_tokens, s);
  take(l.position, s);
  take(l.block_offset, s);
  take(l.ctx_len, s);
  take(l.state_slot, s);
  take(l.decode_items, n_decode);
  take(l.tiles, 2 * n_tiles);
  take(l.head_rows, n_rows);
  take(l.block_tables, n_block_ids);
  take(l.pick_rows, n_picks);
  l.end = at;
  return l;
}

PassPlan plan_pass(std::span<const PassSeq> seqs, int graph_batch) {
  const auto real = static_cast<int>(seqs.size());
  PassPlan p;
  p.padded = graph_batch > 0;
  p.seqs = p.padded ? graph_batch : real;
  NEURON_ASSERT(p.seqs >= real);
  int block_ids = 0;
  p.decode_only = true;
  for (const PassSeq& s : seqs) {
    const auto n = static_cast<int>(s.tokens.size());
    p.tokens += n;
    p.max_seq_tokens = std::max(p.max_seq_tokens, n);
    block_ids += static_cast<int>(s.blocks.size());
    if (n == 1) {
      ++p.n_decode;
      p.max_decode_ctx = std::max(p.max_decode_ctx, s.position + 1);
    } else {
      p.decode_only = false;
      p.n_tiles += (n + kernels::kPrefillTileRows - 1) / kernels::kPrefillTileRows;
    }
  }
  if (p.padded) {
    NEURON_ASSERT(p.decode_only);
    p.tokens += p.seqs - real;  // padding sequences bring one token each
    p.n_decode = p.seqs;
    p.max_seq_tokens = 1;
    block_ids += 1;                  // the padding sequences' one-block table: the scratch block
  }
  // Hidden rows whose logits are returned, in the batch's order.
  int row = 0;
  for (const PassSeq& s : seqs) {
    const auto n = static_cast<int>(s.tokens.size());
    if (s.logits == LogitsWanted::last) p.rows.push_back(row + n - 1);
    if (s.logits == LogitsWanted::all)
      for (int i = 0; i < n; ++i) p.rows.push_back(row + i);
    if (s.logits == LogitsWanted::argmax) p.picks.push_back(row + n - 1);
    row += n;
  }
  const int uploaded_rows = p.padded ? 0 : static_cast<int>(p.rows.size() + p.picks.size());
  p.layout = StepLayout::make(p.tokens, p.seqs, p.n_decode, p.n_tiles, uploaded_rows, block_ids,
                              static_cast<int>(p.picks.size()));
  return p;
}

void pack_pass(std::span<const PassSeq> seqs, const PassPlan& p, std::int32_t block_size,
               std::int32_t scratch_block, std::span<std::int32_t> out, std::int32_t scratch_state_slot) {
  const StepLayout& l = p.layout;
  NEURON_ASSERT(out.size() >= static_cast<std::size_t>(l.end));
  std::int32_t* in = out.data();
  const auto real = static_cast<int>(seqs.size());
  int row = 0, table = 0, decode = 0;
  std::vector<std::array<std::int32_t, 3>> tiles;  // (kv_end, sequence, first row)
  tiles.reserve(static_cast<std::size_t>(p.n_tiles));
  for (int si = 0; si < real; ++si) {
    const PassSeq& s = seqs[static_cast<std::size_t>(si)];
    const auto n = static_cast<int>(s.tokens.size());
    std::memcpy(in + l.tokens + row, s.tokens.data(), 4 * static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      const int pos = s.position + i;
      in[l.positions + row + i] = pos;
      in[l.slots + row + i] = s.blocks[static_cast<std::size_t>(pos / block_size)] * block_size + pos % block_size;
    }
    in[l.q_start + si] = row;
    in[l.num_tokens + si] = n;
    in[l.position + si] = s.position;
    in[l.block_offset + si] = table;
    in[l.ctx_len + si] = s.position + n;
    in[l.state_slot + si] = s.state_slot;
    std::memcpy(in + l.block_tables + table, s.blocks.data(), 4 * s.blocks.size());
    if (n == 1) {
      in[l.decode_items + decode++] = si;
    } else {
      for (int r0 = 0; r0 < n; r0 += kernels::kPrefillTileRows)
        tiles.push_back({s.position + std::min(r0 + kernels::kPrefillTileRows, n), si, r0});
    }
    row += n;
    table += static_cast<int>(s.blocks.size());
  }
  // Padding: one token at position 0 of a sequence whose only block is the scratch block.
  for (int si = real; si < p.seqs; ++si) {
    in[l.tokens + row] = 0;
    in[l.positions + row] = 0;
    in[l.slots + row] = scratch_block * block_size;
    in[l.q_start + si] = row;
    in[l.num_tokens + si] = 1;
    in[l.position + si] = 0;
    in[l.block_offset + si] = table;
    in[l.ctx_len + si] = 1;
    in[l.state_slot + si] = scratch_state_slot;
    in[l.decode_items + decode++] = si;
    ++row;
  }
  if (p.padded) in[l.block_tables + table++] = scratch_block;
  NEURON_ASSERT(static_cast<int>(tiles.size()) == p.n_tiles && decode == p.n_decode && row == p.tokens &&
                l.block_tables + table == l.pick_rows);
  // The longest tiles first, so that the short ones fill the tail of the grid.
  std::stable_sort(tiles.begin(), tiles.end(), [](const auto& a, const auto& b) { return a[0] > b[0]; });
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    in[l.tiles + 2 * i] = tiles[i][1];
    in[l.tiles + 2 * i + 1] = tiles[i][2];
  }
  if (!p.padded) {
    std::copy(p.rows.begin(), p.rows.end(), in + l.head_rows);
    std::copy(p.picks.begin(), p.picks.end(), in + l.head_rows + p.rows.size());
  }
  std::copy(p.picks.begin(), p.picks.end(), in + l.pick_rows);
}

void split_passes(const Batch& batch, std::int32_t block_size, int max_tokens, bool want_logits,
                  std::vector<std::vector<PassSeq>>& passes) {
  NEURON_ASSERT(max_tokens > 0 && block_size > 0);
  passes.clear();
  int room = 0;  // tokens left in the last pass
  for (const SequenceStep& seq : batch.seqs) {
    const std::span<const std::int32_t> tokens(batch.tokens.data() + seq.token_begin,
                                               static_cast<std::size_t>(seq.num_tokens));
    const std::span<const std::int32_t> table(batch.block_ids.data() + seq.block_begin,
                                              static_cast<std::size_t>(seq.num_blocks));
    for (int done = 0; done < seq.num_tokens;) {
      if (room == 0) {
        passes.emplace_back();
        room = max_tokens;
      }
      const int n = std::min(room, seq.num_tokens - done);
      const bool last_piece = done + n == seq.num_tokens;
      PassSeq piece;
      piece.tokens = tokens.subspan(static_cast<std::size_t>(done), static_cast<std::size_t>(n));
      piece.position = seq.position + done;
      piece.state_slot = seq.state_slot;
      const std::int64_t end = static_cast<std::int64_t>(piece.position) + n;
      piece.blocks = table.first(static_cast<std::size_t>((end + block_size - 1) / block_size));
      const bool every_piece = seq.logits == LogitsWanted::all || seq.logits == LogitsWanted::hidden_all;
      const bool last_only = seq.logits == LogitsWanted::last || seq.logits == LogitsWanted::argmax ||
                             seq.logits == LogitsWanted::hidden_last;
      if (want_logits && (every_piece || (last_piece && last_only)))
        piece.logits = seq.logits;
      passes.back().push_back(piece);
      room -= n;
      done += n;
    }
  }
}

std::int64_t pass_rows(std::span<const PassSeq> seqs) noexcept {
  std::int64_t rows = 0;
  for (const PassSeq& s : seqs) {
    if (s.logits == LogitsWanted::last) rows += 1;
    if (s.logits == LogitsWanted::all) rows += static_cast<std::int64_t>(s.tokens.size());
  }
  return rows;
}

std::int64_t pass_picks(std::span<const PassSeq> seqs) noexcept {
  std::int64_t picks = 0;
  for (const PassSeq& s : seqs) picks += s.logits == LogitsWanted::argmax ? 1 : 0;
  return picks;
}

std::int64_t pass_hidden_rows(std::span<const PassSeq> seqs) noexcept {
  std::int64_t rows = 0;
  for (const PassSeq& s : seqs) {
    if (s.logits == LogitsWanted::hidden_last) rows += 1;
    if (s.logits == LogitsWanted::hidden_all) rows += static_cast<std::int64_t>(s.tokens.size());
  }
  return rows;
}

}  // namespace neuron::backend::cuda
