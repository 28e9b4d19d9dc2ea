#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/text_stream.hpp"

namespace neuron::engine {
namespace {

struct Collected {
  std::string text, reasoning;
  std::vector<std::string> text_chunks;  // what each push released as content
  bool stopped = false;
};

Collected run(TextStreamOptions options, const std::vector<std::string>& pieces) {
  TextStream stream(std::move(options));
  Collected c;
  for (const auto& p : pieces) {
    TextChunk chunk = stream.push(p);
    c.text += chunk.text;
    c.reasoning += chunk.reasoning;
    c.text_chunks.push_back(chunk.text);
  }
  TextChunk last = stream.finish();
  c.text += last.text;
  c.reasoning += last.reasoning;
  c.stopped = stream.stopped();
  return c;
}

TEST(TextStream, PassesTextThroughWithoutOptions) {
  Collected c = run({}, {"Hel", "lo", " wor", "ld"});
  EXPECT_EQ(c.text, "Hello world");
  EXPECT_EQ(c.reasoning, "");
  EXPECT_FALSE(c.stopped);
  // Nothing to hold back: every piece is released as it arrives.
  EXPECT_EQ(c.text_chunks, (std::vector<std::string>{"Hel", "lo", " wor", "ld"}));
}

TEST(TextStream, StopStringAcrossTokenBoundariesIsNeverEmitted) {
  Collected c = run({.stop = {"END"}}, {"abc E", "N", "D more", " text"});
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.text, "abc ");
  // "E" and "N" were held back while they could still start "END".
  EXPECT_EQ(c.text_chunks[0], "abc ");
  EXPECT_EQ(c.text_chunks[1], "");
  EXPECT_EQ(c.text_chunks[2], "");
}

TEST(TextStream, HeldBackPrefixIsReleasedWhenItTurnsOutNotToBeAStop) {
  Collected c = run({.stop = {"END"}}, {"the E", "NTRY", " is"});
  EXPECT_FALSE(c.stopped);
  EXPECT_EQ(c.text, "the ENTRY is");
  EXPECT_EQ(c.text_chunks[0], "the ");
  EXPECT_EQ(c.text_chunks[1], "ENTRY");
}

TEST(TextStream, HeldBackPrefixIsReleasedAtFinish) {
  Collected c = run({.stop = {"</answer>"}}, {"42 </ans"});
  EXPECT_FALSE(c.stopped);
  EXPECT_EQ(c.text_chunks[0], "42 ");
  EXPECT_EQ(c.text, "42 </ans");
}

TEST(TextStream, OverlappingPrefixesFindTheMatch) {
  // "aab" inside "aaab": the first held "aa" is not the start of the match.
  Collected c = run({.stop = {"aab"}}, {"xa", "a", "ab", "zzz"});
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.text, "xa");
}

TEST(TextStream, EarliestOfSeveralStopStringsWins) {
  Collected c = run({.stop = {"world", "lo w"}}, {"hello world"});
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.text, "hel");
}

TEST(TextStream, StopStringInsideOnePieceCutsIt) {
  Collected c = run({.stop = {"\n\n"}}, {"line one\n\nline two"});
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.text, "line one");
}

TEST(TextStream, PiecesAfterAStopAreIgnored) {
  TextStream stream({.stop = {"x"}});
  EXPECT_EQ(stream.push("ax").text, "a");
  EXPECT_TRUE(stream.stopped());
  EXPECT_TRUE(stream.push("more").empty());
  EXPECT_TRUE(stream.finish().empty());
}

TEST(TextStream, EmptyStopStringsAreIgnored) {
  Collected c = run({.stop = {""}}, {"abc"});
  EXPECT_FALSE(c.stopped);
  EXPECT_EQ(c.text, "abc");
}

TEST(TextStream, MultiByteStopStringHoldsWholeCharacters) {
  // "日本" arrives one character per piece; "日" alone is held, never split.
  Collected c = run({.stop = {"日本"}}, {"今", "日", "は"});
  EXPECT_FALSE(c.stopped);
  EXPECT_EQ(c.text_chunks, (std::vector<std::string>{"今", "", "日は"}));
  Collected d = run({.stop = {"日本"}}, {"今", "日", "本語"});
  EXPECT_TRUE(d.stopped);
  EXPECT_EQ(d.text, "今");
}

TEST(TextStream, SplitsReasoningAndDropsTags) {
  Collected c = run({.split_reasoning = true}, {"<think>", "\nLet me", " think.\n", "</think>", "\n\nThe answer."});
  EXPECT_EQ(c.reasoning, "\nLet me think.\n");
  EXPECT_EQ(c.text, "\n\nThe answer.");
}

TEST(TextStream, TagsSplitAcrossPiecesAreRecognised) {
  Collected c = run({.split_reasoning = true}, {"<th", "ink>hm", "m</th", "in", "k>ok"});
  EXPECT_EQ(c.reasoning, "hmm");
  EXPECT_EQ(c.text, "ok");
  EXPECT_EQ(c.text_chunks.front(), "");  // "<th" might have been a tag
}

TEST(TextStream, PromptInReasoningStartsInsideThink) {
  Collected c = run({.split_reasoning = true, .start_in_reasoning = true}, {"plan", "</think>", "done"});
  EXPECT_EQ(c.reasoning, "plan");
  EXPECT_EQ(c.text, "done");
}

TEST(TextStream, UnclosedReasoningIsFlushedAsReasoning) {
  Collected c = run({.split_reasoning = true}, {"<think>still thinking </thi"});
  EXPECT_EQ(c.reasoning, "still thinking </thi");
  EXPECT_EQ(c.text, "");
}

TEST(TextStream, WithoutSplittingTagsStayInTheText) {
  Collected c = run({}, {"<think>x</think>y"});
  EXPECT_EQ(c.text, "<think>x</think>y");
  Collected d = run({.start_in_reasoning = true}, {"a</think>b"});
  EXPECT_EQ(d.text, "a</think>b");  // start_in_reasoning means nothing without splitting
}

TEST(TextStream, StopStringInsideReasoningEndsTheRequest) {
  Collected c = run({.stop = {"STOP"}, .split_reasoning = true}, {"<think>ab", "ST", "OP", "cd"});
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.reasoning, "ab");
  EXPECT_EQ(c.text, "");
}

TEST(TextStream, HeldPrefixLengthIsTheLongestProperPrefix) {
  EXPECT_EQ(held_prefix_length("abcab", {"abc"}), 2u);
  EXPECT_EQ(held_prefix_length("abc", {"abc"}), 0u);  // a full match is not "maybe"
  EXPECT_EQ(held_prefix_length("xyz", {"abc", "zq"}), 1u);
  EXPECT_EQ(held_prefix_length("", {"abc"}), 0u);
  EXPECT_EQ(held_prefix_length("a", {""}), 0u);
}

}  // namespace
}  // namespace neuron::engine
