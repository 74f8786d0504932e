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
