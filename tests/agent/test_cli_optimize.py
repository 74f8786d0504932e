"""Bad input to `agent optimize` and the run commands: one clear line, exit code 2."""

import pytest



@pytest.mark.parametrize("args,words", [
    (["optimize", "--model", "nope-7b", "--hw", "mi355x"], "unknown model 'nope-7b'"),
    (["optimize", "--model", "glm-5.2", "--hw", "tpu9"], "unknown hardware 'tpu9'"),
    (["optimize", "--model", "glm-5.2", "--hw", "mi355x", "--backend", "k8s"], "unknown backend 'k8s'; allowed: docker, local, sim"),
    (["optimize", "--model", "glm-5.2", "--hw", "mi355x", "--objective", "speed"], "unknown objective 'speed'"),
    (["optimize", "--model", "glm-5.2", "--hw", "mi355x", "--approve", "maybe"], "unknown approval policy 'maybe'"),
    (["optimize", "--model", "glm-5.2", "--hw", "mi355x", "--budget", "0"], "--budget must be >= 1"),
    (["optimize", "--model", "glm-5.2", "--hw", "mi355x", "--budget", "ten"], "--budget must be a whole number"),
    (["optimize", "--model", "glm-5.2", "--hw", "mi355x", "--time-budget", "soon"], "--time-budget must look like"),
    (["optimize", "--model", "smollm2-135m", "--hw", "cpu", "--backend", "local"], "needs --model-path"),
])
def test_bad_optimize_input_exits_2(agent, tmp_path, args, words):
    r = agent(*args, "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert words in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r" / "ledger.sqlite").exists()


@pytest.mark.parametrize("text,words", [
    (None, "no such file"),
    ("foo: 1\n", "unknown keys ['foo']; allowed: base_flags, budget, gate"),
    ("measure: {duration_s: -1}\n", "measure.duration_s: Input should be greater than 0"),
    ("measure: [\n", "is not YAML/JSON"),
    ("measure: {eval_tasks: [mmlu]}\n", "unknown eval task 'mmlu'; allowed: gpqa-diamond, gsm8k, longctx, qa, tau2"),
])
def test_bad_config_file_exits_2(agent, tmp_path, text, words):
    f = tmp_path / "run.yaml"
    if text is not None:
        f.write_text(text)
    r = agent("optimize", "--model", "glm-5.2", "--hw", "mi355x", "--config", str(f), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("cmd", [["resume"], ["report"], ["approvals"], ["approve", "_", "p01"],
                                 ["reject", "_", "p01", "--reason", "x"]])
def test_not_a_run_dir_exits_2(agent, tmp_path, cmd):
    args = [c if c != "_" else str(tmp_path) for c in cmd]
    if cmd[0] in ("resume", "report", "approvals"):
        args.append(str(tmp_path))
    r = agent(*args)
    assert r.returncode == 2 and "is not a run directory" in r.stderr, (r.stdout, r.stderr)


def test_the_commands_are_registered_once_however_often_main_runs(agent):
    """The tests (and anything embedding the CLI) call main() many times in one process: a second
    registration would add every command again, and each call would then build them all."""
    from agent.cli import app
    agent("version")
    n = (len(app.registered_commands), len(app.registered_groups))
    for _ in range(3):
        agent("optimize", "--model", "glm-5.2", "--hw", "mi355x", "--budget", "0")
    assert (len(app.registered_commands), len(app.registered_groups)) == n
