// Paged attention on the CPU (paged_attention.h): argument and metadata
// checks, the split plan, the fp32 implementation (the GPU's algorithm: per
// split a max-shifted partial and its log-sum-exp, then the combine) and the
// slot write. One (sequence, kv head) pair per ParallelFor index.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/common/parallel_for.h"
#include "kernels/paged_attention/paged_attention.h"
#include "kernels/paged_attention/paged_attention_rules.h"

namespace tandem::kernels {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool PowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

std::string Seq(int64_t b) { return "sequence " + std::to_string(b) + ": "; }

}  // namespace

Status CheckPagedAttentionShape(const PagedAttentionShape& s) {
  if (s.num_seqs < 1 || s.num_tokens < s.num_seqs) {
    return InvalidArgument("paged attention: need B >= 1 sequences and T >= B new tokens, got B=" +
                           std::to_string(s.num_seqs) + " T=" + std::to_string(s.num_tokens));
  }
  if (s.num_heads < 1 || s.num_kv_heads < 1 || s.num_heads % s.num_kv_heads != 0) {
    return InvalidArgument("paged attention: num_heads (" + std::to_string(s.num_heads) +
                           ") must be a positive multiple of num_kv_heads (" + std::to_string(s.num_kv_heads) + ")");
  }
  if (s.head_dim < 1) return InvalidArgument("paged attention: head_dim must be > 0");
  if (s.num_blocks < 1 || s.max_blocks_per_seq < 1) {
    return InvalidArgument("paged attention: num_blocks and max_blocks_per_seq must be > 0");
  }
  if (!PowerOfTwo(s.block_size)) {
    return InvalidArgument("paged attention: block_size must be a power of two, got " + std::to_string(s.block_size));
  }
  if (s.capacity() > INT32_MAX) {
    return InvalidArgument("paged attention: max_blocks_per_seq * block_size = " + std::to_string(s.capacity()) +
                           " exceeds int32");
  }
  if (!(s.scale > 0.f) || !std::isfinite(s.scale)) {
    return InvalidArgument("paged attention: scale must be finite and > 0");
  }
  return Status::Ok();
}

Status CheckPagedAttentionMetadata(const PagedAttentionShape& s, const int32_t* block_table,
                                   const int32_t* context_lens, const int32_t* q_starts) {
  if (block_table == nullptr || context_lens == nullptr || q_starts == nullptr) {
    return InvalidArgument("paged attention: null metadata");
  }
  if (q_starts[0] != 0 || q_starts[s.num_seqs] != s.num_tokens) {
    return InvalidArgument("paged attention: q_starts must run from 0 to T=" + std::to_string(s.num_tokens) +
                           ", got " + std::to_string(q_starts[0]) + " .. " + std::to_string(q_starts[s.num_seqs]));
  }
  for (int64_t b = 0; b < s.num_seqs; ++b) {
    const int64_t q_len = int64_t{q_starts[b + 1]} - q_starts[b];
    if (q_len < 1) return InvalidArgument(Seq(b) + "q_len " + std::to_string(q_len) + " must be >= 1");
    const int32_t ctx = context_lens[b];
    if (ctx < q_len || ctx > s.capacity()) {
      return InvalidArgument(Seq(b) + "context_len " + std::to_string(ctx) + " outside [q_len=" +
                             std::to_string(q_len) + ", capacity=" + std::to_string(s.capacity()) + "]");
    }
    const int32_t* table = block_table + b * s.max_blocks_per_seq;
    for (int64_t i = 0; i < CeilDiv(ctx, s.block_size); ++i) {
      if (table[i] < 0 || table[i] >= s.num_blocks) {
        return InvalidArgument(Seq(b) + "block_table[" + std::to_string(i) + "] = " + std::to_string(table[i]) +
                               " outside [0, " + std::to_string(s.num_blocks) + ")");
      }
    }
  }
  return Status::Ok();
}

PagedAttentionPlan PlanPagedAttention(const PagedAttentionShape& s, int num_sms, int32_t min_split_tokens,
                                      bool cluster) {
  const int64_t min_split = std::max<int64_t>(CeilDiv(min_split_tokens, kPagedTileTokens), 1) * kPagedTileTokens;
  const int64_t work = std::max<int64_t>(int64_t{s.num_seqs} * s.num_kv_heads, 1);
  const int64_t want = CeilDiv(4 * int64_t{std::max(num_sms, 1)}, work);
  const int64_t by_len = std::max<int64_t>(1, s.capacity() / min_split);
  const int64_t most = cluster ? kPagedMaxClusterSplits : kPagedMaxSplits;
  const int64_t splits = std::max<int64_t>(1, std::min({want, by_len, most}));
  return {static_cast<int32_t>(splits), static_cast<int32_t>(min_split), cluster && splits > 1};
}

PagedAttentionPlan SingleSplitPlan() { return {1, kPagedTileTokens}; }

Status CheckPagedAttentionPlan(const PagedAttentionPlan& p) {
  if (p.num_splits < 1 || p.num_splits > kPagedMaxSplits || p.min_split_tokens <= 0 ||
      p.min_split_tokens % kPagedTileTokens != 0) {
    return InvalidArgument("paged attention: plan of " + std::to_string(p.num_splits) + " splits of at least " +
                           std::to_string(p.min_split_tokens) + " keys; need 1 to " + std::to_string(kPagedMaxSplits) +
                           " splits of a positive multiple of " + std::to_string(kPagedTileTokens) + " keys");
  }
  if (p.cluster && p.num_splits > kPagedMaxClusterSplits) {
    return InvalidArgument("paged attention: a clustered plan has at most " + std::to_string(kPagedMaxClusterSplits) +
                           " splits, got " + std::to_string(p.num_splits));
  }
  return Status::Ok();
}

