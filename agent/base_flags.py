"""`--config base_flags`: flags every candidate starts from, checked when the run is configured
(issue 13 item 12) instead of being found out when every trial fails. A flag must be known to
at least one framework (the others start without it), its value must parse and be sane there,
and parallelism is not a base flag: it is the candidate's own (tp/dp/ep), searched per node.
"""
from __future__ import annotations

from agent.errors import BadInput


def check_base_flags(flags: dict, hw) -> None:
    from tools import frameworks
    from tools.frameworks.base import FlagError
    for name, value in (flags or {}).items():
        known = [frameworks.get(n) for n in frameworks.NAMES if frameworks.get(n).lookup(str(name))[0] is not None]
        if not known:
            raise BadInput(f"base_flags {name}: no framework has this flag; allowed: flags of "
                           f"{', '.join(frameworks.NAMES)} (agent estimate --help lists how to pass them)")
        for fw in known:
            spec, _ = fw.lookup(str(name))
            if spec.name in fw.parallel_flag_names():
                raise BadInput(f"base_flags {name}: {value!r}: parallelism is set per candidate (tp x dp within "
                               f"1..{getattr(hw, 'gpus_per_node', '?')} GPUs of this node), not as a base flag")
            if value is True and spec.type == "bool":
                continue
            try:
                parsed = fw.parse_flags(fw.flag_args({name: value}))
            except FlagError as e:
                raise BadInput(f"base_flags {name}: {e}") from None
            try:
                fw.check_values(parsed)
            except BadInput as e:
                raise BadInput(f"base_flags {e}") from None
