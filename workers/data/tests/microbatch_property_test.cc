// The micro-batch planner over many seeded random inputs (fresh seeds every
// run, printed on failure): every sequence placed once, no micro-batch over
// the cap, equal micro-batch counts, split parts' tokens equal to a
// brute-force trie count of their sequences, determinism, the exact search
// never worse than the heuristics and equal to exhaustive enumeration on tiny
// inputs; and the planning time for 4096 sequences (docs/rl.md "Micro-batch
// planning").
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <map>

#include "workers/data/microbatch_cost.h"
#include "workers/data/microbatch_planner.h"
#include "workers/data/microbatch_search.h"

namespace tandem::data {
namespace {

// A training step takes seconds; an optimised build plans 4096 sequences in
// tens of milliseconds. Sanitizer and -O0 builds (CI's Sanitize) are ~30x slower.
#if defined(__SANITIZE_ADDRESS__) || !defined(__OPTIMIZE__)
constexpr double kPlanningLimitMs = 20000.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr double kPlanningLimitMs = 20000.0;
#else
constexpr double kPlanningLimitMs = 1000.0;
#endif
#else
constexpr double kPlanningLimitMs = 1000.0;
#endif

uint64_t FreshSeed() { return (uint64_t{std::random_device{}()} << 32) | std::random_device{}(); }

// Node count of the trie of `seqs`, by brute force: insert every sequence
// into a trie, one node per distinct prefix.
int64_t BruteForceTrieTokens(const std::vector<std::vector<int32_t>>& seqs) {
  std::map<std::pair<int64_t, int32_t>, int64_t> child;  // (node, token) -> node; 0 is the root
  int64_t nodes = 0;
  for (const auto& s : seqs) {
    int64_t node = 0;
    for (int32_t t : s) {
      auto [it, inserted] = child.try_emplace({node, t}, nodes + 1);
      if (inserted) ++nodes;
      node = it->second;
    }
  }
  return nodes;
}

// A group: a prompt, then responses over a tiny vocabulary (so they fork at
// many depths), some equal, some prefixes of others.
std::vector<std::vector<int32_t>> RandomGroup(std::mt19937_64& rng, int32_t max_prompt, int32_t max_response,
                                              int32_t responses) {
  std::vector<int32_t> prompt(1 + rng() % max_prompt);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 5);
  std::vector<std::vector<int32_t>> out;
  for (int32_t g = 0; g < responses; ++g) {
    std::vector<int32_t> s = prompt;
    if (!out.empty() && rng() % 6 == 0) {
      s = out[rng() % out.size()];  // a copy, or a prefix of an earlier one
      if (rng() % 2 && s.size() > 1) s.resize(1 + rng() % (s.size() - 1));
    } else {
      const int32_t len = static_cast<int32_t>(rng() % (max_response + 1));
      for (int32_t i = 0; i < len; ++i) s.push_back(static_cast<int32_t>(rng() % 3));
    }
    out.push_back(std::move(s));
  }
  return out;
}

struct Input {
  std::vector<std::vector<std::vector<int32_t>>> tokens;  // per item, in the item's order
  std::vector<PlanItem> items;
};

Input RandomInput(std::mt19937_64& rng, int32_t max_items) {
  Input in;
  const int32_t n = 1 + static_cast<int32_t>(rng() % max_items);
  for (int32_t i = 0; i < n; ++i) {
    std::vector<std::vector<int32_t>> group = RandomGroup(rng, 40, 60, rng() % 3 == 0 ? 1 : 1 + rng() % 8);
    TrieItem t = *TrieItemFromTokens(group);
    std::vector<std::vector<int32_t>> ordered;
    for (int32_t k : t.order) ordered.push_back(group[k]);
    in.tokens.push_back(std::move(ordered));
    in.items.push_back(std::move(t.item));
  }
  return in;
}

std::string Describe(const MicroBatchPlan& p) {
  std::string s = p.Summary() + "\n";
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    s += "rank " + std::to_string(r) + ":";
    for (const MicroBatch& mb : p.ranks[r].micro_batches) {
      s += " [";
      for (const ItemPart& part : mb.parts)
        s += " " + std::to_string(part.item) + ":" + std::to_string(part.begin) + "-" + std::to_string(part.end);
      s += " ]=" + std::to_string(mb.cost);
    }
    s += "\n";
  }
  return s;
}

