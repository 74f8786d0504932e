"""The tools an LLM planner may call: read-only views of the run, and proposal tools that only
*describe* a next step (the graph's nodes decide, review and apply; nothing here writes).

Safety rules enforced here, not in the prompt:
- no shell and no writes: every tool reads the ledger snapshot (PlanContext), a run's log files,
  or the framework source tree; the only subprocess is `git apply --check`, which writes nothing;
- source paths are resolved and refused when they leave the tree (absolute, `..`, symlinks, .git);
- log and source text is redacted (secrets) and wrapped as untrusted data before the model sees it;
- there is no approve tool: approval comes from a human or the run's --approve policy only.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from agent.planners import grid
from agent.planners.base import PatchProposal, PlanContext, Proposal
from tools import frameworks
from tools import logs as logtools
from tools import patch as patchtool
from tools.bounded_grep import Deadline, GrepBounded, compile_bounded
from tools.candidate import Candidate, Parallel

MAX_GREP_FILE = 2 << 20  # bytes: generated tables and minified files are not what a fix needs

MAX_CHARS = 12_000  # per tool result: keeps one decision inside its token budget
UNTRUSTED_OPEN = '<untrusted-data source="{src}">'
UNTRUSTED_CLOSE = "</untrusted-data>"


class ToolError(ValueError):
    """Told back to the model as the tool's result, so it can correct itself."""


def untrusted(src: str, text: str, secrets: tuple[str, ...] = (), *, redact: bool = True) -> str:
    """Mark text from logs/source as data. A closing marker inside the text is defused so the
    data cannot end its own quotation and speak as the planner. Logs are redacted (`key=...`
    patterns); source is not (it would corrupt code the model must diff), only known secrets are."""
    if redact:
        text = logtools.redact(text)
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    text = re.sub(r"(?i)</?\s*untrusted-data", "[marker removed]", text)
    if len(text) > MAX_CHARS:
        text = text[:MAX_CHARS] + f"\n[... truncated, {len(text) - MAX_CHARS} more characters]"
    return f"{UNTRUSTED_OPEN.format(src=src)}\n{text}\n{UNTRUSTED_CLOSE}"


def _fn(name: str, desc: str, props: dict, required: list[str] | None = None) -> dict:
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": props, "required": required or [], "additionalProperties": False}}}


_S, _I, _O = {"type": "string"}, {"type": "integer"}, {"type": "object"}
READ_TOOLS = [
    _fn("list_trials", "Every trial so far: id, phase, what was tried, verdict, reason, key numbers.", {}),
    _fn("trial_numbers", "Measurements of one trial (knee tok/s, TTFT, single stream, evals).",
        {"trial_id": _I}, ["trial_id"]),
    _fn("read_log", "Lines of a trial's server log (untrusted data).",
        {"trial_id": _I, "start_line": _I, "max_lines": _I}, ["trial_id"]),
    _fn("grep_log", "Regex search in a trial's server log, with context lines.",
        {"trial_id": _I, "pattern": _S, "context": _I}, ["trial_id", "pattern"]),
    _fn("list_source", "Files under a directory of a framework's source tree.",
        {"framework": _S, "path": _S}, ["framework"]),
    _fn("read_source", "Lines of a file in a framework's source tree (untrusted data).",
        {"framework": _S, "path": _S, "start_line": _I, "max_lines": _I}, ["framework", "path"]),
    _fn("grep_source", "Regex search over a framework's source tree (or a subdirectory).",
        {"framework": _S, "pattern": _S, "path": _S}, ["framework", "pattern"]),
    _fn("model_card", "The model's shapes (layers, MTP layers, experts, heads, ...).", {}),
    _fn("hardware_profile", "The node's hardware (vendor, memory, bandwidth, TFLOP/s, GPUs).", {}),
    _fn("flag_schema", "A framework's tunable flags: name, type, choices, default, search range.",
        {"framework": _S, "filter": _S}, ["framework"]),
]
PROPOSE_TOOLS = [
    _fn("propose_config", "Propose one configuration to launch and measure. Starts from the candidate "
        "being fixed (or the incumbent); flags/env are merged in (null removes a flag).",
        {"framework": _S, "weights": _S, "tp": _I, "dp": _I, "ep": {"type": "boolean"}, "flags": _O,
         "env": _O, "rationale": _S}, ["rationale"]),
    _fn("propose_patch", "Propose a patch to the framework source (a unified diff with a/ b/ paths "
        "relative to the tree root). A human or the run's policy reviews it before it is applied.",
        {"framework": _S, "diff": _S, "title": _S, "why": _S}, ["framework", "diff", "title", "why"]),
    _fn("propose_moe_tune", "Run the MoE kernel tuner for the incumbent's shard shapes.", {"rationale": _S},
        ["rationale"]),
    _fn("stop", "Nothing worth trying now (say why).", {"reason": _S}, ["reason"]),
]
TOOLS = READ_TOOLS + PROPOSE_TOOLS
PROPOSAL_TOOLS = {t["function"]["name"] for t in PROPOSE_TOOLS}


