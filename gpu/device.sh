#!/bin/bash
# Run on the device machine (the `run` tool), from the repository root, with .whl and .tok carried.
#   bash gpu/device.sh probe          # call 1: machine, CLI help, ceilings, model, offline variants, loop smoke
#   bash gpu/device.sh loop [ARGS]    # call 2: the loop (gpu/loop.py ARGS), results tarred into $OUT
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 3; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
what=${1:-probe}; shift || true
case "$what" in
  probe)
    python3 -m gpu.probe --out "$OUT" --tokenizer .tok "$@" 2>&1 | tee "$OUT/probe.log" ;;
  loop)
    t0=$(date +%s)
    python3 -m gpu.make_model --out /tmp/glm52-mini --tokenizer .tok --size gpu --seed 0 2>&1 | tail -1 | tee "$OUT/model.json"
    timeout "${LOOP_TIMEOUT:-480}" python3 -m gpu.loop --model-dir /tmp/glm52-mini --run-dir /tmp/run "$@" 2>&1 | tee "$OUT/loop.log"
    echo "loop exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/loop.log"
    tar czf "$OUT/run.tar.gz" --exclude='*.safetensors' -C /tmp run
    cp /tmp/run/report.md /tmp/run/ledger.json "$OUT/" 2>/dev/null ;;
  *) echo "usage: device.sh probe|loop [args]"; exit 2 ;;
esac
