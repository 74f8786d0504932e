"""DSA sparse MLA attention for GLM-5 / DeepSeek-V3.2 style models on aiter kernels."""
import torch

from aiter import indexer_topk_fp8, mla_decode_sparse

# The fp8 indexer kernel scores at most this many cached keys per query; keys beyond the
# window are not considered when selecting the top-k tokens to attend to.
MAX_INDEXER_KEYS = 8192
INDEX_TOPK = 2048


def select_tokens(q_idx: torch.Tensor, k_idx_cache: torch.Tensor, seq_len: int) -> torch.Tensor:
    window = min(seq_len, MAX_INDEXER_KEYS)
    scores = indexer_topk_fp8(q_idx, k_idx_cache[:window])
    return scores.topk(min(INDEX_TOPK, window)).indices


def forward(q, kv_cache, k_idx_cache, q_idx, seq_len):
    return mla_decode_sparse(q, kv_cache, select_tokens(q_idx, k_idx_cache, seq_len))
