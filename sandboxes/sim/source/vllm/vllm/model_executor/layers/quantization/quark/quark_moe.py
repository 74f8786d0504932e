# SPDX-License-Identifier: Apache-2.0
"""Quark-quantized fused MoE methods."""
from typing import Any

import torch

from vllm.logger import init_logger

logger = init_logger(__name__)

# Which MoE quantization schemes have a fused-MoE implementation, and for which model
# architectures their weight loading is wired up (None: any architecture).
SUPPORTED_MOE_SCHEMES = {
    "w8a8_fp8": None,
    "w4a4_mxfp4": ("DeepseekV3ForCausalLM", "GptOssForCausalLM", "Qwen3MoeForCausalLM"),
}


class QuarkMoEMethod:
    @staticmethod
    def get_moe_method(quant_config: dict[str, Any], module: torch.nn.Module, layer_name: str,
                       architecture: str) -> "QuarkMoEMethod":
        scheme = quant_config["scheme"]
        archs = SUPPORTED_MOE_SCHEMES.get(scheme, ())
        if archs is not None and architecture not in archs:
            raise NotImplementedError(
                f"Quark MoE quantization scheme {scheme} is not supported for {architecture}")
        return QuarkMoEMethod()
