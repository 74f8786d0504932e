"""The transformers serve adapter: argv, click-style flag errors, config knobs, log signatures."""
from __future__ import annotations

import pytest

from agent.errors import BadInput
from tools.candidate import Candidate, Parallel
from tools.frameworks import NAMES, FlagError, get
from tools.frameworks.transformers_serve import CONFIG_KNOBS


def cand(**flags) -> Candidate:
    return Candidate(framework="transformers", flags=flags)


def test_registered_outside_the_story_frameworks():
    assert get("transformers").name == "transformers"
    assert "transformers" not in NAMES  # the sim's planners keep their three
    with pytest.raises(BadInput, match="transformers"):
        get("tgi")


def test_argv_positional_model_switch_pairs_and_no_config_knob():
    fw = get("transformers")
    c = cand(**{"--continuous-batching": True, "--compile": False, "--cb-max-batch-tokens": 512,
                "--experts-implementation": "batched_mm", "--attn-implementation": "eager"})
    argv = fw.argv(c, model="/m/glm", port=8123, python="py")
    assert argv[:7] == ["py", "-m", "transformers.cli.transformers", "serve", "/m/glm", "--host", "127.0.0.1"]
    assert argv[7:9] == ["--port", "8123"]
    assert "--continuous-batching" in argv and "--no-compile" in argv
    assert argv[argv.index("--cb-max-batch-tokens") + 1] == "512"
    assert "--experts-implementation" not in argv and "batched_mm" not in argv
    assert argv[argv.index("--log-level") + 1] == "info"
    assert fw.config_overrides(c) == {"experts_implementation": "batched_mm"}
    assert fw.config_overrides(cand()) == {}
    assert set(CONFIG_KNOBS) <= set(fw.flags)


def test_parallelism_is_not_expressible():
    fw = get("transformers")
    assert fw.parallel_args(Candidate(framework="transformers", parallel=Parallel(tp=8))) == []


@pytest.mark.parametrize("args,msg", [
    (["--foo"], "No such option: --foo"),
    (["--cb-block-size", "x"], "Invalid value for '--cb-block-size': 'x' is not a valid integer."),
    (["--cb-max-memory-percent", "lots"], "Invalid value for '--cb-max-memory-percent': 'lots' is not a valid float."),
    (["--reasoning", "maybe"], "Invalid value for '--reasoning': 'maybe' is not one of 'on', 'off', 'auto'."),
    (["--dtype"], "Option '--dtype' requires an argument."),
])
def test_flag_errors_read_like_click(args, msg):
    with pytest.raises(FlagError) as e:
        get("transformers").parse_flags(args)
    assert str(e.value) == msg


def test_validate_rejects_unknown_experts_implementation_and_launcher_flags():
    fw = get("transformers")
    with pytest.raises(BadInput, match="experts-implementation"):
        fw.validate(cand(**{"--experts-implementation": "fastest"}))
    with pytest.raises(BadInput, match="launcher"):
        fw.validate(cand(**{"--port": 9}))
    fw.validate(cand(**{"--experts-implementation": "eager", "--continuous-batching": True}))


def test_search_space_names_the_real_knobs_batching_first():
    fw = get("transformers")
    knobs = [n for n, s in fw.flags.items() if s.search]
    assert knobs[0] == "--continuous-batching"
    assert {"--experts-implementation", "--attn-implementation", "--dtype", "--cb-max-batch-tokens"} <= set(knobs)
    assert set(fw.flags["--experts-implementation"].search["choices"]) <= set(fw.flags["--experts-implementation"].choices)


LOG = """\
[transformers] Loading /tmp/glm52-mini@main
INFO:     Application startup complete.
ValueError: Unsupported attention implementation: 'fa9'. Must be one of {'eager', 'sdpa'}
ValueError: Specified `experts_implementation="fastest"` is not supported. The only possible arguments are
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
transformers.cli.serving.utils.CBWorkerDeadError: CB worker died during request abc: boom
Error: No such option: --bogus
"""


def test_diagnose_reads_the_server_wording():
    d = get("transformers").diagnose(LOG)
    kinds = [(x.kind, x.details.get("flag")) for x in d]
    assert ("bad_flag", "--attn-implementation") in kinds
    assert ("bad_flag", "--experts-implementation") in kinds
    assert ("bad_flag", "--bogus") in kinds
    assert any(x.kind == "oom" and x.details.get("tried") == "2.00 GiB" for x in d)
    assert any(x.kind == "engine_dead" for x in d)
    assert get("transformers").ready_line in LOG
