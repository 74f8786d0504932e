"""transformers' own OpenAI-compatible server (`transformers serve`), as in transformers 5.17.

Read from transformers 5.17.0's source (transformers/cli/serve.py, cli/serving/*.py,
modeling_utils.py, integrations/moe.py) and confirmed on the H200 (tests/gpu/results/serve_help.txt):
- Entry point: `python -m transformers.cli.transformers serve [OPTIONS] [FORCE_MODEL]`. The model is
  a positional argument (no --model flag); with it the server preloads the model before uvicorn
  starts, pins every request to that name (`model` must equal it exactly, else HTTP 400) and never
  unloads it. The CLI is typer/click, not argparse: switches come in pairs (`--compile/--no-compile`)
  and errors read `No such option: --foo`, `Invalid value for '--port': 'x' is not a valid integer.`
- Ready: uvicorn's `Application startup complete.` (uvicorn runs with log_level="info" whatever
  --log-level says); GET /health answers 200 (503 `cb_worker_dead` once the continuous-batching
  worker died).
- /v1/completions rejects fields outside OpenAI's schema with HTTP 422 (so no `ignore_eos`).
- The MoE experts implementation has no CLI flag: `from_pretrained` reads `experts_implementation`
  from the checkpoint's config.json (eager, grouped_mm, batched_mm, deepgemm, sonicmoe; None means
  grouped_mm when the model supports it, else eager). This adapter therefore carries it as a
  *config knob*: `--experts-implementation` lives in the flag schema so planners search it like any
  flag, but `argv()` never passes it; `config_overrides()` names the config.json keys a sandbox must
  write into a per-launch copy of the model directory (sandboxes/transformers_serve.py does).
"""
from __future__ import annotations

import re

from tools.candidate import Candidate
from tools.frameworks.base import F, FlagError, Framework
from tools.frameworks.signatures import CATALOGUE, S, diagnose as catalogue_diagnose
from tools.protocols import Diagnosis

ATTN_IMPLEMENTATIONS = ["eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"]
EXPERTS_IMPLEMENTATIONS = ["eager", "grouped_mm", "batched_mm", "deepgemm", "sonicmoe"]
QUANTIZATIONS = ["bnb-4bit", "bnb-8bit"]
DTYPES = ["auto", "bfloat16", "float16", "float32"]
# Flags that are not CLI options but keys of the served model's config.json.
CONFIG_KNOBS = {"--experts-implementation": "experts_implementation"}


class TransformersServe(Framework):
    name = "transformers"
    ready_line = "Application startup complete."
    health_path = "/health"
    moe_config_env = ""  # no tuned-kernel config folder: the experts implementation is the MoE knob
    module = "transformers.cli.transformers"
    prog = "transformers serve"
    model_flag = ""  # positional FORCE_MODEL
    served_name_flag = None  # requests must name the model exactly as it was given
    flag_table = [
        F("--host", "str", default="localhost"), F("--port", "int", default=8000),
        F("--device", "str", default="auto", help="'auto', 'cuda:0', 'cpu'"),
        # Screening goes in table order: batching first, as it changes what every later knob is measured under.
        F("--continuous-batching", "bool", negatable=True, default=False,
          help="continuous batching with paged attention (else one generate() at a time)",
          search={"choices": [True]}),
        # The MoE kernel (config.json knob, see the module docstring). grouped_mm is what None resolves to.
        F("--experts-implementation", "str", choices=EXPERTS_IMPLEMENTATIONS, default="grouped_mm",
          help="MoE experts kernel, written to config.json `experts_implementation` (not a CLI flag)",
          search={"choices": ["batched_mm", "eager"]}),
        F("--attn-implementation", "str", default=None,
          help="eager, sdpa, flash_attention_2, flash_attention_3, flex_attention or a hub kernel",
          search={"choices": ["eager"]}),
        F("--dtype", "str", default="auto", help="'auto' derives from the weights; a torch dtype name",
          search={"choices": ["float16", "float32"]}),
        F("--compile", "bool", negatable=True, default=False, help="torch.compile with a static cache"),
        F("--quantization", "str", help="bnb-4bit | bnb-8bit (needs bitsandbytes)"),
        F("--reasoning", "str", choices=["on", "off", "auto"], default="auto"),
        F("--chat-template-kwargs", "str"),
        F("--trust-remote-code", "bool", negatable=True, default=False),
        F("--model-timeout", "int", default=300),
        F("--cb-block-size", "int", help="KV cache block size (tokens) for continuous batching"),
        F("--cb-num-blocks", "int", help="number of KV cache blocks for continuous batching"),
        F("--cb-max-batch-tokens", "int", help="max tokens per continuous-batching step",
          search={"low": 256, "high": 8192, "log": True}),
        F("--cb-max-memory-percent", "float", help="GPU memory fraction for the KV cache (0-1)"),
        F("--cb-use-cuda-graph", "bool", negatable=True, help="CUDA graphs for continuous batching"),
        F("--enable-cors", "bool", negatable=True, default=False),
        F("--log-level", "str", default="warning"),
        F("--default-seed", "int"),
    ]

    # -- argv ----------------------------------------------------------------------------
    def parallel_args(self, c: Candidate) -> list[str]:
        return []  # one process, one device: `transformers serve` has no parallelism flags

    def config_overrides(self, c: Candidate) -> dict[str, object]:
        """config.json keys the candidate sets (knobs the CLI does not have)."""
        return {key: c.flags[f] for f, key in CONFIG_KNOBS.items() if c.flags.get(f) is not None}

    def argv(self, c: Candidate, *, model: str, port: int, host: str = "127.0.0.1",
             served_name: str | None = None, python: str = "python3") -> list[str]:
        cli = {k: v for k, v in c.flags.items() if k not in CONFIG_KNOBS}
        # info, so the log carries the model loading and request lines diagnose() reads
        if "--log-level" not in cli:
            cli["--log-level"] = "info"
        return ([python, "-m", self.module, "serve", model, "--host", host, "--port", str(port)]
                + self.flag_args(cli))

    def flag_args(self, flags: dict[str, object]) -> list[str]:
        """Click switches: True -> `--x`, False -> `--no-x` (explicit, unlike argparse store_true)."""
        out: list[str] = []
        for k, v in flags.items():
            spec, _ = self.lookup(k)
            if v is None:
                continue
            if v is False and spec is not None and spec.negatable:
                out.append("--no-" + k[2:])
            elif v is True:
                out.append(k)
            elif v is not False:
                out += [k, str(v)]
        return out

    # -- parsing: click's wording, not argparse's ------------------------------------------
    def parse_flags(self, args: list[str]) -> dict[str, object]:
        try:
            return super().parse_flags(args)
        except FlagError as e:
            raise _click_error(e) from None

    # -- logs ----------------------------------------------------------------------------
    def diagnose(self, log_text: str) -> list[Diagnosis]:
        return catalogue_diagnose(log_text, SIGNATURES + CATALOGUE)


