"""`agent playbook show|validate|diff` and `agent replay` input errors, through the real CLI entry."""
import json

import pytest
import yaml

from agent.cli import main
from tests.playbooks.samples import valid


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        main(list(argv))
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def sample(tmp_path):
    p = tmp_path / "pb.yaml"
    p.write_text(yaml.safe_dump(valid(), sort_keys=False))
    return p


def test_validate_ok_and_refusals_exit_2_naming_the_field(capsys, sample, tmp_path):
    code, out, _ = run(capsys, "playbook", "validate", str(sample), "--json")
    assert code == 0 and json.loads(out) == {"ok": True, "name": "glm-5.2-mi355x", "steps": 10}
    d = valid()
    d["steps"][4]["patches"][0]["params"]["file"] = "../../../etc/shadow"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    code, out, err = run(capsys, "playbook", "validate", str(bad))
    assert code == 2 and "steps[4].patches[0].params.file" in err and "'..'" in err and "Traceback" not in err
    d = valid()
    d["steps"][2]["kind"] = "yolo"
    bad.write_text(yaml.safe_dump(d))
    code, _, err = run(capsys, "playbook", "validate", str(bad))
    assert code == 2 and "steps[2].kind: unknown step kind 'yolo'" in err
    code, _, err = run(capsys, "playbook", "validate", str(tmp_path / "missing.yaml"))
    assert code == 2 and "no playbook file" in err


def test_show_adapts_to_a_target(capsys, sample):
    code, out, _ = run(capsys, "playbook", "show", str(sample), "--model", "deepseek-v3", "--hw", "mi355x", "--json")
    assert code == 0
    rows = {r["id"]: r for r in json.loads(out)["steps"]}
    assert rows["s04"]["adapted"]["patches"] == [{"fix": "mtp_prefix_alias", "params": {"layer": 61}}]
    assert rows["s08"]["adapted"]["parallel"] == {"tp": 4, "dp": 2, "ep": False}
    code, out, _ = run(capsys, "playbook", "show", str(sample), "--model", "qwen3-235b-a22b", "--hw", "b200")
    assert code == 0
    assert "s04" in out and "SKIP: qwen3-235b-a22b has no MTP" in out
    assert "SKIP: b200 is nvidia; the step is for amd only (ROCm)" in out
    code, _, err = run(capsys, "playbook", "show", str(sample), "--model", "deepseek-v3")
    assert code == 2 and "both --model and --hw" in err


def test_diff_shows_added_and_removed_steps(capsys, sample, tmp_path):
    d = valid()
    d["steps"][5]["flags"] = {"--kv-cache-dtype": "auto"}
    del d["steps"][6]
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump(d))
    code, out, _ = run(capsys, "playbook", "diff", str(sample), str(other), "--json")
    rows = json.loads(out)
    assert code == 0
    assert {r["a"] for r in rows if r["op"] == "removed"} == {"s06", "s07"}
    assert [r["change"] for r in rows if r["op"] == "added"] == ['--kv-cache-dtype "auto"']
    assert sum(r["op"] == "same" for r in rows) == 8


def test_replay_bad_input_exits_2_before_anything_runs(capsys, sample, tmp_path):
    d = valid()
    d["steps"][3]["patches"][0]["files"] = ["/etc/passwd"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    rd = tmp_path / "run"
    code, _, err = run(capsys, "replay", str(bad), "--model", "glm-5.2", "--hw", "mi355x", "--run-dir", str(rd))
    assert code == 2 and "steps[3].patches[0].files[0]" in err and not rd.exists()
    code, _, err = run(capsys, "replay", str(sample), "--model", "glm-9", "--hw", "mi355x", "--run-dir", str(rd))
    assert code == 2 and "unknown model 'glm-9'" in err and not rd.exists()
    code, _, err = run(capsys, "replay", str(sample), "--model", "glm-5.2", "--hw", "mi355x", "--budget", "0",
                       "--run-dir", str(rd))
    assert code == 2 and "--budget" in err and not rd.exists()
