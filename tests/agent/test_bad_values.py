"""Issue 13 items 8, 11, 12, 13: NaN, infinity, negative and absurd numbers, unknown nested keys,
YAML bombs and bad paths exit 2 with one line naming the value (and what is allowed); never a
traceback, never exit 0 with every trial failed."""
import pytest

OPT = ["optimize", "--model", "glm-5.2", "--hw", "mi355x", "--budget", "1"]
EST = ["estimate", "--model", "glm-5.2", "--hw", "mi355x", "--framework", "sglang"]


@pytest.mark.parametrize("args,words", [
    (OPT + ["--time-budget", "nan"], "'nan'"),
    (OPT + ["--time-budget", "inf"], "'inf'"),
    (OPT + ["--time-budget", "1e30"], "at most a year"),
    (OPT + ["--seed", "-1"], "seed: Input should be greater than or equal to 0 (got -1)"),
    (OPT + ["--budget", "10000000"], "<= 100000, got 10000000"),
    (OPT + ["--python", "/nonexistent/python"], "--python '/nonexistent/python' is not an executable file"),
    (EST + ["--rates", "nan"], "'nan'"), (EST + ["--rates", "inf"], "inf"), (EST + ["--rates", "1e12"], "got '1e12'"),
    (EST + ["--concurrency", "100000000"], "within [1, 100000], got 100000000"),
    (EST + ["--seed", "-1"], "--seed must be within [0, 4294967295], got -1"),
    (EST + ["--ttft-slo", "0"], "--ttft-slo must be > 0 and <= 3600 s, got 0.0"),
    (EST + ["--ttft-slo", "-1"], "got -1.0"), (EST + ["--ttft-slo", "nan"], "got nan"),
    (EST + ["--rates", "1", "--concurrency", "4"], "not both"),
    (EST + ["--input-len", "999999999999"], "--input-len: Input should be less than or equal to 10000000"),
    (EST + ["--", "--mem-fraction-static", "nan"], "--mem-fraction-static: nan is not a finite number"),
    (EST + ["--", "--mem-fraction-static", "7"], "7.0 is outside (0, 1]"),
    (EST + ["--", "--max-running-requests", "-4"], "-4 is negative"),
])
def test_bad_numbers_exit_2_naming_the_value(agent, tmp_path, args, words):
    r = agent(*args, *(["--run-dir", str(tmp_path / "r")] if args[0] == "optimize" else []))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert words in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


BOMB = "a: &a [x, x]\n" + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9))


@pytest.mark.parametrize("text,words", [
    ("measure: {duration_s: .inf}\n", "measure.duration_s: Input should be a finite number (got inf)"),
    ("measure: {duration_s: .nan}\n", "finite number (got nan)"),
    ("measure: {workload: {input_len: 10, bogus: 1}}\n", "measure.workload.bogus: Extra inputs are not permitted"),
    ("gate: {noise_floor: 5}\n", "gate.noise_floor: Input should be less than or equal to 1 (got 5)"),
    ("slo: {ttft_p95_s: 1, tpot: 2}\n", "slo.tpot: Extra inputs are not permitted"),
    ("budget: {trials: -3}\n", "budget.trials: Input should be greater than or equal to 1 (got -3)"),
    (BOMB, "YAML anchors, aliases and tags are not allowed"),
    ("base_flags: {--tp-size: 99}\n", "base_flags --tp-size"),
    ("base_flags: {--no-such-flag: 1}\n", "base_flags --no-such-flag: no framework has this flag"),
    ("base_flags: {--mem-fraction-static: 7}\n", "outside (0, 1]"),
])
def test_bad_config_values_exit_2(agent, tmp_path, text, words):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    r = agent(*OPT[:-2], "--config", str(f), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("opt,value,words", [
    ("--run-dir", "/etc/passwd", "exists and is not a directory"),
    ("--run-dir", "/proc/x", "is under /proc"),
    ("--config", "/bin/ls", "is not UTF-8 text"),
    ("--config", "/nonexistent.yaml", "no such file"),
])
def test_bad_paths_exit_2(agent, opt, value, words):
    r = agent(*OPT, opt, value)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_refused_local_start_leaves_no_run_dir(agent, tmp_path):
    (tmp_path / "m").mkdir()
    r = agent("optimize", "--model", "smollm2-135m", "--hw", "cpu", "--backend", "local", "--model-path",
              str(tmp_path / "m"), "--python", "/bin/true", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


def test_with_json_a_bad_value_is_also_a_json_error_on_stdout(agent):
    # A script that asked for --json reads stdout: the error arrives there as JSON too (and on
    # stderr as for people), with exit 2; nothing else is printed on stdout.
    import json
    r = agent(*EST, "--json", "--seed", "-1")
    assert r.returncode == 2 and "--seed must be within" in r.stderr, r.stderr
    out = json.loads(r.stdout)
    assert out == {"error": r.stderr.strip().removeprefix("error: "), "exit_code": 2}
    # a --json after `--` is a framework flag, not the CLI's: no JSON then
    r = agent(*EST, "--seed", "-1", "--", "--json")
    assert r.returncode == 2 and r.stdout == "", r.stdout
