// Paged attention oracle (paged_attention.h): the definition, one output row
// at a time, fp64 throughout, the keys looked up through the block table
// token by token. No checks: the tests call it on valid metadata only.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/paged_attention/paged_attention.h"

namespace tandem::kernels {

void PagedAttentionRef(const PagedAttentionShape& s, const float* q, const float* key_blocks,
                       const float* value_blocks, const int32_t* block_table, const int32_t* context_lens,
                       const int32_t* q_starts, float* out) {
  const int64_t D = s.head_dim, Hq = s.num_heads, Hkv = s.num_kv_heads, G = Hq / Hkv, bs = s.block_size;
  std::vector<double> scores, acc(static_cast<size_t>(D));
  for (int64_t b = 0; b < s.num_seqs; ++b) {
    const int64_t q_len = q_starts[b + 1] - q_starts[b], ctx = context_lens[b];
    const int32_t* table = block_table + b * s.max_blocks_per_seq;
    for (int64_t j = 0; j < q_len; ++j) {
      const int64_t visible = ctx - q_len + j + 1;
      for (int64_t head = 0; head < Hq; ++head) {
        const int64_t kvh = head / G, row = (q_starts[b] + j) * Hq + head;
        const float* qr = q + row * D;
        scores.assign(static_cast<size_t>(visible), 0.0);
        double mx = -INFINITY;
        for (int64_t t = 0; t < visible; ++t) {
          const float* k = key_blocks + ((int64_t{table[t / bs]} * bs + t % bs) * Hkv + kvh) * D;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(qr[d]) * k[d];
          scores[static_cast<size_t>(t)] = dot * s.scale;
          mx = std::max(mx, scores[static_cast<size_t>(t)]);
        }
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t t = 0; t < visible; ++t) {
          const double p = std::exp(scores[static_cast<size_t>(t)] - mx);
          const float* v = value_blocks + ((int64_t{table[t / bs]} * bs + t % bs) * Hkv + kvh) * D;
          sum += p;
          for (int64_t d = 0; d < D; ++d) acc[static_cast<size_t>(d)] += p * v[d];
        }
        for (int64_t d = 0; d < D; ++d) out[row * D + d] = static_cast<float>(acc[static_cast<size_t>(d)] / sum);
      }
    }
  }
}

}  // namespace tandem::kernels