PlanScore ScoreOf(const MicroBatchPlan& p) {
  PlanScore s{p.micro_batches_per_rank, 0};
  for (const RankPlan& r : p.ranks) s.max_rank_cost = std::max(s.max_rank_cost, r.cost);
  return s;
}

// Every invariant of a plan, against the input's real tokens.
void CheckPlan(const Input& in, const MicroBatchOptions& o, const MicroBatchPlan& p) {
  SCOPED_TRACE(Describe(p));
  ASSERT_EQ(p.ranks.size(), static_cast<size_t>(o.ranks));
  std::vector<std::vector<int>> placed(in.items.size());
  for (size_t i = 0; i < in.items.size(); ++i) placed[i].assign(in.items[i].lengths.size(), 0);
  std::vector<int> parts_of(in.items.size(), 0);
  int64_t total = 0;
  for (const RankPlan& r : p.ranks) {
    ASSERT_EQ(r.micro_batches.size(), static_cast<size_t>(p.micro_batches_per_rank));
    int64_t rank_cost = 0;
    for (const MicroBatch& mb : r.micro_batches) {
      EXPECT_LE(mb.cost, o.token_cap);
      int64_t cost = 0, tokens = 0;
      for (const ItemPart& part : mb.parts) {
        const PlanItem& item = in.items[part.item];
        ASSERT_LT(part.begin, part.end);
        ASSERT_LE(part.end, item.num_sequences());
        ++parts_of[part.item];
        std::vector<std::vector<int32_t>> seqs;
        std::vector<int32_t> positions;
        int64_t flat = 0, flat_cost = 0;
        for (int32_t k = part.begin; k < part.end; ++k) {
          ++placed[part.item][k];
          seqs.push_back(in.tokens[part.item][k]);
          positions.push_back(k);
          flat += item.lengths[k];
          flat_cost += RoundUp(item.lengths[k], o.cost.alignment);
        }
        const int64_t trie = BruteForceTrieTokens(seqs);
        EXPECT_EQ(CompactTokens(item, positions), trie);
        EXPECT_EQ(part.tokens, o.cost.packing ? trie : flat);
        EXPECT_EQ(part.cost, o.cost.packing ? RoundUp(trie, o.cost.alignment) : flat_cost);
        cost += part.cost;
        tokens += part.tokens;
      }
      EXPECT_EQ(mb.cost, cost);
      EXPECT_EQ(mb.tokens, tokens);
      rank_cost += cost;
    }
    EXPECT_EQ(r.cost, rank_cost);
    total += rank_cost;
  }
  EXPECT_EQ(p.total_cost, total);
  int split = 0;
  for (size_t i = 0; i < in.items.size(); ++i) {
    for (size_t k = 0; k < placed[i].size(); ++k) ASSERT_EQ(placed[i][k], 1) << "item " << i << " sequence " << k;
    const int64_t whole = o.cost.Cost(in.items[i], 0, in.items[i].num_sequences());
    if (whole <= o.token_cap) EXPECT_EQ(parts_of[i], 1) << "item " << i << " fits whole but was split";
    if (parts_of[i] > 1) ++split;
  }
  EXPECT_EQ(p.split_items, split);
  const PlanScore score = ScoreOf(p);
  EXPECT_GE(score.max_rank_cost, p.lower_bound_cost);
}

MicroBatchOptions RandomOptions(std::mt19937_64& rng, const Input& in) {
  MicroBatchOptions o;
  o.ranks = 1 + static_cast<int32_t>(rng() % 4);
  o.cost.alignment = std::vector<int32_t>{1, 1, 8, 64}[rng() % 4];
  o.cost.packing = rng() % 4 != 0;
  // A cap at least the longest sequence alone, sometimes below whole tries.
  int64_t longest = 0;
  for (const PlanItem& item : in.items)
    for (int32_t len : item.lengths) longest = std::max(longest, RoundUp(len, o.cost.alignment));
  o.token_cap = longest + static_cast<int64_t>(rng() % (2 * longest + 1));
  return o;
}

