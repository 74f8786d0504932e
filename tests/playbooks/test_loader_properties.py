"""Property tests (hypothesis) over the playbook loader: whatever the input, the loader either
returns a playbook whose every path stays inside the source tree, or raises PlaybookError (never
another exception); bad paths anywhere are refused with the field named; valid playbooks round-trip."""
from pathlib import PurePosixPath

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.playbooks import schema as pbm
from agent.playbooks.adapt import render
from tools import patch as patchtool
from tests.playbooks.samples import valid

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

segment = st.text(alphabet="abcxyz_-.0123456789", min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))
good_path = st.lists(segment, min_size=1, max_size=4).map("/".join).filter(lambda p: not p.startswith(".git"))
bad_path = st.one_of(
    good_path.map(lambda p: "/" + p),  # absolute
    st.tuples(good_path, st.integers(0, 2)).map(lambda t: "/".join(["..", t[0]] if t[1] == 0 else
                                                                   [t[0], ".."] if t[1] == 1 else [t[0], "..", t[0]])),
    good_path.map(lambda p: "C:/" + p), good_path.map(lambda p: p.replace("/", "\\") + "\\x"),
    good_path.map(lambda p: "~/" + p), good_path.map(lambda p: p + "\x00"),
)


def all_paths(pb: pbm.Playbook) -> list[str]:
    out = []
    for s in pb.steps:
        for p in s.patches:
            out += p.files
            if "file" in p.params:
                out.append(str(p.params["file"]))
            if p.diff:
                out += patchtool.diff_paths(p.diff)
    return out


def inside(p: str) -> bool:
    pp = PurePosixPath(p)
    return not pp.is_absolute() and ".." not in pp.parts and "\\" not in p and "\x00" not in p and ":" not in p[:2]


@SETTINGS
@given(where=st.sampled_from(["file", "files", "diff"]), path=bad_path)
def test_a_bad_path_anywhere_is_refused_naming_the_field(where, path):
    d = valid()
    if where == "file":
        d["steps"][4]["patches"][0]["params"]["file"] = path
        field = "steps[4].patches[0].params.file"
    elif where == "files":
        d["steps"][3]["patches"][0]["files"] = ["ok.py", path]
        field = "steps[3].patches[0].files[1]"
    else:
        d["steps"][9]["patches"][0]["diff"] = f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"
        field = "steps[9].patches[0].diff"
    try:
        pbm.parse(d)
    except pbm.PlaybookError as e:
        assert f": {field}" in str(e), str(e)
    else:
        raise AssertionError(f"accepted {path!r} in {where}")


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.text(max_size=12))
json_data = st.recursive(json_leaf, lambda c: st.one_of(st.lists(c, max_size=4),
                                                       st.dictionaries(st.text(max_size=10), c, max_size=4)),
                         max_leaves=20)


@SETTINGS
@given(data=json_data)
def test_arbitrary_data_is_a_playbook_or_a_playbook_error(data):
    try:
        pb = pbm.parse(data)
    except pbm.PlaybookError:
        return
    assert all(inside(p) for p in all_paths(pb))


@SETTINGS
@given(step_no=st.integers(0, 9), key=st.sampled_from(["kind", "phase", "framework", "weights", "id", "flags", "env",
                                                         "when", "parallel", "patches", "moe", "baseline"]),
       value=json_data)
def test_a_mutated_step_is_accepted_safely_or_refused(step_no, key, value):
    d = valid()
    d["steps"][step_no][key] = value
    try:
        pb = pbm.parse(d)
    except pbm.PlaybookError as e:
        assert str(e).startswith("playbook: ")
        return
    assert all(inside(p) for p in all_paths(pb))
    for s in pb.steps:
        assert s.kind in pbm.STEP_KINDS
        assert not any(pbm.SECRET.search(k) for k in s.env)


@SETTINGS
@given(text=st.text(max_size=300))
def test_arbitrary_text_is_a_playbook_or_a_playbook_error(text):
    try:
        pbm.loads(text)
    except pbm.PlaybookError:
        pass


@SETTINGS
@given(patch_path=good_path, flag=st.from_regex(r"--[a-z][a-z0-9-]{0,20}", fullmatch=True),
       value=st.one_of(st.integers(-5, 5000), st.booleans(), st.text(alphabet="abc_09", max_size=10)),
       dp=st.sampled_from([1, 2, 4, 8]))
def test_valid_playbooks_round_trip(patch_path, flag, value, dp):
    d = valid()
    d["steps"][5]["flags"] = {flag: value}
    d["steps"][4]["patches"][0]["params"]["file"] = patch_path
    d["steps"][7]["parallel"] = {"tp": f"{{gpus_per_node//{dp}}}", "dp": dp}
    pb = pbm.parse(d)
    assert pbm.loads(pbm.dumps(pb)) == pb


@SETTINGS
@given(x=st.integers(0, 10_000), k=st.integers(1, 64), op=st.sampled_from(["//", "*", "+", "-"]))
def test_templates_are_arithmetic_not_eval(x, k, op):
    want = {"//": x // k, "*": x * k, "+": x + k, "-": x - k}[op]
    assert render(f"{{num_hidden_layers{op}{k}}}", {"num_hidden_layers": x}) == want
    assert render(f"model.layers.{{num_hidden_layers{op}{k}}}.", {"num_hidden_layers": x}) == f"model.layers.{want}."
