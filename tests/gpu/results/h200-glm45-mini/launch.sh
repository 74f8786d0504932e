#!/bin/sh
# best configuration found by inferloop (transformers, bf16 weights)
set -e
exec python3 -m transformers.cli.transformers serve /tmp/model-glm4_moe --host 0.0.0.0 --port 8000 --continuous-batching --log-level info
