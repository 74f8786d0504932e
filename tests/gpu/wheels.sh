#!/bin/bash
# Prepare the two folders a GPU device run carries (see tests/gpu/device.sh and results/README.md "Reproduce"):
#   .whl/  cp312 manylinux wheels of what `agent optimize` and `transformers serve` need beyond the device image
#   .tok/  SmolLM2's tokenizer files, from which tests/gpu/make_model.py builds the test models on the device
# Run from the repository root on this (non-GPU) machine, which has network; the device has none.
#   bash tests/gpu/wheels.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
# both folders are build outputs, never committed
for d in .whl/ .tok/; do grep -qxF "$d" .gitignore || echo "$d" >> .gitignore; done

# What the device image (Python 3.12, /opt/torch/.venv) already has: never carried, so the image's builds
# (torch, numpy, tokenizers, ...) stay the ones in use. The image's typing-extensions is left off this list on
# purpose, so it is carried: pydantic and pydantic-core need a recent one, and a newer pure-Python copy is harmless.
IMAGE="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs certifi
charset-normalizer click cloudpickle colorama contourpy cycler filelock fonttools fsspec grpcio h11 hf-xet
httpcore httpx huggingface-hub hypothesis idna iniconfig jinja2 joblib kiwisolver markdown markdown-it-py
markupsafe matplotlib mdurl msgpack multidict networkx numpy packaging pandas pillow pip pluggy protobuf psutil
pyarrow pygments pyparsing pytest pytest-xdist execnet python-dateutil pyyaml regex requests rich safetensors
scipy sentencepiece setuptools shellingham six sympy tokenizers torch tqdm transformers triton typer urllib3 uvloop
wheel wrapt xxhash yarl zipp frozenlist propcache"
norm() { tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/-/g'; }   # PEP 503 name, so wheel names match the list
IMAGE=" $(echo $IMAGE | norm) "
on_image() { [[ "$IMAGE" == *" $1 "* ]]; }

# What to ask pip for: the project's dependencies the image lacks (version bounds from pyproject.toml), plus
# what transformers 5.17's `serve` imports (is_serve_available: pydantic, fastapi, uvicorn, openai; its
# "serving" extra wants openai>=1.98). Ray is not needed (one GPU, --workers 1).
reqs=$(python3 - <<'PY'
import tomllib
for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]:
    print(d.replace(" ", ""))
for d in ("fastapi", "uvicorn", "openai>=1.98", "pydantic>=2"):
    print(d)
PY
)
want=()
for r in $reqs; do n=$(echo "${r%%[<>=!~;\[]*}" | norm); on_image "$n" || want+=("$r"); done
echo "asking pip for: ${want[*]}"

# A fresh folder each time, so exactly one version of each package is carried. pip resolves the dependencies
# for CPython 3.12 on manylinux x86-64 (the device), whatever this machine's Python is.
rm -rf .whl && mkdir .whl
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux1_x86_64 -d .whl "${want[@]}" \
  2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)   # this machine's pip.conf: absent local indexes
# ...then drop what the image has (numpy, requests, ... come in as dependencies of the packages above)
for w in .whl/*.whl; do n=$(basename "$w" | cut -d- -f1 | norm); on_image "$n" && rm "$w"; done
dups=$(ls .whl | cut -d- -f1 | norm | sort | uniq -d)
[ -z "$dups" ] || { echo "two versions of: $dups"; exit 1; }
ls .whl
bytes=$(cat .whl/*.whl | wc -c)
echo ".whl: $(ls .whl | wc -l) wheels, $(awk "BEGIN{printf \"%.1f\", $bytes/1048576}") MiB"
# the device run carries at most 64 MiB for the whole tree (repository, .whl, .tok, resume/ run dirs)
[ "$bytes" -lt $(( 40 * 1048576 )) ] || { echo ".whl is over 40 MiB: too much to carry"; exit 1; }

# SmolLM2's tokenizer from the testbed build (tests/gpu/make_model.py --tokenizer .tok)
model=${INFERLOOP_TESTBED_DIR:-$HOME/.cache/inferloop/testbed}/model
[ -f "$model/tokenizer.json" ] || { echo "no testbed model at $model: build it first: python -m sandboxes.testbed.build"; exit 2; }
rm -rf .tok && mkdir .tok
for f in tokenizer.json tokenizer_config.json special_tokens_map.json chat_template.jinja; do
  [ -f "$model/$f" ] && cp "$model/$f" .tok/
done
echo ".tok: $(ls .tok | tr '\n' ' ')"
