# Copyright 2023-2025 SGLang Team
# Licensed under the Apache License, Version 2.0
"""Inference-only DeepSeek NextN Speculative Decoding (MTP draft model)."""
import logging
from typing import Iterable, Optional, Tuple

import torch
from torch import nn

from sglang.srt.layers.quantization.base_config import QuantizationConfig
from sglang.srt.model_loader.weight_utils import WeightsMapper
from sglang.srt.models.deepseek_v2 import DeepseekV2DecoderLayer, DeepseekV3ForCausalLM

logger = logging.getLogger(__name__)

# The MTP layer is stored in the checkpoint as the layer after the last decoder layer. Its
# modules are renamed when loaded: the block becomes `model.decoder`, the projections and
# norms live directly under `model`. Quantization configs (exclude lists, per-layer schemes)
# recorded under checkpoint names are translated with this mapper.
hf_to_sglang_mapper = WeightsMapper(
    orig_to_new_prefix={
        "model.layers.61.": "model.decoder.",
    }
)


class DeepseekModelNextN(nn.Module):
    def __init__(self, config, quant_config: Optional[QuantizationConfig] = None, prefix: str = "") -> None:
        super().__init__()
        if quant_config is not None:
            quant_config = quant_config.apply_weights_mapper(hf_to_sglang_mapper)
        self.vocab_size = config.vocab_size
        self.enorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.hnorm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=False)
        self.decoder = DeepseekV2DecoderLayer(config, 0, quant_config=quant_config, prefix="model.decoder")
        self.shared_head = nn.Module()
        self.shared_head.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)


class DeepseekV3ForCausalLMNextN(DeepseekV3ForCausalLM):
    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]):
        super().load_weights(weights, is_nextn=True)


EntryClass = [DeepseekV3ForCausalLMNextN]
