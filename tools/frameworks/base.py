"""What every serving framework adapter shares: flag schema, argparse-faithful flag parsing,
argv building from a Candidate, validation, and log diagnosis.

Flag parsing mimics argparse on purpose: the simulator calls `parse_flags` to decide whether a
launch dies on a bad flag, and the error text it then writes to its log must read exactly like
the real CLI's (`unrecognized arguments: --foo`, `argument --x: invalid choice: 'y' (choose
from 'a', 'b')`), so the same `diagnose` reads both grounds.
"""
from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel

from tools.errors import BadInput
from tools.candidate import Candidate
from tools.frameworks.schemas.parser import FlagError  # noqa: F401 - re-exported: adapters and the sim raise it
from tools.protocols import Diagnosis

# human_int[_or_auto]: vLLM's human_readable_int[_or_auto] ('8k' = 8000, '8K' = 8192; '-1'/'auto').
FlagType = Literal["int", "human_int", "human_int_or_auto", "float", "str", "bool", "json"]
INT_TYPES = ("int", "human_int", "human_int_or_auto")
_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class FlagSpec(BaseModel):
    name: str  # canonical, as the framework defines it: "--kv-cache-dtype"
    aliases: list[str] = []  # other spellings the CLI accepts: ["-tp", "--tp"]
    type: FlagType = "str"
    choices: list | None = None
    default: Any = None
    help: str = ""
    # The range worth tuning ({"low", "high", "log"} or {"choices": [...]}); None: not a knob.
    search: dict | None = None
    negatable: bool = False  # argparse.BooleanOptionalAction: `--no-<name>` sets it False
    # Hardware vendors on which the knob does anything (aiter is ROCm-only); None: every vendor.
    # The CLI accepts it everywhere; a planner need not spend a launch on a no-op.
    vendors: list[str] | None = None
    # (value, workload feature) where that value switches the feature off: a radix-cache kill switch
    # defeats prefix reuse, so no launch is spent on it for a workload whose prompts share prefixes.
    defeats: tuple[Any, str] | None = None
    nargs: Any = None  # argparse nargs from the schema ('+': a list value renders as separate tokens)
    deprecated: bool = False  # the framework marks it deprecated (it still parses)
    negatives: list[str] = []  # option strings that set a negatable switch False (schema adapters)

    @property
    def display(self) -> str:
        """How argparse names the argument in its errors: all option strings joined by '/'
        (BooleanOptionalAction adds `--no-<name>` right after the name)."""
        neg = ["--no-" + self.name[2:]] if self.negatable else []
        return "/".join([self.name, *neg, *self.aliases])


def F(name: str, type: FlagType = "str", *aliases: str, choices: list | None = None,
      default: Any = None, help: str = "", search: dict | None = None,
      negatable: bool = False, vendors: list[str] | None = None,
      defeats: tuple[Any, str] | None = None) -> FlagSpec:
    """Compact constructor for the framework tables."""
    return FlagSpec(name=name, aliases=list(aliases), type=type, choices=choices, default=default,
                    help=help, search=search, negatable=negatable, vendors=vendors,
                    defeats=defeats)


def _human_int(spec: FlagSpec, raw: str) -> int:
    """vLLM's human_readable_int(_or_auto), with argparse's error wording for each failure."""
    s = raw.strip()
    if spec.type == "human_int_or_auto" and (s == "-1" or s.lower() == "auto"):
        return -1
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", s)
    if m:
        number, suffix = m.groups()
        if suffix.islower():
            return int(float(number) * _SUFFIX[suffix])
        if "." not in number:
            return int(number) * _SUFFIX[suffix]
        raise FlagError(f"argument {spec.display}: Decimals are not allowed with binary suffixes like {suffix}. "
                        f"Did you mean to use {number}{suffix.lower()} instead?", flag=spec.name, value=raw)
    try:
        return int(s)
    except ValueError:
        raise FlagError(f"argument {spec.display}: invalid {spec.type.replace('human_int', 'human_readable_int')} "
                        f"value: {raw!r}", flag=spec.name, value=raw) from None


