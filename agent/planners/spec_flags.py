"""Speculative decoding as each framework's flag schema spells it: sglang's algorithm and draft
flags, vLLM's --speculative-config JSON, ATOM's --method. Only what the version's schema accepts
is proposed, within the ranges its FlagSpec.search allows."""
from __future__ import annotations

SPEC_WORDS = ("specul", "--method", "--num-speculative-tokens")  # flag names the spec phase owns
SPEC_DEPTHS = (3, 5)  # the common MTP depth, then a deeper draft


def spec_flag_sets(fw, mtp: bool) -> list[tuple[dict, str]]:
    """Speculative-decoding flag sets the framework's schema can express."""
    out: list[tuple[dict, str]] = []
    f = fw.flags
    if "--speculative-algorithm" in f:
        # The version's own list (0.5.23's flag is a free string: its help names the builtins).
        choices = fw.spec_algorithms() if hasattr(fw, "spec_algorithms") else (f["--speculative-algorithm"].choices or [])
        algo = next((a for a in (("NEXTN", "EAGLE", "MTP") if mtp else ("NGRAM",)) if a in choices), None)
        if algo:
            for d in SPEC_DEPTHS:
                d = _clip(f.get("--speculative-num-steps"), d)
                out.append(({"--speculative-algorithm": algo, "--speculative-num-steps": d,
                             "--speculative-eagle-topk": 1,
                             "--speculative-num-draft-tokens": _clip(f.get("--speculative-num-draft-tokens"), d + 1)},
                            f"{algo} speculative decoding, {d} steps"))
    elif "--speculative-config" in f:
        for d in SPEC_DEPTHS:
            cfg = {"method": "mtp", "num_speculative_tokens": d} if mtp else \
                {"method": "ngram", "num_speculative_tokens": d, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
            out.append(({"--speculative-config": cfg}, f"{cfg['method']} speculative decoding, {d} tokens"))
    elif "--method" in f and mtp:
        for d in SPEC_DEPTHS:
            d = _clip(f.get("--num-speculative-tokens"), d)
            out.append(({"--method": "mtp", "--num-speculative-tokens": d}, f"mtp speculative decoding, {d} tokens"))
    seen, uniq = set(), []
    for flags, what in out:
        k = repr(sorted((a, repr(b)) for a, b in flags.items()))
        if k not in seen:
            seen.add(k)
            uniq.append((flags, what))
    return uniq


def _clip(spec, v: int) -> int:
    sr = (spec.search if spec is not None else None) or {}
    return max(int(sr.get("low", v)), min(int(sr.get("high", v)), v))
