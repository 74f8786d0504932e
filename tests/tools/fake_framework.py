"""A stand-in for `python -m <framework entrypoint> ...`: parses the command line with the
framework adapter (so a bad flag dies exactly like argparse would), then runs the mock server.
Invoked as `fake_framework.py -m vllm.entrypoints.openai.api_server --model ... --port P ...`.
FAKE_MODE (ok|never_ready|die|die_after) and FAKE_LOG_LINE pick the behaviour."""
import os
import sys

from tools.bench import mock_server
from tools.frameworks import FlagError, get

MODULES = {"vllm.entrypoints.openai.api_server": "vllm", "sglang.launch_server": "sglang",
           "atom.entrypoints.openai_server": "atom"}

assert sys.argv[1] == "-m", sys.argv
fw = get(MODULES[sys.argv[2]])
try:
    flags = fw.parse_flags(sys.argv[3:])
except FlagError as e:
    print(f"usage: {fw.prog} [-h] ...", flush=True)
    print(e.log_line(fw.prog), flush=True)
    sys.exit(2)
for k, v in sorted(os.environ.items()):
    if k.startswith(("VLLM_", "SGLANG_", "AITER_")):
        print(f"env {k}={v}", flush=True)
print("secret-env " + (",".join(k for k in os.environ if "KEY" in k or "TOKEN" in k) or "none"), flush=True)
print("pythonpath " + os.environ.get("PYTHONPATH", "").split(os.pathsep)[0], flush=True)
print("flags " + " ".join(f"{k}={v}" for k, v in flags.items()), flush=True)
name = flags.get("--served-model-name") or flags.get(fw.model_flag)
if isinstance(name, list):  # vLLM's --served-model-name takes several names (nargs="+"); the first is the model's
    name = name[0]
mock_server.main(["--port", str(flags[fw.port_flag]), "--host", flags.get("--host", "127.0.0.1"),
                  "--model", str(name), "--mode", os.environ.get("FAKE_MODE", "ok"),
                  "--ready-line", fw.ready_line, "--log-line", os.environ.get("FAKE_LOG_LINE", ""),
                  "--itl-s", os.environ.get("FAKE_ITL_S", "0"),
                  "--die-after-s", os.environ.get("FAKE_DIE_AFTER_S", "1")])