def _looks_negative_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


class Framework:
    name: str = ""
    ready_line: str = ""
    health_path: str = "/health"
    moe_config_env: str = ""
    module: str = ""  # `python -m <module>`
    prog: str = ""  # the program name argparse prints in errors
    model_flag: str = "--model"
    port_flag: str = "--port"
    served_name_flag: str | None = "--served-model-name"
    snake_case_ok: bool = False  # the CLI accepts --max_num_seqs for --max-num-seqs
    json_error: str = "invalid loads value: {raw!r}"  # argparse's text when a JSON flag fails to parse
    flag_table: list[FlagSpec] = []

    def __init__(self) -> None:
        self.flags: dict[str, FlagSpec] = {f.name: f for f in self.flag_table}
        self._by_string: dict[str, FlagSpec] = {}
        for f in self.flag_table:
            for s in (f.name, *f.aliases):
                self._by_string[self._norm(s)] = f

    # -- names ---------------------------------------------------------------------------
    def _norm(self, s: str) -> str:
        if self.snake_case_ok and s.startswith("--"):
            return "--" + s[2:].replace("_", "-")
        return s

    def lookup(self, option: str) -> tuple[FlagSpec | None, bool]:
        """(spec, negated) for an option string as typed, or (None, False) if unknown."""
        key = self._norm(option)
        if key in self._by_string:
            return self._by_string[key], False
        if key.startswith("--no-"):
            spec = self._by_string.get("--" + key[5:])
            if spec is not None and spec.negatable:
                return spec, True
        return None, False

    # -- parsing -------------------------------------------------------------------------
    def _convert(self, spec: FlagSpec, raw: str) -> object:
        if spec.type.startswith("human_int"):
            value = _human_int(spec, raw)
        elif spec.type == "int":
            try:
                value: object = int(raw)
            except ValueError:
                raise FlagError(f"argument {spec.display}: invalid int value: {raw!r}",
                                flag=spec.name, value=raw) from None
        elif spec.type == "float":
            try:
                value = float(raw)
            except ValueError:
                raise FlagError(f"argument {spec.display}: invalid float value: {raw!r}",
                                flag=spec.name, value=raw) from None
        elif spec.type == "json":
            try:
                value = json.loads(raw)
            except ValueError:
                raise FlagError(f"argument {spec.display}: " + self.json_error.format(raw=raw),
                                flag=spec.name, value=raw) from None
        else:
            value = raw
        if spec.choices is not None and value not in spec.choices:
            allowed = ", ".join(map(repr, spec.choices))
            raise FlagError(f"argument {spec.display}: invalid choice: {value!r} (choose from {allowed})",
                            flag=spec.name, value=value, allowed=list(spec.choices))
        return value

    def parse_flags(self, args: list[str]) -> dict[str, object]:
        """Parse a command-line tail the way the framework's argparse would.
        Returns canonical name -> typed value; raises FlagError with argparse's wording."""
        out: dict[str, object] = {}
        unknown: list[str] = []
        i = 0
        while i < len(args):
            a = str(args[i])
            if not a.startswith("-") or a == "-" or _looks_negative_number(a):
                unknown.append(a)
                i += 1
                continue
            opt, eq, val = a.partition("=")
            spec, negated = self.lookup(opt)
            if spec is None:
                unknown.append(a)
                i += 1
                continue
            if spec.type == "bool":
                if eq:
                    raise FlagError(f"argument {spec.display}: ignored explicit argument {val!r}",
                                    flag=spec.name, value=val)
                out[spec.name] = not negated
                i += 1
                continue
            if eq:
                raw, i = val, i + 1
            else:
                nxt = args[i + 1] if i + 1 < len(args) else None
                if nxt is None or (str(nxt).startswith("-") and not _looks_negative_number(str(nxt))):
                    raise FlagError(f"argument {spec.display}: expected one argument", flag=spec.name)
                raw, i = str(nxt), i + 2
            out[spec.name] = self._convert(spec, raw)
        if unknown:
            raise FlagError("unrecognized arguments: " + " ".join(unknown),
                            flag=next((u for u in unknown if u.startswith("-")), unknown[0]),
                            value=unknown)
        return out

    # -- argv ----------------------------------------------------------------------------
    def parallel_args(self, c: Candidate) -> list[str]:
        raise NotImplementedError

    def flag_args(self, flags: dict[str, object]) -> list[str]:
        """Candidate flags -> argv: True is a bare switch, False is `--no-<name>` where the switch
        is negatable (and left out elsewhere), None is left out."""
        out: list[str] = []
        for k, v in flags.items():
            if v is False and (spec := self.lookup(k)[0]) is not None and spec.negatable:
                out.append("--no-" + spec.name[2:])
            if v is None or v is False:
                continue
            if v is True:
                out.append(k)
            else:
                out += [k, json.dumps(v) if isinstance(v, (dict, list)) else str(v)]
        return out

    def argv(self, c: Candidate, *, model: str, port: int, host: str = "127.0.0.1",
             served_name: str | None = None, python: str = "python3") -> list[str]:
        """The whole command line: interpreter, entrypoint, model, port, parallelism, flags."""
        cmd = [python, "-m", self.module, self.model_flag, model]
        if served_name and self.served_name_flag:
            cmd += [self.served_name_flag, served_name]
        cmd += ["--host", host, self.port_flag, str(port)]
        return cmd + self.parallel_args(c) + self.flag_args(c.flags)

    # -- validation ----------------------------------------------------------------------
    _managed = ("model", "port", "host", "served")  # set by argv(), not by candidates

    def validate(self, c: Candidate) -> None:
        """Reject a candidate before launch, naming the flag and what is allowed."""
        if c.framework != self.name:
            raise BadInput(f"candidate is for framework {c.framework!r}, not {self.name!r}")
        for k, v in c.flags.items():
            spec, _ = self.lookup(k)
            if spec is None:
                raise BadInput(f"{self.name} has no flag {k!r} (unrecognized arguments: {k})")
            if spec.name in self.parallel_flag_names():
                raise BadInput(f"{self.name} flag {k} is set from the candidate's parallel "
                               f"(tp/dp/ep), not from flags")
            if spec.name in (self.model_flag, self.port_flag, "--host", self.served_name_flag):
                raise BadInput(f"{self.name} flag {k} is set by the launcher, not by candidates")
            if spec.type == "bool" and v not in (True, False, None):
                raise BadInput(f"{self.name} flag {k} is a switch: give true/false, not {v!r}")
            if spec.type != "bool" and v is True:
                raise BadInput(f"{self.name} flag {k} needs a value ({spec.type}"
                               + (f", one of {', '.join(map(str, spec.choices))}" if spec.choices else "")
                               + ")")
        try:
            parsed = self.parse_flags(self.flag_args(c.flags))
        except FlagError as e:
            allowed = f"; allowed: {', '.join(map(str, e.allowed))}" if e.allowed else ""
            raise BadInput(f"{self.name} flag {e.flag}: {e}{allowed}") from None
        self.check_values(parsed)

    def check_values(self, parsed: dict) -> None:
        """BadInput for parsed values argparse takes but no server can use (tools/flag_values.py)."""
        from tools.flag_values import problem
        for name, value in parsed.items():
            why = problem(self.flags[name], value)
            if why:
                raise BadInput(f"{self.name} flag {name}: {why}")

    def parallel_flag_names(self) -> set[str]:
        return set()

    # -- logs ----------------------------------------------------------------------------
    def diagnose(self, log_text: str) -> list[Diagnosis]:
        from tools.frameworks.signatures import diagnose
        return diagnose(log_text)
