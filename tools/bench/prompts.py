"""Prompt texts with exact token counts, counted by the served model's own tokenizer.

Prompts are sequences of whole-word vocabulary entries (" word"), each of which the tokenizer
encodes as exactly one token, so a prompt of n words is n tokens; every prompt is re-encoded and
trimmed or padded until the count is exact. Requests of one `prefix_group` share their first
`prefix_tokens` tokens (the cacheable part, for a controlled prefix-cache hit ratio); the rest is
unique per request and per run seed, so repeated runs do not hit the cache beyond the prefix.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tools.errors import BadInput
from tools.bench.records import RequestSpec

# Used without a tokenizer: common words, most of them one token in BPE vocabularies.
_FALLBACK = ("the of and to in is was for on that with as by at from his her an be this are or "
             "not have one had but which were all their she can there been more when if will "
             "time who its so may into two them some these than other only new over also").split()


def load_tokenizer(path: str | Path):
    """A `tokenizers.Tokenizer` from a model directory (tokenizer.json) or the file itself."""
    from tokenizers import Tokenizer
    p = Path(path)
    f = p / "tokenizer.json" if p.is_dir() else p
    if not f.is_file():
        raise BadInput(f"no tokenizer at {f} (give a model directory holding tokenizer.json)")
    try:
        return Tokenizer.from_file(str(f))
    except Exception as e:  # the library raises plain Exceptions for malformed files
        raise BadInput(f"cannot read tokenizer {f}: {str(e).splitlines()[0][:200]}") from None


class PromptMaker:
    def __init__(self, tokenizer=None):
        self.tok = tokenizer
        self.words = self._single_token_words() if tokenizer is not None else [" " + w for w in _FALLBACK]

    @property
    def exact(self) -> bool:
        return self.tok is not None

    def _single_token_words(self) -> list[str]:
        vocab = self.tok.get_vocab()
        cands = []
        for tid in sorted(vocab.values()):
            s = self.tok.decode([tid])
            if len(s) >= 3 and s[0] == " " and s[1:].isascii() and s[1:].isalpha() and s[1:].islower():
                cands.append(s)
            if len(cands) >= 4000:
                break
        ok = [w for w in cands if self.count(w) == 1 and self.count(w + w) == 2]
        if len(ok) < 8:
            raise BadInput("the tokenizer has too few single-token words to build prompts")
        return ok

    def count(self, text: str) -> int:
        if self.tok is None:
            return len(text.split())
        return len(self.tok.encode(text, add_special_tokens=True).ids)

    def _words(self, rng: np.random.Generator, n: int) -> list[str]:
        return [self.words[i] for i in rng.integers(0, len(self.words), size=max(n, 0))]

    def fit(self, words: list[str], n: int, rng: np.random.Generator, keep: int = 0) -> str:
        """Trim or pad `words` (never touching the first `keep`) until the text is n tokens."""
        text = "".join(words)
        for _ in range(64):
            c = self.count(text)
            if c == n or self.tok is None:
                return text
            if c > n and len(words) > keep:
                words = words[:max(keep, len(words) - (c - n))]
            else:
                words = words + self._words(rng, max(n - c, 1))
            text = "".join(words)
        raise BadInput(f"could not build a prompt of exactly {n} tokens with this tokenizer")

    def prompts(self, specs: list[RequestSpec], *, seed: int = 0, prefix_seed: int = 0) -> list[RequestSpec]:
        """Fill each spec's prompt; shared prefixes depend only on (prefix_seed, group)."""
        prefixes: dict[tuple[int, int], list[str]] = {}
        out = []
        for s in specs:
            key = (s.prefix_group, s.prefix_tokens)
            if key not in prefixes:
                g = np.random.default_rng([prefix_seed, 7919, s.prefix_group])
                prefixes[key] = self._words(g, s.prefix_tokens)
            rng = np.random.default_rng([seed, s.id])
            pre = prefixes[key]
            words = pre + self._words(rng, s.input_tokens - len(pre))
            text = self.fit(words, s.input_tokens, rng, keep=len(pre))
            out.append(RequestSpec(id=s.id, input_tokens=s.input_tokens, output_tokens=s.output_tokens,
                                   arrival_s=s.arrival_s, prefix_tokens=s.prefix_tokens,
                                   prefix_group=s.prefix_group, prompt=text))
        return out


def save_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
