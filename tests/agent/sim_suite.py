"""An interim eval suite for sim runs until tools/evals names its default tasks: GSM8K (shared
data, greedy) and the synthetic long-context needle task; per-item 0/1, same items every call."""
import asyncio
import json
import re

from tests.conftest import shared_path
from tools.evals import synthetic


class SimEvalSuite:
    def __init__(self, n_gsm8k: int = 200, n_long: int = 50):
        lines = (shared_path() / "data" / "gsm8k" / "test.jsonl").read_text().splitlines()
        rows = [json.loads(x) for x in lines if x.strip()][:n_gsm8k]
        self.gsm = [(r["question"], r["answer"].split("####")[-1].strip().replace(",", "")) for r in rows]
        self.long = [(synthetic.long_context_prompt(it), it["gold"]) for it in synthetic.long_context_items(n_long)]

    def run(self, client, *, limit, seed):
        out = {}
        for name, items in (("gsm8k", self.gsm[:limit]), ("longctx", self.long[:limit])):
            texts = asyncio.run(client.complete([p for p, _ in items], max_tokens=256, temperature=0.0, seed=seed))
            got = [(re.findall(r"####\s*(\S+)", t) or re.findall(r"-?\d[\d.]*", t) or [""])[-1].rstrip(".")
                   for t in texts]
            out[name] = [int(g == gold) for g, (_, gold) in zip(got, items)]
        return out
