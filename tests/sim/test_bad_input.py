"""Issue 2, acceptance 3: bad input -> exit code 2 and a message naming the bad value and what is allowed."""
import pytest

from agent.cli import main

SPEC = ["--", "--tp-size", "4", "--dp-size", "2"]


def run(capsys, *args):
    with pytest.raises(SystemExit) as e:
        main(["estimate", *args])
    return e.value.code, capsys.readouterr().err


@pytest.mark.parametrize("args,bad,allowed", [
    (["--model", "gpt-9", *SPEC], "gpt-9", "glm-5.2"),
    (["--hw", "tpu9", *SPEC], "tpu9", "mi355x"),
    (["--framework", "trtllm", *SPEC], "trtllm", "sglang"),
    (["--weights", "int3", *SPEC], "int3", "mxfp4"),
    (["--", "--tp-size", "4", "--no-such-flag", "1"], "--no-such-flag", "unrecognized arguments"),
    (["--", "--kv-cache-dtype", "fp9"], "fp9", "fp8_e4m3"),
    (["--", "--tp-size", "four"], "four", "invalid int value"),
    (["--", "--tp-size", "16"], "16", "8"),
    (["--rates", "1,x", *SPEC], "1,x", "comma-separated"),
    (["--prefix-hit", "2", *SPEC], "--prefix-hit", "less than or equal to 1"),  # the option, not the field
    (["--output-len", "0", *SPEC], "--output-len", "greater than or equal to 1"),
    (["--framework", "vllm", "--", "--speculative-config", "{bad"], "{bad", "--speculative-config"),
    # a workload beyond the context: every request would be refused (the story's 20k/1k default
    # on a small model), or beyond the --max-model-len given
    (["--model", "smollm2-135m", "--hw", "cpu", "--framework", "vllm", "--weights", "bf16"], "21000", "context of 8192"),
    (["--model", "smollm2-135m", "--hw", "cpu", "--framework", "vllm", "--weights", "bf16", "--input-len", "2000",
      "--output-len", "64", "--", "--max-model-len", "1024"], "2064", "--max-model-len 1024"),
])
def test_bad_input_exits_2_naming_value_and_allowed(capsys, args, bad, allowed):
    code, err = run(capsys, *args)
    assert code == 2, err
    assert bad in err and allowed in err
    assert "Traceback" not in err


def test_help_explains(capsys):
    with pytest.raises(SystemExit) as e:
        main(["estimate", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "--moe-tuned" in out and "--ttft-slo" in out


@pytest.mark.parametrize("args,hint", [
    # GLM-5.2 in bf16 on B200s: 1404 GiB per GPU at tp=1, 176 at tp=8 on a 168 GiB GPU
    (["--hw", "b200", "--framework", "sglang"], "--weights fp8 with `-- --tp-size 8` starts"),
    # FP8 at tp=2 on MI355X: 357 GiB per GPU of 268; at 8 it fits (vLLM's own flag name)
    (["--hw", "mi355x", "--framework", "vllm", "--weights", "fp8", "--", "--tensor-parallel-size", "2"],
     "`-- --tensor-parallel-size 8`"),
])
def test_a_configuration_that_does_not_start_says_why_and_what_would(capsys, args, hint):
    # The CLI prints errors on one line (text quoted from a log is shown inert), so the log's
    # evidence must not arrive as an escaped newline in the middle of it.
    code, err = run(capsys, *args)
    assert code == 2, err
    assert err.count("\n") == 1 and "\\n" not in err, err
    assert "out of memory" in err and hint in err and "Traceback" not in err
