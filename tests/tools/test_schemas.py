"""Every argv the tool can emit parses with the real parser of every supported framework version
(rebuilt from the shipped schema: no network) or is refused before launch with the reason."""
from __future__ import annotations

import pytest
import yaml

from agent.errors import BadInput
from agent.planners.spec_flags import spec_flag_sets
from tools import frameworks
from tools.candidate import Candidate, Parallel
from tools.frameworks import schemas
from tools.frameworks.schemas.parser import FlagError, build
from tools.frameworks.versioned import VersionedFramework

from tests.conftest import REPO

VERSIONS = [(n, v) for n in frameworks.NAMES for v in schemas.versions(n)]


def real_parse(fw: VersionedFramework, argv: list[str]) -> dict:
    """What the version's real parser (rebuilt from its schema) makes of a launch command."""
    return build(schemas.load(fw.name, fw.version)).parse(argv[3:])


def launches_or_refused(fw: VersionedFramework, c: Candidate) -> str:
    """'ok' when the argv parses; the refusal's reason when validate refuses it first. A
    candidate validate accepts but the real parser rejects fails the test."""
    try:
        fw.validate(c)
    except BadInput as e:
        assert str(e), "a refusal names its reason"
        return str(e)
    argv = fw.argv(c, model="/m", port=30000, served_name="m")
    try:
        real_parse(fw, argv)
    except FlagError as e:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"{fw.label} accepted {c.flags} but its parser rejects {argv}: {e}")
    return "ok"


def search_points(fw: VersionedFramework) -> list[dict]:
    out = []
    for name, s in fw.flags.items():
        sr = s.search or {}
        values = sr.get("choices") or [sr.get("low"), sr.get("high")]
        out += [{name: v} for v in values if v is not None]
    return out


@pytest.mark.parametrize("name,version", VERSIONS)
def test_planner_search_space_parses(name, version):
    fw = frameworks.get(name, version)
    points = search_points(fw)
    assert points, f"{fw.label}: the planner has something to search"
    for flags in points:
        assert launches_or_refused(fw, Candidate(framework=name, flags=flags)) == "ok", flags
    for tp, dp, ep in ((8, 1, False), (4, 2, True), (1, 1, False)):
        c = Candidate(framework=name, parallel=Parallel(tp=tp, dp=dp, ep=ep))
        assert launches_or_refused(fw, c) == "ok"


@pytest.mark.parametrize("name,version", VERSIONS)
def test_speculative_flags_parse(name, version):
    fw = frameworks.get(name, version)
    sets = [f for mtp in (True, False) for f, _ in spec_flag_sets(fw, mtp)]
    if name != "atom":
        assert sets, f"{fw.label} can express speculative decoding"
    for flags in sets:
        assert launches_or_refused(fw, Candidate(framework=name, flags=flags)) == "ok", flags


# One diagnosis of each kind the fix catalogue answers with flags (agent/planners/fixes.py), as the
# frameworks' log parsers report them; patch fixes change source, not argv.
CATALOGUE_DIAGNOSES = [
    {"kind": "oom", "evidence": ["torch.OutOfMemoryError: try to increase --mem-fraction-static or "
                                 "--gpu-memory-utilization"], "details": {}},
    {"kind": "startup_memory", "details": {"free_fraction": 0.5, "requested": 0.92, "free_gib": 40.0, "total_gib": 80.0}},
    {"kind": "bad_flag", "details": {"flag": "--no-such-flag"}},
]


@pytest.mark.parametrize("name,version", VERSIONS)
def test_fix_catalogue_flags_parse(name, version):
    from agent.planners.fixes import fixes_for
    from tools.hardware import get_hardware
    from tools.models import get_model
    fw = frameworks.get(name, version)
    fixed = []
    for d in CATALOGUE_DIAGNOSES:  # each fix on the candidate whose launch it answers
        failed = Candidate(framework=name, flags={"--no-such-flag": "1"} if d["kind"] == "bad_flag" else {})
        for f in fixes_for([d], failed, card=get_model("glm-5.2"), hw=get_hardware("mi355x"), tree=None, framework=fw):
            assert f.kind == "flags"
            flags = {k: v for k, v in {**failed.flags, **f.flags}.items() if v is not None}
            assert launches_or_refused(fw, Candidate(framework=name, flags=flags)) == "ok", (f.name, flags)
            fixed.append(f.name)
    assert "drop_bad_flag" in fixed
    if name in ("sglang", "vllm"):
        assert "more_memory_fraction" in fixed, f"{fw.label}: the OOM fix"
    if name == "vllm":
        assert "less_memory_utilization" in fixed


@pytest.mark.parametrize("version", schemas.versions("vllm"))
def test_the_testbed_serving_modes_parse(version):
    """The shipped configuration of a real run: the testbed's serving modes (sandboxes/testbed/mode.py)
    and its context length, which every real-server test and the first real run launch with."""
    from sandboxes.testbed.mode import MODES
    from sandboxes.testbed.serve import MAX_MODEL_LEN
    fw = frameworks.get("vllm", version)
    for mode, flags in MODES:
        c = Candidate(framework="vllm", flags={"--max-model-len": MAX_MODEL_LEN, **flags})
        assert launches_or_refused(fw, c) == "ok", mode


