/* C ABI over the CUDA kernels, for benchmarks and tests driven from Python
 * (ctypes on torch tensors' data_ptr()). Every function returns 0 on success
 * and -1 on error; tandem_kernels_last_error() then says why (thread-local).
 * Pointers are device pointers; `stream` is a cudaStream_t (0: default). */
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

const char* tandem_kernels_last_error(void);

/* Tree attention. A plan is built from the segment table (forest.h) and
 * uploaded; destroy frees it. stats: [tile_pairs, tree_pairs, num_tiles]. */
void* tandem_tree_plan_create(int32_t num_tokens, int32_t num_segments, const int32_t* seg_start,
                              const int32_t* seg_length, const int32_t* seg_parent);
int tandem_tree_plan_stats(const void* plan, int64_t* stats3);
void tandem_tree_plan_destroy(void* plan);
/* variant: 0 simple (baseline), 1 tensor core, 2 tensor core with one V stage
 * (forward), 3 tensor core with 128-row blocks (forward), 4 the same with lazy
 * rescaling (forward), 5 lazy forward + one-pass backward with fp32 atomic dQ,
 * 6 the same with dQ summed in a fixed order (deterministic), 7 one pass with
 * 128 keys per block. bf16 q/k/v/out, fp32 lse. */
int tandem_tree_attention_fwd(const void* plan, int32_t T, int32_t hq, int32_t hkv, int32_t d, float scale,
                              const void* q, const void* k, const void* v, void* out, float* lse, void* stream,
                              int variant);
int tandem_tree_attention_bwd(const void* plan, int32_t T, int32_t hq, int32_t hkv, int32_t d, float scale,
                              const void* q, const void* k, const void* v, const void* out, const void* dout,
                              const float* lse, float* delta, void* dq, void* dk, void* dv, void* stream,
                              int variant);
/* The same with a caller-owned workspace of hq*(T*d + ceil(T/64)) floats
 * (used by variants 5-7 only; NULL: allocated per call). */
int tandem_tree_attention_bwd_ws(const void* plan, int32_t T, int32_t hq, int32_t hkv, int32_t d, float scale,
                                 const void* q, const void* k, const void* v, const void* out, const void* dout,
                                 const float* lse, float* delta, void* dq, void* dk, void* dv, void* stream,
                                 int variant, float* dq_accum);

/* Chunked LM-head loss (lm_head_loss_cuda.h); bf16 hidden/weight, int32
 * rows/labels, fp32 everything else. Uses a cuBLAS handle owned by the
 * library (one per thread). */
int tandem_lm_head_loss_workspace_bytes(int64_t n, int32_t h, int32_t v, int64_t m, int64_t chunk_rows,
                                        int64_t* bytes);
int tandem_lm_head_loss_fwd(int64_t n, int32_t h, int32_t v, int64_t m, float temperature, const void* hidden,
                            const void* weight, const int32_t* rows, const int32_t* labels, float* logprob,
                            float* entropy, float* lse, void* workspace, int64_t workspace_bytes, int64_t chunk_rows,
                            void* stream);
int tandem_lm_head_loss_bwd(int64_t n, int32_t h, int32_t v, int64_t m, float temperature, const void* hidden,
                            const void* weight, const int32_t* rows, const int32_t* labels, const float* lse,
                            const float* entropy, const float* grad_logprob, const float* grad_entropy,
                            float* grad_hidden, float* grad_weight, void* workspace, int64_t workspace_bytes,
                            int64_t chunk_rows, void* stream);

/* MoE (moe_cuda.h). softmax=1 softmax else sigmoid. gemm_mode: 0 per-expert
 * loop, 1 grouped, 2 auto. host_offsets: E+1 int32 in host memory. */
int tandem_moe_router(int64_t t, int32_t e, int32_t k, int softmax, int renorm, const float* logits, float* scores,
                      int32_t* topk_idx, float* topk_weight, int32_t* counts, float* score_sum, void* stream);
int tandem_moe_permute_ws_bytes(int64_t t, int32_t e, int32_t k, int64_t* bytes);
int tandem_moe_permute_plan(int64_t t, int32_t e, int32_t k, const int32_t* topk_idx, int32_t* offsets,
                            int32_t* perm_pos, int32_t* perm_src, void* ws, int64_t ws_bytes, void* stream);
int tandem_moe_gather(int64_t t, int32_t h, int32_t k, const void* x, const int32_t* perm_src, void* xp, void* stream);
int tandem_moe_unpermute(int64_t t, int32_t h, int32_t k, const void* yp, const float* topk_weight,
                         const int32_t* perm_pos, void* out, void* stream);
int tandem_moe_experts_fwd(int64_t t, int32_t h, int32_t i, int32_t e, int32_t k, const int32_t* host_offsets,
                           const void* xp, const void* w_gate_up, const void* w_down, void* gu, void* act, void* yp,
                           void* stream, int gemm_mode);
int tandem_moe_experts_bwd(int64_t t, int32_t h, int32_t i, int32_t e, int32_t k, const int32_t* host_offsets,
                           const void* xp, const void* w_gate_up, const void* w_down, const void* gu, const void* act,
                           const void* dyp, void* dxp, float* dw_gate_up, float* dw_down, void* dgu, void* dact,
                           void* stream, int gemm_mode);

#ifdef __cplusplus
}
#endif
