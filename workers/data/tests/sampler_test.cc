// The prompt sampler, the length filter and the problem stream: epochs are
// permutations, the same seed gives the same order, and a cursor saved
// anywhere (mid-epoch, at an epoch's end) and restored from its JSON gives
// exactly the continuation (docs/model.md, "Data sets and rewards").
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "workers/data/dataset.h"
#include "workers/data/problem_stream.h"
#include "workers/data/prompt_filter.h"
#include "workers/data/prompt_sampler.h"

namespace tandem::data {
namespace {

uint64_t FreshSeed() { return (uint64_t{std::random_device{}()} << 32) | std::random_device{}(); }

std::vector<size_t> Draw(PromptSampler& s, size_t k) {
  std::vector<size_t> out;
  for (size_t i = 0; i < k; ++i) out.push_back(s.Next());
  return out;
}

TEST(PromptSampler, EpochsArePermutationsAndDiffer) {
  const uint64_t seed = FreshSeed();
  PromptSampler s = *PromptSampler::Create(size_t{97}, seed);
  const std::vector<size_t> e0 = Draw(s, 97), e1 = Draw(s, 97);
  EXPECT_EQ(s.cursor().epoch, 1u);
  EXPECT_EQ(s.cursor().position, 97u);
  for (const auto& e : {e0, e1}) {
    std::vector<size_t> sorted = e;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < 97; ++i) ASSERT_EQ(sorted[i], i);
  }
  EXPECT_NE(e0, e1);
  PromptSampler same = *PromptSampler::Create(size_t{97}, seed);
  EXPECT_EQ(Draw(same, 97), e0);
  PromptSampler other = *PromptSampler::Create(size_t{97}, seed + 1);
  EXPECT_NE(Draw(other, 97), e0);
}

TEST(PromptSampler, ResumeFromJsonGivesTheSameContinuation) {
  const uint64_t seed = FreshSeed();
  std::mt19937_64 rng(seed);
  const size_t n = 1 + rng() % 50;
  PromptSampler ref = *PromptSampler::Create(n, seed);
  const std::vector<size_t> all = Draw(ref, 5 * n + 3);
  // Save at every point of the first three epochs (mid-epoch and at the end).
  for (size_t cut = 0; cut <= 3 * n; ++cut) {
    PromptSampler a = *PromptSampler::Create(n, seed);
    Draw(a, cut);
    const std::string saved = SamplerCursorToJson(a.cursor()).dump();
    StatusOr<SamplerCursor> c = SamplerCursorFromJson(nlohmann::json::parse(saved));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(*c, a.cursor());
    PromptSampler b = *PromptSampler::Restore(n, *c);
    const std::vector<size_t> rest = Draw(b, all.size() - cut);
    ASSERT_TRUE(std::equal(rest.begin(), rest.end(), all.begin() + static_cast<std::ptrdiff_t>(cut))) << "cut " << cut;
  }
}

TEST(PromptSampler, UnboundedCountsUp) {
  PromptSampler s = *PromptSampler::Create(std::nullopt, 5);
  EXPECT_EQ(Draw(s, 3), (std::vector<size_t>{0, 1, 2}));
  PromptSampler r = *PromptSampler::Restore(std::nullopt, *SamplerCursorFromJson(SamplerCursorToJson(s.cursor())));
  EXPECT_EQ(r.Next(), 3u);
}

TEST(PromptSampler, RefusesBadCursors) {
  EXPECT_FALSE(PromptSampler::Create(size_t{0}, 1).ok());
  StatusOr<PromptSampler> wrong = PromptSampler::Restore(size_t{10}, SamplerCursor{1, 0, 0, 11});
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("population of 11, this data set has 10"), std::string::npos);
  EXPECT_FALSE(PromptSampler::Restore(std::nullopt, SamplerCursor{1, 0, 0, 11}).ok());
  EXPECT_FALSE(PromptSampler::Restore(size_t{10}, SamplerCursor{1, 0, 11, 10}).ok());
  for (const char* bad : {R"([])", R"({"seed": 1, "epoch": 0, "position": 0})",
                          R"({"seed": -1, "epoch": 0, "position": 0, "population": 3})",
                          R"({"seed": 1, "epoch": "0", "position": 0, "population": 3})",
                          R"({"seed": 1, "epoch": 0, "position": 0.5, "population": 3})"}) {
    StatusOr<SamplerCursor> c = SamplerCursorFromJson(nlohmann::json::parse(bad));
    EXPECT_FALSE(c.ok()) << bad;
  }
  StatusOr<SamplerCursor> c = SamplerCursorFromJson(nlohmann::json::parse(R"({"seed": 1, "epoch": 0, "position": 0})"));
  EXPECT_NE(c.status().message().find("key 'population': missing"), std::string::npos);
}

