// Chunked LM-head loss: per (row, label) pair the log-probability of the
// label and per row the entropy of the distribution, with gradients for the
// hidden states and the head weight, never holding more than one chunk of
// logits (issue #4, "Chunked LM-head loss"). CPU oracle and CPU
// implementation here; CUDA in lm_head_loss_cuda.h.
//
// hidden [N, H], weight [V, H] (row-major); z = hidden . weight^T / temperature.
// lse[r] = log sum_v exp z[r, v]; entropy[r] = lse[r] - sum_v p[r, v] z[r, v].
// pairs: rows [M], labels [M]; a row may appear in several pairs (a trie
// token where the tree forks predicts several next tokens), or in none.
// logprob[i] = z[rows[i], labels[i]] - lse[rows[i]].
// Backward, given grad_logprob [M] and grad_entropy [N] (either may be null
// for zero): dz[r, v] = sum_{i: rows[i]=r} g_i (1[v=labels[i]] - p)
//                       - grad_entropy[r] p (z - lse + entropy),
// grad_hidden = dz . weight / T, grad_weight = dz^T . hidden / T (fp32; grad
// for rows in no pair and with zero entropy grad is zero).
#pragma once

#include <cstdint>

#include "common/status.h"

namespace tandem::kernels {

struct LmHeadLossShape {
  int64_t num_rows = 0;   // N
  int32_t hidden = 0;     // H
  int32_t vocab = 0;      // V
  int64_t num_pairs = 0;  // M
  float temperature = 1.f;
};

// Positive sizes (N and M may be 0), temperature finite and > 0.
Status CheckLmHeadLossShape(const LmHeadLossShape& shape);
// Every row in [0, N) and label in [0, V).
Status CheckLmHeadLossPairs(const LmHeadLossShape& shape, const int32_t* rows, const int32_t* labels);

// --- Oracle: whole logits rows, fp64 accumulation.
void LmHeadLossForwardRef(const LmHeadLossShape& s, const float* hidden, const float* weight, const int32_t* rows,
                          const int32_t* labels, float* logprob, float* entropy, float* lse);
void LmHeadLossBackwardRef(const LmHeadLossShape& s, const float* hidden, const float* weight, const int32_t* rows,
                           const int32_t* labels, const float* grad_logprob, const float* grad_entropy,
                           float* grad_hidden, float* grad_weight);

// --- CPU implementation: fp32, rows in parallel, one logits row per thread.
Status LmHeadLossForwardCpu(const LmHeadLossShape& s, const float* hidden, const float* weight, const int32_t* rows,
                            const int32_t* labels, float* logprob, float* entropy, float* lse, int threads = 0);
// Needs lse and entropy of the forward.
Status LmHeadLossBackwardCpu(const LmHeadLossShape& s, const float* hidden, const float* weight, const int32_t* rows,
                             const int32_t* labels, const float* lse, const float* entropy, const float* grad_logprob,
                             const float* grad_entropy, float* grad_hidden, float* grad_weight, int threads = 0);

}  // namespace tandem::kernels
