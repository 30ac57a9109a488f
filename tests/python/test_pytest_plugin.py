"""The pytest plugin: each scenario file a test, seeds as parameters, and a
failing one's message holding what differed and the line that reproduces it."""

import pytest

import engramlab

pytestmark = pytest.mark.skipif(not engramlab.has_emulator, reason="this build has no emulator (run_scenario)")


@pytest.fixture
def scenario_dir(pytester, repo):
    good = (repo / "scenarios/dp1_resolves_disabled.yaml").read_text()
    pytester.makefile(".yaml", good_one=good, bad_one=good.replace("placement: host_private", "placement: host_shared"))
    (pytester.path / "deployments").mkdir()
    (pytester.path / "deployments/not_a_scenario.yaml").write_text("layout: {tp: 1}\n")
    pytester.makeconftest((repo / "scenarios/conftest.py").read_text())
    return pytester


def test_each_file_is_a_test_and_a_failure_says_how_to_rerun_it(scenario_dir):
    result = scenario_dir.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*scenario bad_one (*bad_one.yaml) failed at seed 3:",
        "*host_shared*",
        f"*reproduce: {engramlab.cli_path} scenario run *bad_one.yaml --seed 3",
        "*FAILED bad_one.yaml::bad_one?seed=3?*",
    ])


def test_seeds_are_parameters(scenario_dir):
    result = scenario_dir.runpytest("-p", "no:cacheprovider", "--scenario-seeds", "1-3,9", "-v", "good_one.yaml")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*good_one?seed=1? PASSED*", "*good_one?seed=9? PASSED*"])
    bad = scenario_dir.runpytest("-p", "no:cacheprovider", "--scenario-seeds", "5-2", "good_one.yaml")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR


def test_a_file_that_does_not_parse_is_a_collection_error(scenario_dir):
    (scenario_dir.path / "broken.yaml").write_text("layout: {tp: 1}\nseed: many\n")
    result = scenario_dir.runpytest("-p", "no:cacheprovider", "broken.yaml")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*broken.yaml*line 2*seed*"])
