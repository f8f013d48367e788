// Tree attention on dense varlen attention kernels (issue #19, the road
// that reuses the fastest dense kernel; docs/kernels-torch.md "Tree
// attention on dense varlen kernels").
//
// Each chunk of the forest's varlen plan (kernels/tree_attention/
// varlen_plan.h) is one dense call (dense_varlen_attention.h). The single
// form: the chunk's query rows as they are, its key paths gathered from k
// and v, bottom-right causal. The split form (`split`): the self part over
// the packed rows (causal, square blocks), then each ancestor chunk over its
// gathered rows and key paths (not causal), its result merged into the
// rows' by log-sum-exp; the backward runs every call with the merged output
// and log-sum-exp. The gradients of gathered rows are summed back in fp32
// (index_add; on CUDA its atomics make the last bits depend on the order of
// the adds). An autograd function; TreeAttention (tree_attention_op.h)
// calls it for the kVarlen* implementations after checking its arguments.
#pragma once

#include <ATen/core/Tensor.h>

#include "workers/ops/dense_varlen_attention.h"
#include "workers/ops/tree_attention_op.h"

namespace tandem::ops {

at::Tensor TreeAttentionVarlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const c10::intrusive_ptr<TreeForest>& forest, double scale, DenseVarlenKernel kernel,
                               bool split);

}  // namespace tandem::ops
