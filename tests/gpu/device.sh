#!/bin/bash
# Run on the device machine (the `run` tool), from the repository root, with .whl and .tok carried.
#   bash tests/gpu/device.sh probe          # call 1: machine, CLI help, ceilings, model, offline variants, loop smoke
#   bash tests/gpu/device.sh loop NAME ARCH BUDGET_S TIMEOUT_S [ARGS]   # call 2: one loop (tests/gpu/loop.py ARGS) on a fresh
#                                     test model of ARCH; log, model info and the run dir (tarred) into $OUT;
#                                     with resume/NAME carried (a run dir from an earlier call), it continues that run
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
    for f in $(find /tmp/$name -name '*.pgid' 2>/dev/null); do kill -9 -- -"$(cat "$f")" 2>/dev/null && echo "killed server group $(cat "$f")"; done
    tar czf "$OUT/$name.tar.gz" --exclude='*.safetensors' -C /tmp $name ;;
  repeat)  # device.sh repeat NAME ARCH TRIALS TIMEOUT_S: measure trials of resume/NAME again (tests/gpu/repeat.py)
    name=$1 arch=$2 trials=$3 limit=$4
    python3 -m tests.gpu.make_model --out /tmp/model-$arch --tokenizer .tok --size gpu --arch $arch --seed 0 2>&1 \
      | tail -1 > "$OUT/$name-repeat-model.json"
    timeout "$limit" python3 -m tests.gpu.repeat --run-dir "resume/$name" --model-dir /tmp/model-$arch --trials "$trials" \
      --out "$OUT/$name-repeat.json" 2>&1 | tee "$OUT/$name-repeat.log"
    for f in $(find /tmp/repeat -name '*.pgid' 2>/dev/null); do kill -9 -- -"$(cat "$f")" 2>/dev/null; done ;;
  *) echo "usage: device.sh probe|loop [args]"; exit 2 ;;
esac
