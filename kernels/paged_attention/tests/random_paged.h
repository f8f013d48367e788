// Random paged-attention problems for the CPU and GPU tests: block tables
// drawn from a shuffled pool, some sequences sharing their leading full
// blocks with the sequence before them (a shared prompt), table rows wider
// than needed with garbage past each sequence's blocks, and every pool slot
// that no sequence may read (spare blocks, the tail of a last block) NaN, so
// a read out of place shows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/paged_attention/paged_attention.h"
#include "kernels/testing/compare.h"

namespace tandem::kernels::testing {

struct PagedProblem {
  PagedAttentionShape s;
  std::vector<float> q, key_blocks, value_blocks;
  std::vector<int32_t> block_table, context_lens, q_starts;
};

struct PagedCase {
  int32_t heads, kv_heads, head_dim, block_size;
  std::vector<int32_t> context_lens;
  std::vector<int32_t> q_lens;
  float q_range = 1.f;  // q uniform in [-q_range, q_range] (larger: peakier softmax)
};

inline PagedProblem MakePagedProblem(std::mt19937_64& rng, const PagedCase& c, int32_t spare_blocks = 3,
                                     int32_t extra_width = 2) {
  PagedProblem p;
  const int32_t B = static_cast<int32_t>(c.context_lens.size()), bs = c.block_size;
  std::vector<int32_t> nblocks(static_cast<size_t>(B));
  int32_t widest = 0;
  for (int32_t b = 0; b < B; ++b) {
    nblocks[static_cast<size_t>(b)] = (c.context_lens[static_cast<size_t>(b)] + bs - 1) / bs;
    widest = std::max(widest, nblocks[static_cast<size_t>(b)]);
  }
  // Leading full blocks shared with the previous sequence (about half the sequences).
  std::vector<int32_t> shared(static_cast<size_t>(B), 0);
  std::bernoulli_distribution coin(0.5);
  for (int32_t b = 1; b < B; ++b) {
    const int32_t full = std::min(c.context_lens[static_cast<size_t>(b)] / bs,
                                  c.context_lens[static_cast<size_t>(b - 1)] / bs);
    // A shared block must be full in both (never a block either still writes into).
    if (full > 0 && coin(rng)) shared[static_cast<size_t>(b)] = std::uniform_int_distribution<int32_t>(1, full)(rng);
  }
  int32_t own = 0;
  for (int32_t b = 0; b < B; ++b) own += nblocks[static_cast<size_t>(b)] - shared[static_cast<size_t>(b)];
  const int32_t num_blocks = own + spare_blocks;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);

  p.s.num_seqs = B;
  p.s.num_heads = c.heads;
  p.s.num_kv_heads = c.kv_heads;
  p.s.head_dim = c.head_dim;
  p.s.num_blocks = num_blocks;
  p.s.block_size = bs;
  p.s.max_blocks_per_seq = widest + extra_width;
  p.s.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t W = p.s.max_blocks_per_seq;
  p.block_table.assign(static_cast<size_t>(B * W), 0);
  std::uniform_int_distribution<int32_t> junk(-1000, 1000000);
  size_t next = 0;
  for (int32_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < W; ++i) {
      int32_t& e = p.block_table[static_cast<size_t>(b * W + i)];
      if (i < shared[static_cast<size_t>(b)]) e = p.block_table[static_cast<size_t>((b - 1) * W + i)];
      else if (i < nblocks[static_cast<size_t>(b)]) e = ids[next++];
      else e = junk(rng);  // never read
    }
  }
  p.context_lens = c.context_lens;
  p.q_starts.assign(static_cast<size_t>(B + 1), 0);
  for (int32_t b = 0; b < B; ++b) p.q_starts[static_cast<size_t>(b + 1)] = p.q_starts[static_cast<size_t>(b)] + c.q_lens[static_cast<size_t>(b)];
  p.s.num_tokens = p.q_starts.back();

  const int64_t row = int64_t{c.kv_heads} * c.head_dim;
  const size_t pool = static_cast<size_t>(int64_t{num_blocks} * bs * row);
  p.key_blocks.assign(pool, NAN);
  p.value_blocks.assign(pool, NAN);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int32_t b = 0; b < B; ++b) {  // the readable slots get values (shared ones again: same slots)
    for (int32_t t = 0; t < c.context_lens[static_cast<size_t>(b)]; ++t) {
      const int64_t slot = int64_t{p.block_table[static_cast<size_t>(b * W + t / bs)]} * bs + t % bs;
      for (int64_t i = 0; i < row; ++i) {
        p.key_blocks[static_cast<size_t>(slot * row + i)] = u(rng);
        p.value_blocks[static_cast<size_t>(slot * row + i)] = u(rng);
      }
    }
  }
  p.q = RandomVector(rng, static_cast<size_t>(int64_t{p.s.num_tokens} * c.heads * c.head_dim), -c.q_range, c.q_range);
  return p;
}

// Random lengths: context in [1, max_ctx] (a few at the edges: 1, block
// multiples, max_ctx), q_len in [1, min(max_q, context)].
inline PagedCase RandomPagedCase(std::mt19937_64& rng, int32_t heads, int32_t kv_heads, int32_t head_dim,
                                 int32_t block_size, int32_t batch, int32_t max_ctx, int32_t max_q) {
  PagedCase c{heads, kv_heads, head_dim, block_size, {}, {}, 1.f};
  std::uniform_int_distribution<int32_t> len(1, max_ctx);
  for (int32_t b = 0; b < batch; ++b) {
    int32_t ctx = len(rng);
    if (b == 0) ctx = max_ctx;
    if (b == 1) ctx = 1;
    if (b == 2) ctx = std::max(block_size, (ctx / block_size) * block_size);
    c.context_lens.push_back(ctx);
    c.q_lens.push_back(std::uniform_int_distribution<int32_t>(1, std::min(max_q, ctx))(rng));
  }
  return c;
}

}  // namespace tandem::kernels::testing
