"""The MoE tuner writes the frameworks' real formats, and lookups need the exact shapes."""
import csv
import json

from sandboxes.sim import tuner
from sandboxes.sim.frameworks import map_name, preprocess_includes
from tools.hardware import get_hardware
from tools.models import get_model

M, HW = get_model("glm-5.2"), get_hardware("mi355x")


def test_triton_json_is_keyed_by_batch_size(tmp_path):
    name = tuner.triton_filename(M.moe_shapes(8), get_hardware("b200"), "fp8")
    assert name == "E=256,N=256,device_name=NVIDIA_B200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    assert tuner.triton_filename(M.moe_shapes(8), get_hardware("b200"), "fp8", vllm=True).endswith("block_shape=[128,128].json")
    p = tuner.write_triton(tmp_path, name)
    cfg = json.loads(p.read_text())
    assert "1" in cfg and "4096" in cfg
    assert set(cfg["64"]) == {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"}


def test_aiter_csv_columns_and_exact_key_match(tmp_path):
    rows = tuner.aiter_rows(M, HW, M.moe_shapes(4), "mxfp4", "t")
    p = tuner.write_aiter(tmp_path / "tuned_fmoe.csv", rows)
    with p.open() as f:
        header = next(csv.reader(f))
    assert header[:6] == ["cu_num", "token", "model_dim", "inter_dim", "expert", "topk"] and header[-1] == "_tag"
    assert rows[0]["expert"] == "257" and rows[0]["topk"] == "9"  # shared expert fused in
    assert tuner.aiter_tuned(M, HW, M.moe_shapes(4), "mxfp4", [p])
    assert not tuner.aiter_tuned(M, HW, M.moe_shapes(8), "mxfp4", [p])  # other shard shape
    assert not tuner.aiter_tuned(M, get_hardware("mi300x"), M.moe_shapes(4), "mxfp4", [p])  # other cu_num
    assert not tuner.aiter_tuned(M, HW, M.moe_shapes(4), "mxfp4", [tuner.SHIPPED_AITER_CSV])
    assert tuner.aiter_tuned(M, HW, M.moe_shapes(4), "fp8", [tuner.SHIPPED_AITER_CSV])


def test_longest_prefix_wins():
    mp = {"model.layers.78.": "model.decoder.", "model.layers.78.eh_proj": "model.eh_proj"}
    assert map_name("model.layers.78.eh_proj", mp) == "model.eh_proj"
    assert map_name("model.layers.78.mlp.experts", mp) == "model.decoder.mlp.experts"
    assert map_name("model.layers.7.mlp", mp) == "model.layers.7.mlp"


def test_preprocessor_conditionals():
    src = "\n".join(["#ifdef USE_ROCM", "#include <hip/hip_runtime.h>", "#elif defined(FOO)", "#include <foo.h>",
                     "#else", "#include <cuda_runtime.h>", "#endif", "#if !defined(USE_ROCM)", "#include <cuda.h>",
                     "#endif", "#include <stdint.h>"])
    assert [h for _, _, h in preprocess_includes(src, {"USE_ROCM"})] == ["hip/hip_runtime.h", "stdint.h"]
    assert [h for _, _, h in preprocess_includes(src, set())] == ["cuda_runtime.h", "cuda.h", "stdint.h"]
    assert [h for _, _, h in preprocess_includes(src, {"FOO"})] == ["foo.h", "cuda.h", "stdint.h"]
