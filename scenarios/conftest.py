# `pytest scenarios/`: every scenario file in this folder as a test, run on
# the emulator through the engramlab Python module (README "From Python"),
# as `engramlab scenario run scenarios/` runs them.
from engramlab.pytest_plugin import pytest_addoption, pytest_collect_file  # noqa: F401

# Not scenarios run on the emulator: plain deployment files, and the real
# processes' own (`scenario run --real`).
collect_ignore = ["deployments", "real"]
