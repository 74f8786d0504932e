// Fused metadata update for multi-step (draft depth >= 4) EAGLE / NEXTN drafting:
// one kernel builds the positions, sequence lengths and KV indices of every draft step
// instead of one launch per step.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

template <typename IdType>
__global__ void fused_multi_step_metadata_kernel(
    const IdType* __restrict__ seq_lens, const IdType* __restrict__ req_pool_indices,
    const IdType* __restrict__ req_to_token, IdType* __restrict__ positions,
    IdType* __restrict__ kv_indices, int num_steps, int topk, int pool_len) {
  const int bid = blockIdx.x;
  const IdType base = seq_lens[bid];
  for (int step = threadIdx.x; step < num_steps * topk; step += blockDim.x) {
    const int s = step / topk;
    positions[bid * num_steps * topk + step] = base + s;
    kv_indices[bid * num_steps * topk + step] =
        req_to_token[req_pool_indices[bid] * pool_len + base + s];
  }
}
