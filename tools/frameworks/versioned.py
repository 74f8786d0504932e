"""Adapters whose flags come from a shipped schema of one framework version (tools/frameworks/schemas).

The schema says which options exist, their types, choices and defaults, exactly as the real parser
has them; the adapter adds the project's own annotations on top (what to search, on which vendors a
switch does anything, which value defeats a workload feature) and a rename table for flags a later
version renamed or split. Parsing goes through a real argparse parser rebuilt from the schema, so
prefixes, `16k`, both spellings (where the version takes both) and argparse's error texts hold.

    fw = SGLang.for_version("0.5.23")   # or frameworks.get("sglang", "0.5.23")
"""
from __future__ import annotations

import json
from typing import Any

from tools.errors import BadInput
from tools.frameworks import schemas
from tools.frameworks.base import FlagSpec, Framework
from tools.frameworks.schemas.parser import FlagError, build

BOOL_ACTIONS = ("store_true", "store_false", "boolean_optional")


def spec_from_action(a: dict, name: str) -> FlagSpec:
    kind = a["action"]
    typ = "bool" if kind in BOOL_ACTIONS else {"int": "int", "float": "float", "json": "json", "human_int": "human_int",
                                              "human_int_or_auto": "human_int_or_auto"}.get(a["type"]["kind"], "str")
    negs = list(a.get("negatives") or [])
    default = a.get("default")
    if isinstance(default, dict) and "repr" in default:  # an object the schema could only describe
        default = None
    choices = a["choices"] if isinstance(a.get("choices"), list) else None
    return FlagSpec(name=name, aliases=[s for s in a["options"] if s != name and s not in negs], type=typ,
                    choices=choices, default=default, help=a.get("help") or "", negatable=bool(negs),
                    nargs=a.get("nargs") if kind not in BOOL_ACTIONS else None,
                    deprecated=bool(a.get("deprecated")), negatives=negs)


