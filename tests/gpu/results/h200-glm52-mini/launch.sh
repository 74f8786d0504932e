#!/bin/sh
# best configuration found by inferloop (transformers, bf16 weights)
set -e
exec python3 -m transformers.cli.transformers serve /tmp/model-glm_moe_dsa --host 0.0.0.0 --port 8000 --log-level info
