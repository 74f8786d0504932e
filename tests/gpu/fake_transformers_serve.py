"""A stand-in for `python -m transformers.cli.transformers serve MODEL --host H --port P ...` with no
GPU: the options are parsed by the transformers adapter (a bad one dies like the real CLI), then the
loopback mock server answers in the real server's place, with its ready line and /health."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's tools/

from tools.bench import mock_server  # noqa: E402
from tools.frameworks import get  # noqa: E402

fw = get("transformers")
assert sys.argv[1:4] == ["-m", fw.module, "serve"], sys.argv
model, rest = sys.argv[4], sys.argv[5:]
opts = dict(zip(rest[::2], rest[1::2]))
print("flags " + " ".join(rest), flush=True)
mock_server.main(["--port", opts["--port"], "--host", opts.get("--host", "127.0.0.1"), "--model", model,
                  "--ready-line", fw.ready_line])