@pytest.mark.parametrize("name,version", VERSIONS)
def test_planners_search_only_flags_the_version_has(name, version):
    fw = frameworks.get(name, version)
    for flag, s in fw.flags.items():
        if s.search:
            assert fw.accepts(flag)
            assert not s.choices or all(c in s.choices or isinstance(c, bool) for c in s.search.get("choices", []))
    if (name, version) == ("sglang", "0.5.23"):
        assert "--cuda-graph-max-bs" not in fw.flags and fw.flags["--cuda-graph-max-bs-decode"].search
    if (name, version) == ("sglang", "0.5.12"):
        assert fw.flags["--cuda-graph-max-bs"].search


SHIPPED_PLAYBOOKS = sorted((REPO / "playbooks").glob("*.yaml"))


def replayed_candidates(path):
    """(step id, candidate) after every step of a shipped playbook, adapted to the model and node it
    was recorded on and accumulated as a replay builds them (flags, parallelism, framework), flags
    as recorded: each version's translation is applied by the test."""
    from agent.playbooks.adapt import adapt
    from agent.playbooks.schema import load
    from tools.hardware import get_hardware
    from tools.models import get_model
    pb = load(path)
    card, hw = get_model(pb.source.model), get_hardware(pb.source.hw)
    out, c = [], None
    for step in pb.steps:
        a = adapt(step, card, hw)
        assert a.skip is None, (step.id, a.skip)  # on its own model and node every step applies
        if c is None or (a.framework and a.framework != c.framework):
            c = Candidate(framework=a.framework or c.framework, weights=a.weights or (c.weights if c else "bf16"),
                          parallel=a.parallel or (c.parallel if c else Parallel()))
        flags = {k: v for k, v in {**c.flags, **(a.flags or {})}.items() if v is not None}
        c = c.model_copy(update={"flags": flags, "parallel": a.parallel or c.parallel, "weights": a.weights or c.weights})
        out.append((step.id, c))
    return out


def test_every_shipped_playbook_is_checked():
    assert SHIPPED_PLAYBOOKS and all(replayed_candidates(p) for p in SHIPPED_PLAYBOOKS)


@pytest.mark.parametrize("name,version", VERSIONS)
def test_playbook_steps_parse_after_translation_or_are_refused(name, version):
    fw = frameworks.get(name, version)
    outcomes, notes, after = {}, [], {}
    for path in SHIPPED_PLAYBOOKS:
        for sid, c in replayed_candidates(path):
            if c.framework != name:
                continue
            flags, n = fw.translate(c.flags)
            notes += n
            after[f"{path.name}:{sid}"] = flags
            outcomes[f"{path.name}:{sid}"] = launches_or_refused(fw, c.model_copy(update={"flags": flags}))
    if (name, version) == ("sglang", "0.5.23"):
        # The GLM playbook is recorded on 0.5.23's spelling now: nothing ambiguous is left after
        # translation, and an older step's spelling translates.
        assert not any("--cuda-graph-max-bs" in f for f in after.values()), after
        _, old = fw.translate({"--cuda-graph-max-bs": 64})
        assert any(n.startswith("--cuda-graph-max-bs -> --cuda-graph-max-bs-decode") for n in old), old
    # every step the shipped playbooks take on this framework launches on every supported version
    assert all(o == "ok" for o in outcomes.values()), outcomes
    assert outcomes or name == "atom", f"{fw.label}: the shipped playbooks have steps on it"


def test_real_parser_semantics_per_version():
    sg = frameworks.get("sglang", "0.5.23")
    assert sg.parse_flags(["--tp", "8", "--max-prefill-tokens", "16k", "--attention-backend", "dsa"]) == \
        {"--tp-size": 8, "--max-prefill-tokens": 16000, "--attention-backend": "dsa"}
    with pytest.raises(FlagError, match="ambiguous option: --cuda-graph-max-bs"):
        sg.parse_flags(["--cuda-graph-max-bs", "75"])
    assert frameworks.get("sglang", "0.5.12").parse_flags(["--cuda-graph-max-bs", "75"]) == {"--cuda-graph-max-bs": 75}
    old, new = frameworks.get("atom", "2026-06-17"), frameworks.get("atom", "2026-08-22")
    with pytest.raises(FlagError, match="unrecognized arguments: --kv-cache-dtype"):
        old.parse_flags(["--kv-cache-dtype", "fp8"])  # both spellings only from 2026-07-23
    assert new.parse_flags(["--kv-cache-dtype", "fp8"]) == {"--kv_cache_dtype": "fp8"}
    assert "--cudagraph-mode" not in old.flags and "--cudagraph-mode" in new.flags
    assert frameworks.get("vllm", "0.33.0").parse_flags(["--max_num_seqs", "8"]) == {"--max-num-seqs": 8}


def test_unknown_version_uses_the_nearest_and_says_so():
    fw = frameworks.get("sglang", "0.5.20")
    assert fw.version == "0.5.12" and "nearest known version 0.5.12" in fw.version_note
    assert frameworks.get("sglang", "0.9").version == "0.5.23"
    assert frameworks.get("sglang").version == "0.5.23" and frameworks.get("sglang").version_note is None
    with pytest.raises(BadInput, match="known: 0.5.12, 0.5.23"):
        frameworks.get("sglang", "banana")
