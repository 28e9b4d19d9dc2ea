// The host side of a CUDA step (backend/cuda/step_inputs): how a batch is cut
// into passes and how a pass's inputs are packed for the kernels. Plain C++:
// runs without a GPU wherever the CUDA backend is built.
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <numeric>
#include <vector>

#include "backend/cuda/step_inputs.hpp"

namespace neuron::backend::cuda {
namespace {

std::vector<std::int32_t> range(std::int32_t begin, std::int32_t count) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(count));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

std::vector<std::int32_t> section(const std::vector<std::int32_t>& buf, int at, int count) {
  return {buf.begin() + at, buf.begin() + at + count};
}

TEST(CudaStepInputs, MixedPassPacksEverySectionInPlace) {
  const std::int32_t bs = 16;
  const auto decode_a = range(100, 1), prompt = range(200, 70), tail = range(300, 5), decode_b = range(400, 1);
  const std::vector<std::int32_t> t0 = {3, 7}, t1 = {1, 2, 4, 5, 6}, t2 = {20, 21, 22, 23, 24, 25, 26, 27, 28},
                                  t3 = {11};
  std::vector<PassSeq> seqs = {
      {decode_a, 20, t0, LogitsWanted::last},  // decode at position 20: block 7, slot 4
      {prompt, 0, t1, LogitsWanted::all},      // 70 rows: two tiles
      {tail, 130, t2, LogitsWanted::last},     // 5 rows at 130..134: one tile, the longest context
      {decode_b, 0, t3, LogitsWanted::none},
  };
  const PassPlan p = plan_pass(seqs, 0);
  EXPECT_FALSE(p.padded);
  EXPECT_FALSE(p.decode_only);
  EXPECT_EQ(p.tokens, 77);
  EXPECT_EQ(p.seqs, 4);
  EXPECT_EQ(p.n_decode, 2);
  EXPECT_EQ(p.n_tiles, 3);
  EXPECT_EQ(p.max_decode_ctx, 21);
  std::vector<std::int32_t> want_rows = {0};
  for (int i = 1; i <= 70; ++i) want_rows.push_back(i);
  want_rows.push_back(75);
  EXPECT_EQ(p.rows, want_rows);

  std::vector<std::int32_t> buf(static_cast<std::size_t>(p.layout.end) + 3, -7);
  pack_pass(seqs, p, bs, 99, buf);
  const StepLayout& l = p.layout;
  EXPECT_EQ(l.end, 3 * 77 + 6 * 4 + 2 + 2 * 3 + 72 + 17);
  EXPECT_EQ(buf[static_cast<std::size_t>(l.end)], -7) << "wrote past the layout";
  std::vector<std::int32_t> tokens = decode_a;
  tokens.insert(tokens.end(), prompt.begin(), prompt.end());
  tokens.insert(tokens.end(), tail.begin(), tail.end());
  tokens.push_back(decode_b[0]);
  EXPECT_EQ(section(buf, l.tokens, 77), tokens);
  EXPECT_EQ(buf[l.positions], 20);
  EXPECT_EQ(buf[l.positions + 1 + 69], 69);
  EXPECT_EQ(buf[l.positions + 71], 130);
  EXPECT_EQ(buf[l.slots], 7 * bs + 4);
  EXPECT_EQ(buf[l.slots + 1 + 17], 2 * bs + 1);   // prompt position 17
  EXPECT_EQ(buf[l.slots + 71 + 4], 28 * bs + 6);  // position 134 = block 8 of t2, slot 6
  EXPECT_EQ(buf[l.slots + 76], 11 * bs);
  EXPECT_EQ(section(buf, l.q_start, 4), (std::vector<std::int32_t>{0, 1, 71, 76}));
  EXPECT_EQ(section(buf, l.num_tokens, 4), (std::vector<std::int32_t>{1, 70, 5, 1}));
  EXPECT_EQ(section(buf, l.position, 4), (std::vector<std::int32_t>{20, 0, 130, 0}));
  EXPECT_EQ(section(buf, l.block_offset, 4), (std::vector<std::int32_t>{0, 2, 7, 16}));
  EXPECT_EQ(section(buf, l.ctx_len, 4), (std::vector<std::int32_t>{21, 70, 135, 1}));
  EXPECT_EQ(section(buf, l.decode_items, 2), (std::vector<std::int32_t>{0, 3}));
  // Prefill tiles only, longest context first: (2, 0) ends at 135, (1, 64) at 70, (1, 0) at 64.
  EXPECT_EQ(section(buf, l.tiles, 6), (std::vector<std::int32_t>{2, 0, 1, 64, 1, 0}));
  EXPECT_EQ(section(buf, l.head_rows, 72), want_rows);
  std::vector<std::int32_t> tables = t0;
  for (const auto* t : {&t1, &t2, &t3}) tables.insert(tables.end(), t->begin(), t->end());
  EXPECT_EQ(section(buf, l.block_tables, 17), tables);
}

TEST(CudaStepInputs, GraphPassPadsWithTheScratchBlockAndKeepsItsLayout) {
  const std::int32_t bs = 16, scratch = 50;
  const std::vector<std::int32_t> tok = {5, 6, 7};
  const std::vector<std::int32_t> ta = {1, 2, 3}, tb = {9}, tc = {4, 8};
  std::vector<PassSeq> seqs = {{std::span(tok).subspan(0, 1), 40, ta, LogitsWanted::last},
                               {std::span(tok).subspan(1, 1), 3, tb, LogitsWanted::argmax},
                               {std::span(tok).subspan(2, 1), 17, tc, LogitsWanted::last}};
  const PassPlan p = plan_pass(seqs, 4);
  EXPECT_TRUE(p.padded);
  EXPECT_TRUE(p.decode_only);
  EXPECT_EQ(p.tokens, 4);
  EXPECT_EQ(p.seqs, 4);
  EXPECT_EQ(p.n_decode, 4);
  EXPECT_EQ(p.max_decode_ctx, 41) << "the real sequences' (the grid is picked from it)";
  EXPECT_EQ(p.rows, (std::vector<std::int32_t>{0, 2}));
  EXPECT_EQ(p.picks, (std::vector<std::int32_t>{1}));
  seqs[0].state_slot = 2;  // a hybrid's recurrent-state slots; the padding sequence gets the scratch slot
  seqs[1].state_slot = 0;
  seqs[2].state_slot = 5;
  std::vector<std::int32_t> buf(static_cast<std::size_t>(p.layout.end));
  pack_pass(seqs, p, bs, scratch, buf, 11);
  const StepLayout& l = p.layout;
  EXPECT_EQ(section(buf, l.state_slot, 4), (std::vector<std::int32_t>{2, 0, 5, 11}));
  EXPECT_EQ(section(buf, l.tokens, 4), (std::vector<std::int32_t>{5, 6, 7, 0}));
  EXPECT_EQ(section(buf, l.slots, 4), (std::vector<std::int32_t>{3 * bs + 8, 9 * bs + 3, 8 * bs + 1, scratch * bs}));
  EXPECT_EQ(section(buf, l.ctx_len, 4), (std::vector<std::int32_t>{41, 4, 18, 1}));
  EXPECT_EQ(section(buf, l.decode_items, 4), (std::vector<std::int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(buf[l.block_offset + 3], 6);
  EXPECT_EQ(section(buf, l.block_tables, 7), (std::vector<std::int32_t>{1, 2, 3, 9, 4, 8, scratch}));
  EXPECT_EQ(l.pick_rows, l.block_tables + 7) << "picks after the tables, outside the graph's layout";
  EXPECT_EQ(section(buf, l.pick_rows, 1), (std::vector<std::int32_t>{1}));
  EXPECT_EQ(l.end, l.pick_rows + 1);
  // Another step of the same batch size with longer tables: the same layout up to the tables.
  const std::vector<std::int32_t> longer = range(10, 30);
  std::vector<PassSeq> other = {{std::span(tok).subspan(0, 1), 470, longer, LogitsWanted::last}};
  const PassPlan q = plan_pass(other, 4);
  EXPECT_EQ(q.layout.block_tables, l.block_tables);
  EXPECT_EQ(q.layout.decode_items, l.decode_items);
  EXPECT_EQ(q.layout.ctx_len, l.ctx_len);
  EXPECT_EQ(q.layout.end, l.block_tables + 31);
}

TEST(CudaStepInputs, StepsLongerThanAPassGoInPieces) {
  const std::int32_t bs = 16;
  Batch batch;
  const auto a = range(0, 3000), b = range(0, 2000), c = range(0, 1);
  const auto ta = range(0, 188), tb = range(200, 132), tc = range(400, 2);
  batch.add(a, 0, ta, LogitsWanted::last);
  batch.add(b, 100, tb, LogitsWanted::last);  // positions 100..2099
  batch.add(c, 20, tc, LogitsWanted::last);
  batch.seqs[1].state_slot = 3;  // as a hybrid's: every piece carries it
  std::vector<std::vector<PassSeq>> passes;
  split_passes(batch, bs, 4096, true, passes);
  ASSERT_EQ(passes.size(), 2u);
  ASSERT_EQ(passes[0].size(), 2u);
  ASSERT_EQ(passes[1].size(), 2u);
  EXPECT_EQ(passes[0][0].tokens.size(), 3000u);
  EXPECT_EQ(passes[0][0].blocks.size(), 188u);  // ceil(3000 / 16)
  EXPECT_EQ(passes[0][0].logits, LogitsWanted::last);
  EXPECT_EQ(passes[0][1].tokens.size(), 1096u);
  EXPECT_EQ(passes[0][1].position, 100);
  EXPECT_EQ(passes[0][1].blocks.size(), 75u);  // positions up to 1196
  EXPECT_EQ(passes[0][1].logits, LogitsWanted::none) << "not its last piece";
  EXPECT_EQ(passes[1][0].position, 1196);
  EXPECT_EQ(passes[0][1].state_slot, 3);
  EXPECT_EQ(passes[1][0].state_slot, 3);
  EXPECT_EQ(passes[1][1].state_slot, -1);
  EXPECT_EQ(passes[1][0].tokens.data(), batch.tokens.data() + 3000 + 1096);
  EXPECT_EQ(passes[1][0].tokens.size(), 904u);
  EXPECT_EQ(passes[1][0].blocks.size(), 132u);  // ceil(2100 / 16)
  EXPECT_EQ(passes[1][0].logits, LogitsWanted::last);
  EXPECT_EQ(passes[1][1].tokens.size(), 1u);
  EXPECT_EQ(pass_rows(passes[0]), 1);
  EXPECT_EQ(pass_rows(passes[1]), 2);

  // `all` asks every piece's rows; no logits asks none.
  batch.clear();
  batch.add(a, 0, ta, LogitsWanted::all);
  batch.add(b, 0, range(200, 125), LogitsWanted::all);
  split_passes(batch, bs, 4096, true, passes);
  ASSERT_EQ(passes.size(), 2u);
  EXPECT_EQ(pass_rows(passes[0]), 4096);
  EXPECT_EQ(pass_rows(passes[1]), 904);
  split_passes(batch, bs, 4096, false, passes);
  EXPECT_EQ(pass_rows(passes[0]) + pass_rows(passes[1]), 0);

  // `argmax` is one pick from the last piece only, and none without logits.
  batch.clear();
  batch.add(a, 0, ta, LogitsWanted::argmax);
  batch.add(b, 100, tb, LogitsWanted::argmax);
  split_passes(batch, bs, 4096, true, passes);
  ASSERT_EQ(passes.size(), 2u);
  EXPECT_EQ(passes[0][1].logits, LogitsWanted::none) << "not its last piece";
  EXPECT_EQ(pass_picks(passes[0]), 1);
  EXPECT_EQ(pass_picks(passes[1]), 1);
  EXPECT_EQ(pass_rows(passes[0]) + pass_rows(passes[1]), 0);
  split_passes(batch, bs, 4096, false, passes);
  EXPECT_EQ(pass_picks(passes[0]) + pass_picks(passes[1]), 0);
}

TEST(CudaStepInputs, HiddenRowsComeFromEveryPieceOrTheLastAndNeverFromTheHead) {
  const std::int32_t bs = 16;
  const auto a = range(0, 3000), b = range(0, 2000);
  Batch batch;
  batch.add(a, 0, range(0, 188), LogitsWanted::hidden_all);
  batch.add(b, 100, range(200, 132), LogitsWanted::hidden_last);
  std::vector<std::vector<PassSeq>> passes;
  split_passes(batch, bs, 4096, true, passes);
  ASSERT_EQ(passes.size(), 2u);
  EXPECT_EQ(pass_hidden_rows(passes[0]), 3000) << "a's every row; b's first piece is not its last";
  EXPECT_EQ(passes[0][1].logits, LogitsWanted::none);
  EXPECT_EQ(pass_hidden_rows(passes[1]), 1);
  for (const auto& pass : passes) {
    EXPECT_EQ(pass_rows(pass) + pass_picks(pass), 0) << "hidden rows take no LM head";
    const PassPlan p = plan_pass(pass, 0);
    EXPECT_TRUE(p.rows.empty() && p.picks.empty());
  }
  split_passes(batch, bs, 4096, false, passes);  // a worker
  EXPECT_EQ(pass_hidden_rows(passes[0]) + pass_hidden_rows(passes[1]), 0);
}

TEST(CudaStepInputs, EagerHeadRowsAreLogitsRowsThenPicks) {
  const auto a = range(0, 5), b = range(10, 1), c = range(20, 3);
  const std::vector<std::int32_t> ta = {1}, tb = {2}, tc = {3};
  std::vector<PassSeq> seqs = {{a, 0, ta, LogitsWanted::argmax},  // rows 0..4: pick of row 4
                               {b, 7, tb, LogitsWanted::last},    // row 5
                               {c, 0, tc, LogitsWanted::argmax}}; // rows 6..8: pick of row 8
  const PassPlan p = plan_pass(seqs, 0);
  EXPECT_EQ(p.rows, (std::vector<std::int32_t>{5}));
  EXPECT_EQ(p.picks, (std::vector<std::int32_t>{4, 8}));
  std::vector<std::int32_t> buf(static_cast<std::size_t>(p.layout.end));
  pack_pass(seqs, p, 16, 99, buf);
  EXPECT_EQ(section(buf, p.layout.head_rows, 3), (std::vector<std::int32_t>{5, 4, 8}));
  EXPECT_EQ(section(buf, p.layout.pick_rows, 2), (std::vector<std::int32_t>{4, 8}));
  EXPECT_EQ(p.layout.end, p.layout.pick_rows + 2);
}

}  // namespace
}  // namespace neuron::backend::cuda

#else
TEST(CudaStepInputs, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
