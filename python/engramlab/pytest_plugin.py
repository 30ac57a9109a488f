"""pytest collects engramlab scenario files as tests.

A conftest.py in a folder of scenario files turns it on for that folder
(scenarios/conftest.py does), or `pytest -p engramlab.pytest_plugin DIR` for
any: each *.yaml / *.yml file there is one test, run on the emulator by
engramlab.run_scenario, at its own seed or at each seed of --scenario-seeds
(one test per seed, named NAME[seed=S]). A failing one says what differed, the
ranks' outcome table, and the `engramlab scenario run FILE --seed S` line
that reproduces it.

    pytest scenarios/
    pytest scenarios/fault_import.yaml --scenario-seeds 1-20
"""

import pytest

import engramlab


__all__ = ["pytest_addoption", "pytest_configure", "pytest_collect_file"]


def pytest_addoption(parser):
    group = parser.getgroup("engramlab")
    group.addoption(
        "--scenario-seeds",
        default=None,
        metavar="SEEDS",
        help="run each scenario file at these seeds instead of its own (e.g. 7, 1-20 or 1,5,9-12)",
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
        seeds.extend(range(low, high + 1))
    return seeds


def pytest_configure(config):
    # Read once, so a bad value is one usage error rather than one per file.
    option = config.getoption("scenario_seeds", default=None)
    config.engramlab_scenario_seeds = None if option is None else parse_seeds(option)


def pytest_collect_file(parent, file_path):
    if file_path.suffix in (".yaml", ".yml"):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


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
            yield ScenarioItem.from_parent(self, name=f"{info['name']}[seed={seed}]", seed=seed)


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