def _click_error(e: FlagError) -> FlagError:
    msg = str(e)
    if msg.startswith("unrecognized arguments:"):
        first = next((a for a in (e.value or []) if str(a).startswith("-")), None)
        text = f"No such option: {first}" if first else f"Got unexpected extra argument ({' '.join(e.value)})"
    elif "expected one argument" in msg:
        text = f"Option '{e.flag}' requires an argument."
    elif "invalid int value" in msg:
        text = f"Invalid value for '{e.flag}': {e.value!r} is not a valid integer."
    elif "invalid float value" in msg:
        text = f"Invalid value for '{e.flag}': {e.value!r} is not a valid float."
    elif "invalid choice" in msg:
        allowed = ", ".join(repr(a) for a in (e.allowed or []))
        text = f"Invalid value for '{e.flag}': {e.value!r} is not one of {allowed}."
    elif "ignored explicit argument" in msg:
        text = f"Option '{e.flag}' does not take a value."
    else:
        text = msg
    return FlagError(text, flag=e.flag, value=e.value, allowed=e.allowed)


def _flag(name: str):
    def details(m: re.Match, line: str, ctx: list[str]) -> dict:
        d = {k: v for k, v in m.groupdict().items() if v}
        d.setdefault("flag", name)
        return d
    return details


# Signatures of transformers serve (5.17 wording), tried before the shared catalogue.
SIGNATURES = [
    S("bad_flag", r"No such option: (?P<flag>--[\w-]+)", "the CLI rejected an unknown option", _flag("")),
    S("bad_flag", r"Invalid value for '(?P<flag>--[\w-]+)'", "the CLI rejected a flag value", _flag("")),
    S("bad_flag", r"Unsupported attention implementation: '(?P<value>[^']*)'",
      "unknown attention implementation", _flag("--attn-implementation")),
    S("bad_flag", r"does not support (?:Flash Attention \d|an attention implementation through)",
      "the model does not support this attention implementation", _flag("--attn-implementation")),
    S("bad_flag", r"FlashAttention\d? .*(?:doesn't seem to be installed|requires)",
      "flash-attention is not available here", _flag("--attn-implementation")),
    S("bad_flag", r"Unsupported dtype: '(?P<value>[^']*)'", "unknown dtype", _flag("--dtype")),
    S("bad_flag", r"Specified `experts_implementation=\"(?P<value>[^\"]*)\"` is not supported",
      "unknown experts implementation", _flag("--experts-implementation")),
    S("bad_flag", r"Unsupported quantization method: '(?P<value>[^']*)'", "unknown quantization",
      _flag("--quantization")),
    # 5.17: "Invalid group type: deepseek_sparse_attention" (5.19: "Invalid layer type: indexed_attention"):
    # the paged cache of continuous batching has no allocator for DSA layers (GlmMoeDsa).
    S("bad_flag", r"Invalid (?:group|layer) type: (?P<layer_type>\w+)",
      "continuous batching's paged cache does not support this model's attention layers",
      _flag("--continuous-batching")),
    S("engine_dead", r"CB worker (?:is dead|died)|cb_worker_dead", "the continuous-batching worker died"),
    S("engine_dead", r"Missing dependencies for serving", "serving extras (fastapi, uvicorn, ...) are missing"),
]
