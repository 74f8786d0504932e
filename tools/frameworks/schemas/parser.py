"""A real argparse.ArgumentParser rebuilt from a shipped schema: the simulator and the adapters
parse with it, so prefixes (`--tp 8`), `16k`, choices, ambiguity and the error wording are
argparse's own, for the chosen framework version, with no framework installed.

Every option is added with default=SUPPRESS, so the parse returns only what the command line set.
`required` is not enforced: candidates' flag tails are parsed without the launcher's `--model`.
"""
from __future__ import annotations

import argparse
import json
import re
from decimal import Decimal


class FlagError(ValueError):
    """A flag the framework's CLI rejects. `str(e)` is argparse's message (what follows
    `error: `); `log_line(prog)` is the whole stderr line the real CLI prints."""

    def __init__(self, message: str, *, flag: str | None = None, value: object = None,
                 allowed: list | None = None):
        super().__init__(message)
        self.flag, self.value, self.allowed = flag, value, allowed

    def log_line(self, prog: str) -> str:
        return f"{prog}: error: {self}"


# -- converters, named as the frameworks name them (argparse's errors print the name) ----------
def _sglang_human_readable_int(value: str) -> int:
    """sglang/srt/utils/common.py: SI suffixes k, M, G, T (decimals allowed) and IEC Ki..Ti."""
    value = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if m:
        number, suffix = m.groups()
        if suffix.endswith("i"):
            if "." in number:
                raise argparse.ArgumentTypeError(f"Decimals are not allowed with IEC suffixes like '{suffix}'.")
            return int(number) * 2 ** (10 * "KMGT".index(suffix[0]) + 10)
        return int(Decimal(number) * 10 ** (3 * "kMGT".index(suffix) + 3))
    return int(value)


def _vllm_human_readable_int(value: str) -> int:
    """vllm/utils/argparse_utils.py: 'k'/'m'/'g'/'t' decimal (1k = 1000), 'K'.. binary (1K = 1024)."""
    value = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if m:
        number, suffix = m.groups()
        if suffix.islower():
            return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        if "." in number:
            raise argparse.ArgumentTypeError(f"Decimals are not allowed with binary suffixes like {suffix}. "
                                             f"Did you mean to use {number}{suffix.lower()} instead?")
        return int(number) * 2 ** (10 * "KMGT".index(suffix) + 10)
    return int(value)


def _vllm_human_readable_int_or_auto(value: str) -> int:
    if value.strip() == "-1" or value.strip().lower() == "auto":
        return -1
    return _vllm_human_readable_int(value)


def _named(fn, name):
    fn.__name__ = name
    return fn


def converter(kind: str, framework: str):
    if kind == "int":
        return int
    if kind == "float":
        return float
    if kind == "json":
        return _named(lambda s: json.loads(s), "loads")
    if kind == "human_int":
        return _named(_sglang_human_readable_int if framework == "sglang" else _vllm_human_readable_int,
                      "human_readable_int")
    if kind == "human_int_or_auto":
        return _named(_vllm_human_readable_int_or_auto, "human_readable_int_or_auto")
    return str


class _Negatable(argparse.Action):
    """BooleanOptionalAction as the schema recorded it: the `negatives` strings set False."""

    def __init__(self, option_strings, dest, negatives=(), **kw):
        self.negatives = set(negatives)
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string not in self.negatives)


class SchemaParser(argparse.ArgumentParser):
    """Raises FlagError instead of printing and exiting; otherwise argparse, unchanged."""

    underscores_to_dashes = False
    by_display: dict[str, argparse.Action]

    def error(self, message: str):
        flag, value, allowed = None, None, None
        if m := re.match(r"unrecognized arguments: (.*)", message):
            value = m.group(1).split()
            flag = next((u for u in value if u.startswith("-")), value[0] if value else None)
        elif m := re.match(r"ambiguous option: (\S+?)(?:=\S*)? could match (.*)", message):
            flag, allowed = m.group(1), [s.strip() for s in m.group(2).split(",")]
        raise FlagError(message, flag=flag, value=value, allowed=allowed)

    def parse(self, args: list[str]) -> dict[str, object]:
        """dest -> value for what `args` set; FlagError (argparse's words) for what it refuses."""
        args = [str(a) for a in args]
        if self.underscores_to_dashes:  # vLLM's FlexibleArgumentParser, before argparse sees them
            args = [re.sub(r"(?<=^--)[^.=]*", lambda m: m.group(0).replace("_", "-"), a, count=1)
                    if a.startswith("--") else a for a in args]
        try:
            return vars(self.parse_args(args))
        except argparse.ArgumentError as e:
            action = self.by_display.get(e.argument_name or "")
            flag = next((s for s in (action.option_strings if action else []) if s.startswith("--")), None)
            value = None
            if m := re.search(r"invalid (?:choice|\S+ value): (.+?)(?: \(choose from|$)", e.message):
                value = m.group(1).strip("'")
            raise FlagError(str(e), flag=flag, value=value,
                            allowed=list(action.choices) if action is not None and action.choices else None) from None


def build(doc: dict) -> SchemaParser:
    """The parser a schema document describes."""
    p = SchemaParser(prog=doc.get("prog") or doc["framework"], allow_abbrev=bool(doc.get("allow_abbrev", True)),
                     add_help=False, exit_on_error=False)
    p.underscores_to_dashes = bool(doc.get("underscores_to_dashes"))
    for a in doc["actions"]:
        if a["action"] in ("help", "version"):
            continue
        kw: dict = {"dest": a["dest"], "default": argparse.SUPPRESS}
        kind = a["action"]
        opts = [s for s in a["options"] if s not in a.get("negatives", [])]
        if kind == "boolean_optional":
            opts = list(a["options"])  # the negatives are option strings too
            kw.update(action=_Negatable, negatives=a.get("negatives", []))
        elif kind in ("store_true", "store_false", "count"):
            kw["action"] = kind
        elif kind == "store_const":
            kw.update(action="store_const", const=a.get("const"))
        else:
            kw["action"] = "append" if kind == "append" else "store"
            kw["type"] = converter(a["type"]["kind"], doc["framework"])
            if a.get("nargs") is not None:
                kw["nargs"] = a["nargs"]
            if a.get("choices") is not None and isinstance(a["choices"], list):
                kw["choices"] = a["choices"]
        p.add_argument(*opts, **kw)
    p.by_display = {"/".join(act.option_strings): act for act in p._actions}
    for act in p._actions:  # argparse names an argument by its metavar when it has one
        if act.metavar:
            p.by_display[act.metavar] = act
    return p
