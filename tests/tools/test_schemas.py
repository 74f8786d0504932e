"""Every argv the tool can emit parses with the real parser of every supported framework version
(rebuilt from the shipped schema: no network) or is refused before launch with the reason."""
from __future__ import annotations

import pytest
import yaml

from agent.errors import BadInput
from agent.planners.builtin import spec_flag_sets
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
def test_speculative_and_fix_catalogue_flags_parse(name, version):
    fw = frameworks.get(name, version)
    sets = [f for mtp in (True, False) for f, _ in spec_flag_sets(fw, mtp)]
    if name != "atom":
        assert sets, f"{fw.label} can express speculative decoding"
    # the fix catalogue's flag fixes (agent/planners/fixes.py), where the version has the flag
    sets += [{k: v} for k, v in (("--mem-fraction-static", 0.9), ("--gpu-memory-utilization", 0.95)) if k in fw.flags]
    for flags in sets:
        assert launches_or_refused(fw, Candidate(framework=name, flags=flags)) == "ok", flags


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


def playbook_steps():
    """(framework, step) for every step that sets flags; a step without `framework` is on the
    framework of the step before it."""
    doc = yaml.safe_load((REPO / "playbooks/glm-5.2-mi355x.yaml").read_text())
    out, cur = [], None
    for s in doc["steps"]:
        cur = s.get("framework") or cur
        if cur in frameworks.NAMES and s.get("flags"):
            out.append((cur, s))
    return out


@pytest.mark.parametrize("name,version", VERSIONS)
def test_playbook_steps_parse_after_translation_or_are_refused(name, version):
    fw = frameworks.get(name, version)
    outcomes = {}
    for fw_name, s in playbook_steps():
        if fw_name != name:
            continue
        flags = {k: v for k, v in s["flags"].items() if v is not None and "{" not in str(v)}
        flags, notes = fw.translate(flags)
        outcomes[s["id"]] = (launches_or_refused(fw, Candidate(framework=name, flags=flags)), notes)
    if (name, version) == ("sglang", "0.5.23"):
        translated = [n for _, ns in outcomes.values() for n in ns]
        assert any(n.startswith("--cuda-graph-max-bs -> --cuda-graph-max-bs-decode") for n in translated)
        assert all(o == "ok" for o, _ in outcomes.values()), outcomes


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
