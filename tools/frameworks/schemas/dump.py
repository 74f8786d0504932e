"""A real argparse parser -> schema data (plain JSON), the same for every framework.

Standard library only: the generator also runs this file under the testbed's vLLM interpreter,
which has none of the project's packages. One entry per argparse action: its option strings as
the parser registered them, the action kind, the value type by the converter's name, choices,
default, nargs, const, the first line of its help, and whether the framework marks it
deprecated (argparse's own `deprecated=`, vLLM's backport of it, or sglang's Deprecated*Action).
"""
from __future__ import annotations

import argparse
import enum
import json
import math

# Converter function names -> the kind the schema's parser rebuilds (tools/frameworks/schemas/parser.py).
TYPE_KINDS = {
    "int": "int", "float": "float", "str": "str", "loads": "json",
    "human_readable_int": "human_int", "human_readable_int_or_auto": "human_int_or_auto",
    "parse_size_list": "str", "json_list_type": "json", "nullable_str": "str", "parse_dataclass": "json",
}
ACTIONS = {
    "_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const", "_AppendAction": "append", "_CountAction": "count",
    "BooleanOptionalAction": "boolean_optional", "_HelpAction": "help", "_VersionAction": "version",
}


def jsonable(v):
    """Defaults and choices as JSON; anything else as its repr (a stub, a callable, an object)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return v if math.isfinite(v) else repr(v)
    if isinstance(v, enum.Enum):
        return jsonable(v.value)
    if isinstance(v, (list, tuple, set, frozenset)):
        items = [jsonable(x) for x in v]
        return sorted(items, key=repr) if isinstance(v, (set, frozenset)) else items
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return {"repr": repr(v)[:200]}


def converter(fn) -> dict:
    """What a `type=` callable is: its name, the kind it parses as, and for wrappers vLLM builds
    (optional_type(int), parse_type(json.loads)) the wrapped converter."""
    if fn is None:
        return {"name": None, "kind": "str"}
    name = getattr(fn, "__name__", None) or type(fn).__name__
    wrapped = None
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:
            continue
        if callable(inner) and getattr(inner, "__name__", None) in TYPE_KINDS:
            wrapped = inner.__name__
            break
    kind = TYPE_KINDS.get(name) or TYPE_KINDS.get(wrapped or "") or "str"
    out = {"name": getattr(fn, "__qualname__", name), "kind": kind}
    if wrapped:
        out["wraps"] = wrapped
    if isinstance(fn, type) and issubclass(fn, enum.Enum):
        out["kind"] = "str"
    return out


def action_entry(a: argparse.Action, deprecated_set=(), registered=None) -> dict:
    """`registered`: every option string the parser maps to this action (vLLM 0.33 hides
    `--no-enable-x` from the action's own list but still accepts it)."""
    cls = type(a).__name__
    options = list(a.option_strings) + [s for s in (registered or []) if s not in a.option_strings]
    help_text = a.help if isinstance(a.help, str) else ""
    first = help_text.strip().splitlines()[0].strip() if help_text.strip() else ""
    deprecated = bool(getattr(a, "deprecated", False)) or a in deprecated_set or cls.startswith("Deprecated") \
        or first.lower().startswith("deprecated")
    kind = ACTIONS.get(cls)
    negatives: list[str] = []
    if isinstance(a, argparse.BooleanOptionalAction):
        kind = "boolean_optional"
        negatives = sorted(getattr(a, "negative_option_strings", None)
                           or [s for s in options if s.startswith("--no-")])
    if kind is None:  # a framework's own Action class: say which standard one it behaves as
        if a.nargs == 0:
            kind = "store_const" if a.const is not None and not isinstance(a.const, bool) else \
                ("store_false" if a.const is False or a.default is True else "store_true")
        else:
            kind = "store"
    choices = a.choices
    if isinstance(choices, (set, frozenset)):  # its order changes with PYTHONHASHSEED (sglang's sampling backends)
        choices = sorted(choices, key=repr)
    e = {"options": options, "negatives": negatives, "dest": a.dest, "action": kind, "action_class": cls,
         "type": converter(a.type), "choices": jsonable(list(choices)) if choices is not None else None,
         "default": jsonable(a.default if a.default is not argparse.SUPPRESS else None),
         "nargs": a.nargs, "const": jsonable(a.const), "required": bool(a.required), "help": first[:300],
         "deprecated": deprecated}
    return e


def dump_parser(parser: argparse.ArgumentParser) -> dict:
    dep = getattr(parser, "_deprecated", ())  # vLLM's backport of argparse's deprecated= (< 3.13)
    registered: dict[int, list[str]] = {}
    for s, a in parser._option_string_actions.items():
        registered.setdefault(id(a), []).append(s)
    return {"prog": parser.prog, "allow_abbrev": bool(parser.allow_abbrev),
            "parser_class": type(parser).__name__,
            "actions": [action_entry(a, dep, registered.get(id(a))) for a in parser._actions if a.option_strings]}


def dump_json(parser: argparse.ArgumentParser) -> str:
    return json.dumps(dump_parser(parser), indent=1, sort_keys=True)