// A bounded data set of known prompt lengths: problem i has a prompt of i
// characters.
class LengthsDataset final : public Dataset {
 public:
  explicit LengthsDataset(size_t n) : n_(n), verifier_(MakeVerifier("gsm8k", nullptr).value()) {}
  std::string_view name() const override { return "lengths"; }
  std::optional<size_t> size() const override { return n_; }
  StatusOr<Problem> Get(size_t i) const override {
    if (i >= n_) return InvalidArgument("out of range");
    return Problem{std::to_string(i), {{"user", std::string(i, 'x')}}, "0", std::nullopt};
  }
  const Verifier& verifier() const override { return *verifier_; }

 private:
  size_t n_;
  std::unique_ptr<Verifier> verifier_;
};

size_t Chars(const Problem& p) { return p.prompt.back().content.size(); }

TEST(PromptFilter, KeepsPromptsWithinTheLimit) {
  LengthsDataset d(40);
  StatusOr<FilteredIndices> f = FilterByPromptLength(d, {Chars, 9});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kept, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(f->dropped, 30u);
  EXPECT_EQ(f->longest_kept, 9u);
  LengthsDataset from_five(40);
  auto over_five = [](const Problem& p) { return Chars(p) + 5; };
  StatusOr<FilteredIndices> none = FilterByPromptLength(from_five, {over_five, 4});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no prompt of lengths fits in 4 tokens; the shortest has 5"), std::string::npos);
  auto synth = OpenDataset("synthetic-arith", nullptr);
  EXPECT_FALSE(FilterByPromptLength(**synth, {Chars, 100}).ok());
}

TEST(ProblemStream, FiltersAndResumesOnBoundedSets) {
  LengthsDataset d(60);
  const uint64_t seed = FreshSeed();
  ProblemStream ref = *ProblemStream::Create(d, seed, PromptLengthLimit{Chars, 19});
  EXPECT_EQ(ref.eligible(), 20u);
  EXPECT_EQ(ref.dropped(), 40u);
  std::vector<std::string> all;
  for (int i = 0; i < 70; ++i) {
    const Problem p = *ref.Next();
    EXPECT_LE(Chars(p), 19u);
    all.push_back(p.id);
  }
  std::set<std::string> first_epoch(all.begin(), all.begin() + 20);
  EXPECT_EQ(first_epoch.size(), 20u);
  ProblemStream a = *ProblemStream::Create(d, seed, PromptLengthLimit{Chars, 19});
  for (int i = 0; i < 33; ++i) (void)a.Next();
  const nlohmann::json saved = SamplerCursorToJson(a.cursor());
  ProblemStream b = *ProblemStream::Create(d, 999, PromptLengthLimit{Chars, 19}, *SamplerCursorFromJson(saved));
  for (int i = 33; i < 70; ++i) EXPECT_EQ(b.Next()->id, all[static_cast<size_t>(i)]);
  // The same cursor against another filter (another population) is refused.
  EXPECT_FALSE(ProblemStream::Create(d, seed, PromptLengthLimit{Chars, 29}, *SamplerCursorFromJson(saved)).ok());
}

TEST(ProblemStream, FiltersAndResumesOnUnboundedSets) {
  std::unique_ptr<Dataset> synth = OpenDataset("synthetic-arith", {{"seed", FreshSeed()}, {"level", {1, 5}}}).value();
  // Keep only short prompts (level 1's), about half of the draws.
  size_t shortest = SIZE_MAX, longest = 0;
  for (size_t i = 0; i < 50; ++i) {
    shortest = std::min(shortest, Chars(*synth->Get(i)));
    longest = std::max(longest, Chars(*synth->Get(i)));
  }
  const size_t cap = (shortest + longest) / 2;
  ProblemStream ref = *ProblemStream::Create(*synth, 0, PromptLengthLimit{Chars, cap});
  std::vector<std::string> all;
  for (int i = 0; i < 40; ++i) all.push_back(ref.Next()->id);
  EXPECT_GT(ref.dropped(), 0u);
  ProblemStream a = *ProblemStream::Create(*synth, 0, PromptLengthLimit{Chars, cap});
  for (int i = 0; i < 17; ++i) (void)a.Next();
  ProblemStream b = *ProblemStream::Create(*synth, 0, PromptLengthLimit{Chars, cap}, a.cursor());
  for (int i = 17; i < 40; ++i) EXPECT_EQ(b.Next()->id, all[static_cast<size_t>(i)]);
  ProblemStream hopeless = *ProblemStream::Create(*synth, 0, PromptLengthLimit{Chars, 1});
  StatusOr<Problem> p = hopeless.Next();
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace tandem::data
