"""The loader refuses malformed or tampered playbooks before anything runs, naming the field."""
import json
from pathlib import Path

import pytest

from agent.playbooks import schema as pbm
from tests.playbooks.samples import valid

REPO = Path(__file__).resolve().parents[2]


def refused(data) -> str:
    with pytest.raises(pbm.PlaybookError) as e:
        pbm.parse(data)
    return str(e.value)


def test_valid_sample_loads_and_round_trips():
    pb = pbm.parse(valid())
    assert [s.kind for s in pb.steps][:3] == ["framework", "framework", "weights"]
    again = pbm.loads(pbm.dumps(pb))
    assert again == pb


@pytest.mark.parametrize("mutate, field, words", [
    (lambda d: d["steps"][1].update(kind="rewrite_weights"), "steps[1].kind", "unknown step kind 'rewrite_weights'"),
    (lambda d: d["steps"][1].update(framework="tgi"), "steps[1].framework", "unknown framework 'tgi'"),
    (lambda d: d["steps"][2].update(weights="int3"), "steps[2].weights", "unknown weight precision"),
    (lambda d: d["steps"][1].update(surprise=1), "steps[1].surprise", "Extra inputs"),
    (lambda d: d["steps"][1].pop("framework"), "steps[1].framework", "must say what it changes"),
    (lambda d: d["steps"][3]["patches"][0]["params"].update(file="../../etc/passwd"), "steps[3].patches[0].params", ""),
    (lambda d: d["steps"][4]["patches"][0]["params"].update(file="/etc/passwd"), "steps[4].patches[0].params.file", "absolute"),
    (lambda d: d["steps"][4]["patches"][0]["params"].update(file="a/../../x.cuh"), "steps[4].patches[0].params.file", "'..'"),
    (lambda d: d["steps"][3]["patches"][0].update(files=["ok.py", "/root/.ssh/id_rsa"]), "steps[3].patches[0].files[1]", "absolute"),
    (lambda d: d["steps"][3]["patches"][0].update(files=[".git/config"]), "steps[3].patches[0].files[0]", "git's own data"),
    (lambda d: d["steps"][9]["patches"][0].update(diff="--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n"),
     "steps[9].patches[0].diff", "'..'"),
    (lambda d: d["steps"][9]["patches"][0].update(diff="--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n"),
     "steps[9].patches[0].diff", "absolute"),
    (lambda d: d["steps"][9]["patches"][0].update(diff="diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n"),
     "steps[9].patches[0].diff", "symlink"),
    (lambda d: d["steps"][9]["patches"][0].update(fix="rm_rf"), "steps[9].patches[0].fix", "unknown fix 'rm_rf'"),
    (lambda d: d["steps"][3]["patches"][0]["params"].update(cmd="x"), "steps[3].patches[0].params", "not taken by fix"),
    (lambda d: d["steps"][3]["patches"][0]["params"].update(layer="{__import__}"), "steps[3].patches[0].params.layer", "template"),
    (lambda d: d["steps"][7]["parallel"].update(tp="{os.system}"), "steps[7].parallel.tp", "template"),
    (lambda d: d["steps"][5]["flags"].update({"; rm -rf /": 1}), "steps[5].flags", "not a command-line flag"),
    (lambda d: d["steps"][5].update(env={"OPENAI_API_KEY": "x"}), "steps[5].env.OPENAI_API_KEY", "secret"),
    (lambda d: d["steps"][5].update(env={"HARMLESS": "sk-abcdefghijklmnop"}), "steps[5].env.HARMLESS", "secret"),
    (lambda d: d["steps"][8]["when"].update(after_diagnosis="solar_flare"), "steps[8].when.after_diagnosis", "unknown diagnosis"),
    (lambda d: d["steps"][2]["when"].update(vendor=["intel"]), "steps[2].when.vendor[0]", ""),
    (lambda d: d["steps"][2].update(id="s01"), "steps", "duplicate step ids"),
    (lambda d: d["steps"][2].update(id="../x"), "steps[2].id", ""),
    (lambda d: d["steps"].append({**d["steps"][0], "id": "s99"}), "steps", "baseline"),
    (lambda d: d.update(version=2), "version", "unsupported playbook version 2"),
    (lambda d: d.pop("steps"), "steps", "Field required"),
])
def test_refusals_name_the_field(mutate, field, words):
    d = valid()
    mutate(d)
    msg = refused(d)
    assert f": {field}" in msg, msg
    assert words in msg, msg


def test_yaml_level_refusals():
    for text, words in [("version: 1\nsteps: [", "not valid YAML"),
                        ("- 1\n- 2\n", "a playbook is a mapping"),
                        ("a: &x [1]\nb: *x\nversion: 1\nsteps: []\n", "anchors, aliases"),
                        ("version: 1\nsteps: !!python/object:os.system {}\n", "anchors, aliases and tags")]:
        with pytest.raises(pbm.PlaybookError, match=words):
            pbm.loads(text)
    with pytest.raises(pbm.PlaybookError, match="larger than"):
        pbm.loads("x" * (pbm.MAX_BYTES + 1))


def test_exported_json_schema_is_current():
    path = REPO / "playbooks" / "playbook.schema.json"
    assert json.loads(path.read_text()) == pbm.json_schema(), "regenerate: agent playbook schema --out " + str(path)


def test_shipped_playbooks_validate():
    files = sorted((REPO / "playbooks").glob("*.yaml"))
    for f in files:
        pbm.load(f)
    if not files:
        pytest.skip("no playbook shipped yet")


def test_json_valued_flags_load_validate_and_render():
    # vLLM's --speculative-config is a JSON object; a kept step with it must record and replay.
    from agent.playbooks.adapt import render
    d = valid()
    d["steps"][1]["flags"] = {"--speculative-config": {"method": "mtp", "num_speculative_tokens": "{mtp_layers*3}"}}
    pb = pbm.parse(d)
    assert pbm.loads(pbm.dumps(pb)) == pb
    assert render(pb.steps[1].flags["--speculative-config"], {"mtp_layers": 1}) == \
        {"method": "mtp", "num_speculative_tokens": 3}
    d["steps"][1]["flags"] = {"--speculative-config": {"method": "{os.system}"}}
    assert "steps[1].flags" in refused(d)
