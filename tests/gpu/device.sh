#!/bin/bash
# Run on the device machine (the `run` tool), from the repository root, with .whl and .tok carried.
#   bash tests/gpu/device.sh probe          # call 1: machine, CLI help, ceilings, model, offline variants, loop smoke
#   bash tests/gpu/device.sh loop NAME ARCH BUDGET_S TIMEOUT_S [ARGS]   # call 2: one loop (tests/gpu/loop.py ARGS) on a fresh
#                                     test model of ARCH; log, model info and the run dir (tarred) into $OUT;
#                                     with resume/NAME carried (a run dir from an earlier call), it continues that run
#   bash tests/gpu/device.sh cli NAME ARCH BUDGET TIMEOUT   # the product's CLI on the GPU ground: `agent optimize --backend
#                                     local --framework transformers --hw h200|h100 (the card found) --model-path ...` on a fresh test model
set -u
[ -f /tmp/site/.installed ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && touch /tmp/site/.installed; } || { echo "wheel install failed"; exit 3; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
what=${1:-probe}; shift || true
case "$what" in
  probe)
    python3 -m tests.gpu.probe --out "$OUT" --tokenizer .tok "$@" 2>&1 | tee "$OUT/probe.log" ;;
  loop)  # device.sh loop NAME ARCH TIME_BUDGET_S TIMEOUT_S [tests.gpu.loop args]
    name=$1 arch=$2 budget=$3 limit=$4; shift 4
    t0=$(date +%s)
    python3 -m tests.gpu.make_model --out /tmp/model-$arch --tokenizer .tok --size gpu --arch $arch --seed 0 2>&1 \
      | tail -1 > "$OUT/$name-model.json"
    if [ -d "resume/$name" ]; then rm -rf /tmp/$name; cp -r "resume/$name" /tmp/$name; set -- --resume "$@"; fi
    timeout "$limit" python3 -m tests.gpu.loop --model-dir /tmp/model-$arch --run-dir /tmp/$name --time-budget "$budget" "$@" \
      2>&1 | tee "$OUT/$name.log"
    echo "loop $name exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/$name.log"
    # a loop stopped by `timeout` leaves its server's process group (own session) behind: end it by id
    for f in /tmp/$name/procs/*.json; do [ -f "$f" ] && g=$(basename "$f" .json) && kill -9 -- -"$g" 2>/dev/null && echo "killed server group $g"; done
    tar czf "$OUT/$name.tar.gz" --exclude='*.safetensors' -C /tmp $name ;;
  cli)  # device.sh cli NAME ARCH TIME_BUDGET TIMEOUT_S [WORKERS]: the same loop, driven by `agent optimize` (no tests/ code
        # but the model); WORKERS > 1: trials side by side on this host's GPUs (Ray), each server's GPU logged every 2 s
    name=$1 arch=$2 budget=$3 limit=$4 workers=${5:-1}; t0=$(date +%s)
    python3 -m tests.gpu.make_model --out /tmp/model-$arch --tokenizer .tok --size gpu --arch $arch --seed 0 2>&1 \
      | tail -1 > "$OUT/$name-model.json"
    # the server's interpreter: python3 with the carried wheels (fastapi, uvicorn) beside its own packages
    printf '#!/bin/sh\nPYTHONPATH=/tmp/site exec python3 "$@"\n' > /tmp/serve-python; chmod +x /tmp/serve-python
    cat > /tmp/cli.yaml <<'YAML'
measure: {workload: {input_len: 256, output_len: 32, prefix_hit: 0.0},
          single_stream: {input_len: 256, output_len: 32, prefix_hit: 0.0},
          requests_per_point: 6, duration_s: 4.0, start_rps: 0.5, max_points: 8, bisect_steps: 1,
          single_stream_requests: 2, eval_items: 10}
slo: {ttft_p95_s: 2.0}
YAML
    ( while true; do echo "t=$(( $(date +%s) - t0 )) $(nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory \
        --format=csv,noheader | tr '\n' ';')"; sleep 2; done ) > "$OUT/$name-gpu-apps.log" 2>&1 & watch=$!
    # the card the machine has (the device tool may give an H100 for an H200): its bandwidth and price go into the report
    hw=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H100 && echo h100 || echo h200)
    timeout "$limit" python3 -m agent.cli optimize --backend local --framework transformers --hw "$hw" \
      --model-path /tmp/model-$arch --python /tmp/serve-python --config /tmp/cli.yaml --time-budget "$budget" \
      --workers "$workers" --approve never --json --run-dir /tmp/$name 2>&1 | tee "$OUT/$name.log"
    kill $watch 2>/dev/null
    echo "cli $name exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/$name.log"
    python3 -m agent.cli report /tmp/$name > "$OUT/$name-report.txt" 2>&1
    left=$(ps -eo pid,args | grep -c '[t]ransformers.*serve'); echo "transformers serve processes left: $left" | tee -a "$OUT/$name.log"
    cp /tmp/$name/report.md "$OUT/$name-report.md" 2>/dev/null
    tar czf "$OUT/$name.tar.gz" --exclude='*.safetensors' --exclude='src' -C /tmp $name ;;
  repeat)  # device.sh repeat NAME ARCH TRIALS TIMEOUT_S: measure trials of resume/NAME again (tests/gpu/repeat.py)
    name=$1 arch=$2 trials=$3 limit=$4
    python3 -m tests.gpu.make_model --out /tmp/model-$arch --tokenizer .tok --size gpu --arch $arch --seed 0 2>&1 \
      | tail -1 > "$OUT/$name-repeat-model.json"
    timeout "$limit" python3 -m tests.gpu.repeat --run-dir "resume/$name" --model-dir /tmp/model-$arch --trials "$trials" \
      --out "$OUT/$name-repeat.json" 2>&1 | tee "$OUT/$name-repeat.log"
    for f in /tmp/repeat/procs/*.json; do [ -f "$f" ] && kill -9 -- -"$(basename "$f" .json)" 2>/dev/null; done ;;
  *) echo "usage: device.sh probe|loop|cli|repeat [args]"; exit 2 ;;
esac