TEST(MicroBatchProperty, InvariantsOverRandomInputs) {
  const uint64_t seed = FreshSeed();
  constexpr int kCases = 600;
  int exact = 0, ffd = 0, kk = 0, split = 0;
  for (int c = 0; c < kCases; ++c) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " case " + std::to_string(c));
    std::mt19937_64 rng(seed + c);
    const Input in = RandomInput(rng, c % 2 ? 10 : 60);
    const MicroBatchOptions o = RandomOptions(rng, in);
    StatusOr<MicroBatchPlan> p = PlanMicroBatches(in.items, o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    CheckPlan(in, o, *p);
    if (HasFatalFailure()) return;
    // Deterministic: the same input gives the same plan.
    EXPECT_EQ(Describe(*PlanMicroBatches(in.items, o)), Describe(*p));
    exact += p->algorithm == PlanAlgorithm::kExact;
    ffd += p->algorithm == PlanAlgorithm::kFirstFitDecreasing;
    kk += p->algorithm == PlanAlgorithm::kKarmarkarKarp;
    split += p->split_items > 0;
  }
  std::printf("[microbatch] random cases=%d seed=%llu exact=%d ffd=%d karmarkar_karp=%d with_split=%d\n", kCases,
              static_cast<unsigned long long>(seed), exact, ffd, kk, split);
  EXPECT_GT(split, kCases / 10);  // the generator does exercise splitting
}

TEST(MicroBatchProperty, EveryAlgorithmHoldsTheInvariants) {
  const uint64_t seed = FreshSeed();
  constexpr int kCases = 200;
  for (int c = 0; c < kCases; ++c) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " case " + std::to_string(c));
    std::mt19937_64 rng(seed + c);
    const Input in = RandomInput(rng, 40);
    MicroBatchOptions o = RandomOptions(rng, in);
    o.exact_node_budget = 5000;
    for (PlanAlgorithm a : {PlanAlgorithm::kFirstFitDecreasing, PlanAlgorithm::kKarmarkarKarp, PlanAlgorithm::kExact}) {
      o.algorithm = a;
      StatusOr<MicroBatchPlan> p = PlanMicroBatches(in.items, o);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(p->algorithm, a);
      CheckPlan(in, o, *p);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(MicroBatchProperty, ExactNeverWorseThanTheHeuristics) {
  const uint64_t seed = FreshSeed();
  constexpr int kCases = 400;
  int proven = 0, strictly_better = 0;
  for (int c = 0; c < kCases; ++c) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " case " + std::to_string(c));
    std::mt19937_64 rng(seed + c);
    // Up to 12 plain sequences (units) of varied length.
    std::vector<PlanItem> items;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) items.push_back(PlanItem::Sequence(1 + static_cast<int32_t>(rng() % 100)));
    MicroBatchOptions o;
    o.ranks = 1 + static_cast<int32_t>(rng() % 4);
    o.token_cap = 100 + static_cast<int64_t>(rng() % 200);
    StatusOr<MicroBatchPlan> ex = PlanMicroBatches(items, o);
    ASSERT_TRUE(ex.ok());
    ASSERT_EQ(ex->algorithm, PlanAlgorithm::kExact);
    proven += ex->proven_optimal;
    for (PlanAlgorithm a : {PlanAlgorithm::kFirstFitDecreasing, PlanAlgorithm::kKarmarkarKarp}) {
      o.algorithm = a;
      const PlanScore h = ScoreOf(*PlanMicroBatches(items, o));
      EXPECT_LE(ScoreOf(*ex), h) << PlanAlgorithmName(a);
      strictly_better += ScoreOf(*ex) < h;
    }
  }
  std::printf("[microbatch] exact vs heuristics cases=%d seed=%llu proven_optimal=%d strictly_better=%d\n", kCases,
              static_cast<unsigned long long>(seed), proven, strictly_better);
}

// Fewest bins for `costs` under `cap`, exhaustively (tiny inputs).
int32_t MinBins(const std::vector<int64_t>& costs, int64_t cap) {
  int32_t best = static_cast<int32_t>(costs.size());
  std::vector<int64_t> bins;
  std::function<void(size_t)> go = [&](size_t i) {
    if (static_cast<int32_t>(bins.size()) >= best) return;
    if (i == costs.size()) {
      best = static_cast<int32_t>(bins.size());
      return;
    }
    for (size_t b = 0; b < bins.size(); ++b)  // by index: the recursion grows `bins`
      if (bins[b] + costs[i] <= cap) {
        bins[b] += costs[i];
        go(i + 1);
        bins[b] -= costs[i];
      }
    bins.push_back(costs[i]);
    go(i + 1);
    bins.pop_back();
  };
  go(0);
  return costs.empty() ? 0 : best;
}

