# `pytest scenarios/`: every scenario file in this folder as a test, run on
# the emulator through the engramlab Python module (README "From Python"),
# as `engramlab scenario run scenarios/` runs them.
from engramlab.pytest_plugin import *  # noqa: F401,F403  (its hooks)

# Not scenarios run on the emulator: plain deployment files, and the real
# processes' own (`scenario run --real`).
collect_ignore = ["deployments", "real"]
