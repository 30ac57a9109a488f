"""pytest collects engramlab scenario files as tests.

Installed (`cmake --install`), the module registers this plugin with pytest
through its entry point (pytest11: engramlab); from the build tree a
conftest.py in a folder of scenario files turns it on (scenarios/conftest.py
does), or `pytest -p engramlab.pytest_plugin DIR` for any. A scenario file is
a *.yaml / *.yml file with an `expect:` or `faults: drawn` line at its top
level (other YAML, an engine's config files say, is left alone), or any file
matching the ini option `engramlab_scenario_glob`. Each is one test, run on
the emulator by engramlab.run_scenario, at its own seed or at each seed of
--scenario-seeds (one test per seed, named NAME-seedS, so `-k NAME-seed5`
selects one). A failing one says what differed, the ranks' outcome table,
and the `engramlab scenario run FILE --seed S` line that reproduces it.

    pytest scenarios/
    pytest scenarios/fault_import.yaml --scenario-seeds 1-20 -k fault_import-seed7
"""

import fnmatch
import re

import pytest

import engramlab


__all__ = ["pytest_addoption", "pytest_configure", "pytest_collect_file"]


# The most seeds --scenario-seeds may name (engramlab's own seed lists have
# the same bound, core/base/seed_list.h): each is a test.
MAX_SEEDS = 10_000
LARGEST_SEED = 2**64 - 1

# The plugin may be loaded more than once in one session: by its entry point,
# and by each folder's conftest.py that imports its hooks (two scenario
# folders, a symlink to `.`). Each hook then runs once per copy, so the
# option is added once and a file collected once.
_ADDED = "_engramlab_scenario_options_added"


def pytest_addoption(parser):
    group = parser.getgroup("engramlab")
    if getattr(parser, _ADDED, False):
        return
    setattr(parser, _ADDED, True)
    group.addoption(
        "--scenario-seeds",
        default=None,
        metavar="SEEDS",
        help=f"run each scenario file at these seeds instead of its own (e.g. 7, 1-20 or 1,5,9-12; "
        f"at most {MAX_SEEDS:,} seeds)",
    )
    parser.addini(
        "engramlab_scenario_glob",
        "file names (fnmatch patterns, space separated) collected as scenarios even without an expect: or "
        "`faults: drawn` line",
        default="",
    )


def parse_seeds(text):
    """'1,5,9-12' -> [1, 5, 9, 10, 11, 12]; a usage error naming the option otherwise."""
    seeds = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise pytest.UsageError(f"--scenario-seeds {text}: {part!r} is not a seed or a range such as 1-20")
        if low < 0 or high < low:
            raise pytest.UsageError(f"--scenario-seeds {text}: {part!r} is not a range of seeds >= 0, low to high")
        if high > LARGEST_SEED:
            raise pytest.UsageError(f"--scenario-seeds {text}: {part!r} is past the largest seed, 2^64 - 1 = {LARGEST_SEED}")
        if len(seeds) + (high - low + 1) > MAX_SEEDS:
            raise pytest.UsageError(
                f"--scenario-seeds {text}: more than {MAX_SEEDS:,} seeds (each is a test); run a smaller range, "
                f"or a sweep with `engramlab fuzz --seeds N`")
        seeds.extend(range(low, high + 1))
    return seeds


def pytest_configure(config):
    # Read once, so a bad value is one usage error rather than one per file.
    if hasattr(config, "engramlab_scenario_seeds"):
        return
    option = config.getoption("scenario_seeds", default=None)
    config.engramlab_scenario_seeds = None if option is None else parse_seeds(option)
    config.engramlab_collected = set()


def is_scenario_file(file_path, globs=()):
    """A scenario states what must happen (`expect:`) or draws its faults (`faults: drawn`) at its top level."""
    if any(fnmatch.fnmatch(file_path.name, g) for g in globs):
        return True
    try:
        with open(file_path, "rb") as f:
            head = f.read(1 << 20)  # engramlab reads at most 1 MiB of a scenario
    except OSError:
        return False
    return re.search(rb"^(expect:|faults:[ \t]*drawn\b)", head, re.MULTILINE) is not None


def pytest_collect_file(parent, file_path):
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    config = parent.config
    if not hasattr(config, "engramlab_collected"):
        pytest_configure(config)
    key = str(file_path)  # one node per path, whichever copy of the plugin is asked first
    if key in config.engramlab_collected:
        return None
    globs = config.getini("engramlab_scenario_glob").split() if _ini_known(config) else []
    if not is_scenario_file(file_path, globs):
        return None
    config.engramlab_collected.add(key)
    return ScenarioFile.from_parent(parent, path=file_path)


def _ini_known(config):
    try:
        config.getini("engramlab_scenario_glob")
        return True
    except ValueError:
        return False


class ScenarioFailed(Exception):
    """A scenario ran and did not meet its expectations (its outcome attached)."""

    def __init__(self, outcome):
        super().__init__(outcome["name"])
        self.outcome = outcome


class ScenarioFile(pytest.File):
    def collect(self):
        # Read (and checked) at collection: a bad file is a collection error naming its line and field.
        info = engramlab.scenario_info(str(self.path))
        seeds = getattr(self.config, "engramlab_scenario_seeds", None)
        for seed in [info["seed"]] if seeds is None else seeds:
            yield ScenarioItem.from_parent(self, name=f"{info['name']}-seed{seed}", seed=seed)


class ScenarioItem(pytest.Item):
    def __init__(self, *, seed, **kwargs):
        super().__init__(**kwargs)
        self.seed = seed

    def runtest(self):
        outcome = engramlab.run_scenario(str(self.path), seed=self.seed)
        self.user_properties.append(("reproduce", outcome["reproduce"]))
        if outcome["result"] != "pass":
            raise ScenarioFailed(outcome)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ScenarioFailed):
            o = excinfo.value.outcome
            lines = [f"scenario {o['name']} ({o['file']}) failed at seed {o['seed']}:"]
            lines += [f"  - {f}" for f in o["failures"]]
            if o["rank_table"]:
                lines.append("  ranks (ranks alike on one line):")
                lines += [f"    {row}" for row in o["rank_table"]]
            lines.append(f"  reproduce: {o['reproduce']}")
            return "\n".join(lines)
        if isinstance(excinfo.value, engramlab.Error):
            # The file could not be read or run: its error names the line and field.
            return f"{self.path}: {excinfo.value}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"scenario {self.path.name} at seed {self.seed}"
