// LibTorch glue for the chunked LM-head loss (issue #4, "Thin LibTorch glue";
// docs/kernels-torch.md; the math is kernels/lm_head_loss/lm_head_loss.h).
//
// LmHeadLoss(hidden [N, H], weight [V, H], rows [M], labels [M], temperature,
// chunk_rows) -> {logprob [M] fp32, entropy [N] fp32}, a custom autograd
// function: both outputs are differentiable, and backward gives grad_hidden
// and grad_weight (in their dtypes; accumulated in fp32). A row may appear
// in several pairs, or in none.
//   CPU: hidden and weight fp32, the CPU implementation (one logits row per
//   thread; chunk_rows is not used). CUDA: bf16, chunk_rows rows of logits at
//   a time (fp32 chunk + bf16 gradient chunk workspace), cuBLAS from
//   at::cuda::getCurrentCUDABlasHandle() on the current stream.
//   rows and labels: int32 or int64 on the data's device; on the CPU a pair
//   out of range throws, on CUDA it gets a NaN logprob (no memory fault).
//   temperature finite and > 0; chunk_rows > 0.
// Any violation throws c10::Error naming the argument.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace tandem::ops {

struct LmHeadLossOutput {
  at::Tensor logprob;  // [M] fp32
  at::Tensor entropy;  // [N] fp32
};

LmHeadLossOutput LmHeadLoss(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& rows,
                            const at::Tensor& labels, double temperature, int64_t chunk_rows = 1024);

}  // namespace tandem::ops