Status PagedAttentionCpu(const PagedAttentionShape& s, const PagedAttentionPlan& plan, const float* q,
                         const float* key_blocks, const float* value_blocks, const int32_t* block_table,
                         const int32_t* context_lens, const int32_t* q_starts, float* out, int threads) {
  TANDEM_RETURN_IF_ERROR(CheckPagedAttentionShape(s), "paged attention (cpu)");
  TANDEM_RETURN_IF_ERROR(CheckPagedAttentionPlan(plan), "paged attention (cpu)");
  if (q == nullptr || key_blocks == nullptr || value_blocks == nullptr || out == nullptr) {
    return InvalidArgument("paged attention (cpu): null tensor");
  }
  TANDEM_RETURN_IF_ERROR(CheckPagedAttentionMetadata(s, block_table, context_lens, q_starts), "paged attention (cpu)");
  const int64_t D = s.head_dim, Hq = s.num_heads, Hkv = s.num_kv_heads, G = Hq / Hkv, bs = s.block_size;
  ParallelFor(int64_t{s.num_seqs} * Hkv, threads, [&](int64_t item) {
    const int64_t b = item / Hkv, h = item % Hkv;
    const int32_t q0 = q_starts[b], q_len = q_starts[b + 1] - q0, ctx = context_lens[b];
    const int32_t splits =
        detail::PagedSeqSplits(q_len, ctx, s.capacity(), plan.num_splits, plan.min_split_tokens);
    const int64_t split = detail::PagedSplitLen(ctx, plan.num_splits, plan.min_split_tokens);
    const int32_t* table = block_table + b * s.max_blocks_per_seq;
    auto row_of = [&](const float* pool, int64_t t) {
      return pool + ((int64_t{table[t / bs]} * bs + t % bs) * Hkv + h) * D;
    };
    std::vector<float> scores(static_cast<size_t>(split)), part_o(static_cast<size_t>(splits * D)),
        part_lse(static_cast<size_t>(splits));
    for (int32_t j = 0; j < q_len; ++j) {
      const int64_t visible = detail::PagedVisibleKeys(ctx, q_len, j);
      for (int64_t g = 0; g < G; ++g) {
        const int64_t row = (int64_t{q0} + j) * Hq + h * G + g;
        const float* qr = q + row * D;
        for (int32_t sp = 0; sp < splits; ++sp) {
          const int64_t t0 = sp * split, t1 = std::min(t0 + split, visible);
          float* o = part_o.data() + sp * D;
          std::fill(o, o + D, 0.f);
          if (t0 >= t1) {
            part_lse[static_cast<size_t>(sp)] = -INFINITY;
            continue;
          }
          float m = -INFINITY;
          for (int64_t t = t0; t < t1; ++t) {
            const float* k = row_of(key_blocks, t);
            float dot = 0.f;
            for (int64_t d = 0; d < D; ++d) dot += qr[d] * k[d];
            scores[static_cast<size_t>(t - t0)] = dot * s.scale;
            m = std::max(m, dot * s.scale);
          }
          float l = 0.f;
          for (int64_t t = t0; t < t1; ++t) {
            const float p = std::exp(scores[static_cast<size_t>(t - t0)] - m);
            const float* v = row_of(value_blocks, t);
            l += p;
            for (int64_t d = 0; d < D; ++d) o[d] += p * v[d];
          }
          for (int64_t d = 0; d < D; ++d) o[d] /= l;
          part_lse[static_cast<size_t>(sp)] = m + std::log(l);
        }
        // The combine pass (exact when there is one split: weight 1).
        const float top = *std::max_element(part_lse.begin(), part_lse.end());
        float* dst = out + row * D;
        std::fill(dst, dst + D, 0.f);
        float wsum = 0.f;
        for (int32_t sp = 0; sp < splits; ++sp) {
          const float w = std::exp(part_lse[static_cast<size_t>(sp)] - top);
          wsum += w;
          for (int64_t d = 0; d < D; ++d) dst[d] += w * part_o[static_cast<size_t>(sp * D + d)];
        }
        for (int64_t d = 0; d < D; ++d) dst[d] /= wsum;
      }
    }
  });
  return Status::Ok();
}

Status CheckPagedKvWriteShape(const PagedKvWriteShape& s) {
  if (s.num_tokens < 0 || s.num_kv_heads < 1 || s.head_dim < 1 || s.num_slots < 1) {
    return InvalidArgument("paged kv write: need T >= 0, Hkv, D and num_slots > 0");
  }
  return Status::Ok();
}

Status PagedKvWriteCpu(const PagedKvWriteShape& s, const float* k, const float* v, const int64_t* slot_mapping,
                       float* key_blocks, float* value_blocks) {
  TANDEM_RETURN_IF_ERROR(CheckPagedKvWriteShape(s), "paged kv write (cpu)");
  if (s.num_tokens == 0) return Status::Ok();
  if (k == nullptr || v == nullptr || slot_mapping == nullptr || key_blocks == nullptr || value_blocks == nullptr) {
    return InvalidArgument("paged kv write (cpu): null tensor");
  }
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    if (slot_mapping[t] >= s.num_slots) {
      return InvalidArgument("paged kv write (cpu): slot_mapping[" + std::to_string(t) + "] = " +
                             std::to_string(slot_mapping[t]) + " outside [0, " + std::to_string(s.num_slots) + ")");
    }
  }
  const int64_t row = int64_t{s.num_kv_heads} * s.head_dim;
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    std::memcpy(key_blocks + slot * row, k + t * row, sizeof(float) * static_cast<size_t>(row));
    std::memcpy(value_blocks + slot * row, v + t * row, sizeof(float) * static_cast<size_t>(row));
  }
  return Status::Ok();
}

}  // namespace tandem::kernels
