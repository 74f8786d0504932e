"""Playbooks: a run's winning steps as a replayable YAML file, one module per job, imported
downhill (schema <- adapt <- replay <- record), never back up:

    schema.py   the format: models, load / parse / dumps, the JSON schema
    adapt.py    a step's templates rendered for another node (model card, hardware)
    replay.py   the planner that replays a playbook, and what became of each step
    record.py   a playbook recorded from a finished run's ledger, and the report's replay account
"""
