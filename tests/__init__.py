# A package, so pytest imports tests/agent/ as `tests.agent` and puts the repo root (not tests/)
# on sys.path: without it tests/agent/ shadowed the real `agent` package and its submodules were
# found through the editable install instead, i.e. another checkout's code was under test.
