#!/bin/sh
# best configuration found by inferloop (vllm, bf16 weights)
set -e
exec python3 -m vllm.entrypoints.openai.api_server --model /root/.cache/inferloop/testbed/model --host 0.0.0.0 --port 8000 --enforce-eager --max-model-len 4096