TEST(MicroBatchProperty, ExactMatchesExhaustiveEnumeration) {
  const uint64_t seed = FreshSeed();
  constexpr int kCases = 300;
  for (int c = 0; c < kCases; ++c) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " case " + std::to_string(c));
    std::mt19937_64 rng(seed + c);
    const int n = 1 + static_cast<int>(rng() % 7);
    const int32_t ranks = 1 + static_cast<int32_t>(rng() % 3);
    const int64_t cap = 100;
    std::vector<int64_t> costs(n);
    for (int64_t& x : costs) x = 1 + static_cast<int64_t>(rng() % 100);
    // Every assignment of units to ranks; each rank packed as tightly as possible.
    PlanScore best{INT32_MAX, 0};
    int64_t combos = 1;
    for (int i = 0; i < n; ++i) combos *= ranks;
    for (int64_t code = 0; code < combos; ++code) {
      std::vector<std::vector<int64_t>> per_rank(ranks);
      int64_t x = code;
      for (int i = 0; i < n; ++i, x /= ranks) per_rank[x % ranks].push_back(costs[i]);
      PlanScore s{0, 0};
      for (const auto& r : per_rank) {
        s.micro_batches = std::max(s.micro_batches, MinBins(r, cap));
        int64_t load = 0;
        for (int64_t v : r) load += v;
        s.max_rank_cost = std::max(s.max_rank_cost, load);
      }
      best = std::min(best, s);
    }
    const BinAssignment ffd = FirstFitDecreasing(costs, cap, ranks);
    const ExactResult ex = ExactSearch(costs, cap, ranks, ffd, 10'000'000);
    ASSERT_TRUE(ex.proven_optimal);
    EXPECT_EQ(Score(ex.plan, costs), best);
  }
}

TEST(MicroBatchProperty, PlanningTimeFor4096Sequences) {
  const uint64_t seed = FreshSeed();
  std::mt19937_64 rng(seed);
  // 512 groups x 8 responses: prompts up to 256 tokens, responses up to 1024.
  std::vector<PlanItem> tries, flat;
  for (int g = 0; g < 512; ++g) {
    const int32_t prompt = 32 + static_cast<int32_t>(rng() % 225);
    PlanItem t;
    for (int r = 0; r < 8; ++r) {
      const int32_t len = prompt + 1 + static_cast<int32_t>(rng() % 1024);
      t.lengths.push_back(len);
      t.shared_prefix.push_back(r == 0 ? 0 : std::min({prompt, len, t.lengths[r - 1]}));
      flat.push_back(PlanItem::Sequence(len));
    }
    tries.push_back(std::move(t));
  }
  struct Run { const char* name; const std::vector<PlanItem>* items; int64_t cap; PlanAlgorithm a; };
  for (const Run& run : {Run{"tries auto", &tries, 16384, PlanAlgorithm::kAuto},
                         Run{"tries ffd", &tries, 16384, PlanAlgorithm::kFirstFitDecreasing},
                         Run{"tries kk", &tries, 16384, PlanAlgorithm::kKarmarkarKarp},
                         Run{"tries split", &tries, 2048, PlanAlgorithm::kAuto},
                         Run{"flat auto", &flat, 16384, PlanAlgorithm::kAuto},
                         Run{"flat kk", &flat, 16384, PlanAlgorithm::kKarmarkarKarp}}) {
    MicroBatchOptions o;
    o.token_cap = run.cap;
    o.ranks = 8;
    o.cost.alignment = 64;
    o.algorithm = run.a;
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<MicroBatchPlan> p = PlanMicroBatches(*run.items, o);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    std::printf("[microbatch] plan 4096 sequences (%s, cap %lld, 8 ranks, alignment 64): %.1f ms  %s\n", run.name,
                static_cast<long long>(run.cap), ms, p->Summary().c_str());
    EXPECT_LT(ms, kPlanningLimitMs) << "planning must stay well under a training step";
  }
}

}  // namespace
}  // namespace tandem::data