@dataclass
class ToolBox:
    """Read-only tools over one decision's context. `focus` is the failed trial being fixed."""
    ctx: PlanContext
    run_dir: Path | None = None
    focus: int | None = None
    secrets: tuple[str, ...] = ()
    calls: list[str] = field(default_factory=list)

    # ---- dispatch ------------------------------------------------------------------------
    def call(self, name: str, args: dict) -> str | Proposal:
        """A string for the model, or a Proposal when a proposal tool validated."""
        self.calls.append(name)
        fn = getattr(self, "t_" + name, None)
        if fn is None or name not in {t["function"]["name"] for t in TOOLS}:
            raise ToolError(f"unknown tool {name!r}; the tools are {', '.join(sorted(t['function']['name'] for t in TOOLS))}")
        try:
            return fn(**args)
        except TypeError as e:
            raise ToolError(f"bad arguments for {name}: {e}") from None

    # ---- ledger views --------------------------------------------------------------------
    def _trial(self, trial_id) -> dict:
        t = next((t for t in self.ctx.trials if t["id"] == int(trial_id)), None)
        if t is None:
            raise ToolError(f"no trial {trial_id}; trials are {[t['id'] for t in self.ctx.trials]}")
        return t

    def t_list_trials(self) -> str:
        rows = []
        for t in self.ctx.trials:
            c = t["candidate"]
            n = t.get("numbers") or {}
            rows.append({"id": t["id"], "phase": t["phase"], "kind": t["kind"], "what": t["description"],
                         "framework": c["framework"], "weights": c["weights"], "parallel": c["parallel"],
                         "flags": c["flags"], "env": c["env"], "patches": c["patches"],
                         "outcome": t["outcome"], "verdict": t["verdict"], "reason": t["reason"],
                         "numbers": {k: v for k, v in n.items() if not isinstance(v, (dict, list))},
                         "incumbent": t["id"] == self.ctx.incumbent_id})
        return json.dumps(rows, default=str)[:MAX_CHARS * 2]

    def t_trial_numbers(self, trial_id) -> str:
        self._trial(trial_id)
        out = []
        for m in self.ctx.measurements(int(trial_id)):
            d = m["data"]
            out.append({"role": m["role"], **{k: v for k, v in d.items()
                                               if k not in ("diagnoses", "sweep", "evals") and not isinstance(v, list)},
                        "evals": {k: (sum(v) / len(v) if isinstance(v, list) and v else v)
                                  for k, v in (d.get("evals") or {}).items()}})
        return json.dumps(out, default=str)[:MAX_CHARS]

    # ---- logs ----------------------------------------------------------------------------
    def _log_text(self, trial_id) -> str:
        """The trial's last server log: the nodes record its path in the ledger's events (the sim
        writes logs/sim-launch-N.log, a local server server-PORT.log; issue 13 item 14)."""
        t = self._trial(trial_id)
        text = ""
        path = _logged_path(self.run_dir, t["id"]) if self.run_dir is not None else None
        if path is not None:
            text = logtools.read(path)
        return text or t.get("log_excerpt") or ""

    def t_read_log(self, trial_id, start_line=1, max_lines=200) -> str:
        lines = self._log_text(trial_id).splitlines()
        lo = max(int(start_line), 1) - 1
        if lo == 0 and len(lines) > int(max_lines):  # default to the end: failures are at the tail
            lo = len(lines) - int(max_lines)
        chunk = lines[lo:lo + min(int(max_lines), 400)]
        body = "\n".join(f"{lo + i + 1}: {ln}" for i, ln in enumerate(chunk))
        return untrusted(f"server log, trial {trial_id}, {len(lines)} lines", body, self.secrets)

    def t_grep_log(self, trial_id, pattern, context=2) -> str:
        try:
            hits = logtools.grep(self._log_text(trial_id), pattern, context=min(int(context), 10))
        except GrepBounded as e:
            raise ToolError(str(e)) from None
        return untrusted(f"grep {pattern!r} in server log, trial {trial_id}", "\n".join(hits[:300]) or "(no match)",
                         self.secrets)

    # ---- source tree (confined) ------------------------------------------------------------
    def _tree(self, framework: str) -> Path:
        if framework not in frameworks.NAMES:
            raise ToolError(f"unknown framework {framework!r}; allowed: {', '.join(frameworks.NAMES)}")
        try:
            return Path(self.ctx.source_tree(framework)).resolve()
        except Exception as e:  # noqa: BLE001  a sandbox without source trees
            raise ToolError(f"no source tree for {framework}: {e}") from None

    def _inside(self, framework: str, rel: str) -> tuple[Path, Path]:
        root = self._tree(framework)
        rel = (rel or "").strip()
        pp = PurePosixPath(rel)
        if rel.startswith(("/", "\\")) or pp.is_absolute() or re.match(r"^[A-Za-z]:", rel) or ".." in pp.parts:
            raise ToolError(f"path {rel!r} refused: paths are relative to the {framework} source tree, without '..'")
        real = (root / rel).resolve()
        if real != root and root not in real.parents:
            raise ToolError(f"path {rel!r} refused: it resolves outside the {framework} source tree")
        if ".git" in real.relative_to(root).parts:
            raise ToolError(f"path {rel!r} refused: git's own data is not source")
        return root, real

    def _files(self, root: Path, base: Path) -> list[Path]:
        out = []
        for p in patchtool.source_files(base) if base.is_dir() else [base]:
            r = p.resolve()
            if p.is_file() and ".git" not in p.relative_to(root).parts and (r == root or root in r.parents):
                out.append(p)
        return out

    def t_list_source(self, framework, path="") -> str:
        root, base = self._inside(framework, path)
        if not base.exists():
            raise ToolError(f"{path!r} does not exist in the {framework} tree")
        return "\n".join(p.relative_to(root).as_posix() for p in self._files(root, base)[:500])

    def t_read_source(self, framework, path, start_line=1, max_lines=300) -> str:
        root, p = self._inside(framework, path)
        if not p.is_file():
            raise ToolError(f"{path!r} is not a file in the {framework} tree")
        lines = p.read_text(errors="replace").splitlines()
        lo = max(int(start_line), 1) - 1
        chunk = lines[lo:lo + min(int(max_lines), 600)]
        body = "\n".join(f"{lo + i + 1}: {ln}" for i, ln in enumerate(chunk))
        return untrusted(f"{framework}:{p.relative_to(root).as_posix()} ({len(lines)} lines; "
                         f"'N: ' prefixes are line numbers, not file text)", body, self.secrets, redact=False)

    def t_grep_source(self, framework, pattern, path="") -> str:
        root, base = self._inside(framework, path)
        try:  # bounded in time (one deadline for the whole tree) and size (big files skipped)
            rx, dl = compile_bounded(pattern), Deadline()
            hits = []
            for p in self._files(root, base):
                if p.stat().st_size > MAX_GREP_FILE or len(hits) >= 300:
                    continue
                for i, ln in enumerate(p.read_text(errors="replace").splitlines()):
                    if dl.search(rx, ln):
                        hits.append(f"{p.relative_to(root).as_posix()}:{i + 1}: {ln[:400]}")
        except GrepBounded as e:
            raise ToolError(str(e)) from None
        return untrusted(f"grep {pattern!r} in {framework} source", "\n".join(hits[:300]) or "(no match)", self.secrets,
                         redact=False)

    # ---- target --------------------------------------------------------------------------
    def t_model_card(self) -> str:
        c = self.ctx.card
        return c.model_dump_json() if hasattr(c, "model_dump_json") else json.dumps(vars(c), default=str)

    def t_hardware_profile(self) -> str:
        h = self.ctx.hw
        return h.model_dump_json() if hasattr(h, "model_dump_json") else json.dumps(vars(h), default=str)

    def t_flag_schema(self, framework, filter="") -> str:
        try:
            fw = self.ctx.framework(framework)
        except Exception as e:  # noqa: BLE001
            raise ToolError(str(e)) from None
        rows = [{"name": s.name, "type": s.type, "choices": s.choices, "default": s.default,
                 "search": s.search, "help": s.help[:160]} for s in fw.flags.values()
                if not filter or filter.lower() in s.name.lower() or filter.lower() in s.help.lower()]
        return json.dumps(rows, default=str)[:MAX_CHARS * 2]

    # ---- proposals (validated descriptions; nothing is launched or applied here) -------------
    def _phase(self) -> str:
        if self.focus is not None:
            return self._trial(self.focus)["phase"]
        return self.ctx.phase

    def _base(self) -> Candidate:
        if self.focus is not None:
            return Candidate.model_validate(self._trial(self.focus)["candidate"])
        inc = self.ctx.incumbent_candidate()
        if inc is None:
            raise ToolError("there is no incumbent yet")
        return inc

    def t_propose_config(self, rationale, framework=None, weights=None, tp=None, dp=None, ep=None,
                         flags=None, env=None) -> Proposal:
        base = self._base()
        par = base.parallel
        par = Parallel(tp=tp if tp is not None else par.tp, dp=dp if dp is not None else par.dp,
                       ep=ep if ep is not None else par.ep)
        if not isinstance(flags or {}, dict) or not isinstance(env or {}, dict):
            raise ToolError("flags and env must be JSON objects")
        fw_name = framework or base.framework
        if fw_name in frameworks.NAMES + frameworks.EXTRA:  # numbers a person would type (agent/planners/grid.py); base flags stay
            flags = grid.snap_flags(flags or {}, self.ctx.framework(fw_name).flags)
        merged = {k: v for k, v in {**base.flags, **(flags or {})}.items() if v is not None}
        try:
            c = Candidate(framework=framework or base.framework, weights=weights or base.weights, parallel=par,
                          flags=merged, env={**base.env, **{k: str(v) for k, v in (env or {}).items()}},
                          patches=base.patches, moe_configs=base.moe_configs)
            self.ctx.framework(c.framework).validate(c)
        except Exception as e:  # noqa: BLE001  BadInput / pydantic: tell the model what is allowed
            raise ToolError(f"invalid configuration: {e}") from None
        if c.key() in self.ctx.tried_keys():
            raise ToolError("that exact configuration was tried already; propose something else")
        return Proposal(kind="config", source="llm", phase=self._phase(), description="LLM: " + _short(rationale),
                        rationale=rationale, candidate=c, fixes_trial=self.focus)

    def t_propose_patch(self, framework, diff, title, why) -> Proposal:
        root = self._tree(framework)
        if not diff.endswith("\n"):
            diff += "\n"
        try:
            files = patchtool.check_diff(diff, root)
        except patchtool.PatchRefused as e:
            raise ToolError(f"patch refused: {e}") from None
        r = subprocess.run(["git", "apply", "--check", "--whitespace=nowarn"], cwd=root, input=diff, text=True,
                           capture_output=True)
        if r.returncode != 0:  # --check writes nothing; it only says whether the diff applies
            raise ToolError(f"the diff does not apply to the {framework} tree: {r.stderr.strip()[:800]}")
        key = "llm:" + hashlib.sha256(diff.encode()).hexdigest()[:12]
        if key in self.ctx.rejected:
            raise ToolError(f"this exact patch was turned down before: {self.ctx.rejected[key] or 'no reason'}")
        base = self._base()
        if base.framework != framework:
            base = Candidate(framework=framework, weights=base.weights, parallel=base.parallel)
        return Proposal(kind="patch", source="llm", phase=self._phase(), fixes_trial=self.focus, rationale=why,
                        description=f"LLM patch {framework}: {_short(title)}", candidate=base,
                        patch=PatchProposal(fix="llm", key=key, framework=framework, diff=diff, files=files,
                                            title=_short(title), why=why))

    def t_propose_moe_tune(self, rationale) -> Proposal:
        inc = self.ctx.incumbent_candidate()
        if inc is None:
            raise ToolError("there is no incumbent to tune")
        return Proposal(kind="moe_tune", source="llm", phase="moe", description="LLM: tune MoE kernels", rationale=rationale,
                        candidate=inc)

    def t_stop(self, reason) -> Proposal:
        return Proposal(kind="stop", source="llm", phase=self._phase(), description="LLM: " + _short(reason), rationale=reason)


def _logged_path(run_dir: Path, tid: int) -> Path | None:
    """The newest log recorded for trial `tid`, if it is a file inside the run dir."""
    from agent.ledger import LEDGER, Ledger
    if not (Path(run_dir) / LEDGER).is_file():
        return None
    led = Ledger(run_dir)
    try:
        paths = [e["message"].split(": ", 1)[1] for e in led.events()
                 if e["kind"] == "log" and e["message"].startswith(f"trial {tid}: ")]
    finally:
        led.close()
    root = Path(run_dir).resolve()
    for p in reversed(paths):
        real = Path(p).resolve()
        if root in real.parents and real.is_file():
            return real
    return None


def _short(s: str, n: int = 160) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[:n - 1] + "…"