class VersionedFramework(Framework):
    framework_schema: str = ""  # the schema files' framework name
    # Project annotations by flag name (any spelling the schema registers): FlagSpec fields
    # (search, vendors, defeats, default for an effective default that differs from argparse's).
    annotations: dict[str, dict] = {}
    # Old name -> the name(s) later versions use for the same knob, first preferred; the value is
    # carried over unchanged (a split flag gets it on the first, the one the old flag meant most).
    renames: dict[str, tuple[str, ...]] = {}
    _instances: dict = {}

    def __init__(self, version: str | None = None) -> None:
        use, note = schemas.resolve(self.framework_schema or self.name, version)
        if use is None:
            raise FlagError(f"no flag schema shipped for {self.name}")
        self.version, self.requested_version, self.version_note = use, version, note
        self.schema = schemas.load(self.framework_schema or self.name, use)
        self.parser = build(self.schema)
        preferred = set(self.annotations) | set(self.renames) | {t for ts in self.renames.values() for t in ts} \
            | self.parallel_flag_names() | {self.model_flag, self.port_flag, "--host", self.served_name_flag or ""}
        self.flag_table = []
        self._dest_name: dict[str, str] = {}
        for a in self.schema["actions"]:
            if a["action"] in ("help", "version"):
                continue
            longs = [s for s in a["options"] if s.startswith("--") and s not in (a.get("negatives") or [])]
            name = next((s for s in a["options"] if s in preferred), longs[0] if longs else a["options"][0])
            spec = spec_from_action(a, name)
            ann = next((self.annotations[s] for s in a["options"] if s in self.annotations), None)
            if ann:
                spec = spec.model_copy(update=self._fit(spec, ann))
            self.flag_table.append(spec)
            self._dest_name[a["dest"]] = name
        super().__init__()

    @staticmethod
    def _fit(spec: FlagSpec, ann: dict) -> dict:
        """An annotation narrowed to what this version accepts (search choices it has)."""
        out = dict(ann)
        sr = out.get("search")
        if sr and "choices" in sr and spec.choices is not None:
            out["search"] = {**sr, "choices": [c for c in sr["choices"] if c in spec.choices or isinstance(c, bool)]}
        return out

    @classmethod
    def for_version(cls, version: str | None = None) -> "VersionedFramework":
        key = (cls, version)
        if key not in VersionedFramework._instances:
            VersionedFramework._instances[key] = cls(version)
        return VersionedFramework._instances[key]

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    # -- names: as argparse resolves them ---------------------------------------------------
    def lookup(self, option: str) -> tuple[FlagSpec | None, bool]:
        """(spec, negated) for an option string as typed (exact, or an unambiguous prefix where
        the version's parser allows abbreviations), or (None, False)."""
        opt = option.split("=", 1)[0]
        if self.parser.underscores_to_dashes and opt.startswith("--"):
            opt = "--" + opt[2:].replace("_", "-")
        acts = self.parser._option_string_actions
        action = acts.get(opt)
        if action is None and self.parser.allow_abbrev and opt.startswith("--"):
            hits = {id(a): a for s, a in acts.items() if s.startswith(opt)}
            action = next(iter(hits.values())) if len(hits) == 1 else None
        if action is None:
            return None, False
        spec = self.flags.get(self._dest_name.get(action.dest, ""))
        return spec, bool(spec and opt in spec.negatives)

    def _norm(self, s: str) -> str:
        spec, _ = self.lookup(s)
        return spec.name if spec else s

    def accepts(self, option: str) -> bool:
        return self.lookup(option)[0] is not None

    # -- parsing: the rebuilt argparse parser -------------------------------------------------
    def parse_flags(self, args: list[str]) -> dict[str, object]:
        parsed = self.parser.parse(list(args))
        return {self._dest_name.get(k, k): v for k, v in parsed.items()}

    # -- argv --------------------------------------------------------------------------------
    def flag_args(self, flags: dict[str, object]) -> list[str]:
        out: list[str] = []
        for k, v in flags.items():
            spec, _ = self.lookup(k)
            if v is False and spec is not None and spec.negatable:
                no = "--no-" + spec.name[2:]  # the spelling every version with the switch takes
                out.append(no if no in spec.negatives or not spec.negatives else spec.negatives[0])
            if v is None or v is False:
                continue
            if v is True:
                out.append(k)
            elif spec is not None and spec.nargs in ("+", "*") and isinstance(v, (list, tuple)):
                out += [k, *map(str, v)]
            else:
                out += [k, json.dumps(v) if isinstance(v, (dict, list)) else str(v)]
        return out

    # -- versions: renamed flags -----------------------------------------------------------------
    def translate(self, flags: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Flags written for another version -> this version's names, with one note per rename.
        A flag this version does not take and has no rename for is left as it is (validate names it)."""
        out, notes = {}, []
        for k, v in flags.items():
            if self.accepts(k):
                out[k] = v
                continue
            new = next((t for t in self.renames.get(k, ()) if self.accepts(t)), None)
            if new is None:
                out[k] = v
                continue
            out[new] = v
            notes.append(f"{k} -> {new} ({self.label} has no {k}"
                         + (f"; it split into {', '.join(self.renames[k])}" if len(self.renames[k]) > 1 else "") + ")")
        return out, notes

    # -- validation: the version's own refusal, in argparse's words -------------------------------
    def validate(self, c) -> None:
        for k in c.flags:
            if self.lookup(k)[0] is None:
                try:
                    self.parser.parse([k])
                    why = "unrecognized arguments: " + k
                except FlagError as e:
                    why = str(e)
                raise BadInput(f"{self.label} has no flag {k!r} ({why})"
                               + (f"; allowed: {', '.join(self.renames.get(k, ())) or ', '.join(self._near(k))}"
                                  if self.renames.get(k) or self._near(k) else "")) from None
        super().validate(c)

    def _near(self, option: str) -> list[str]:
        """This version's flags that share the option's first two words (what a user meant)."""
        stem = "-".join(option.lstrip("-").replace("_", "-").split("-")[:2])
        return sorted(n for n in self.flags if n.lstrip("-").replace("_", "-").startswith(stem))[:8]
