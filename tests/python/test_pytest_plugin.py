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
        "*FAILED bad_one.yaml::bad_one-seed3*",
    ])


def test_seeds_are_parameters(scenario_dir):
    result = scenario_dir.runpytest("-p", "no:cacheprovider", "--scenario-seeds", "1-3,9", "-v", "good_one.yaml")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*good_one-seed1 PASSED*", "*good_one-seed9 PASSED*"])
    bad = scenario_dir.runpytest("-p", "no:cacheprovider", "--scenario-seeds", "5-2", "good_one.yaml")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR


def test_a_file_that_does_not_parse_is_a_collection_error(scenario_dir):
    (scenario_dir.path / "broken.yaml").write_text("layout: {tp: 1}\nseed: many\nexpect: {placement: host_private}\n")
    result = scenario_dir.runpytest("-p", "no:cacheprovider", "broken.yaml")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*broken.yaml*line 2*seed*"])


def test_one_seed_is_selected_with_k(scenario_dir):
    result = scenario_dir.runpytest("-p", "no:cacheprovider", "--scenario-seeds", "1-9", "-v", "good_one.yaml",
                                    "-k", "good_one-seed5")
    result.assert_outcomes(passed=1, deselected=8)
    result.stdout.fnmatch_lines(["*good_one-seed5 PASSED*"])


def test_only_scenario_files_are_collected(scenario_dir):
    # An engine's config file beside the scenarios is no test; a glob in the ini file makes one a scenario.
    (scenario_dir.path / "engine_config.yaml").write_text("tensor_parallel_size: 8\nmax_model_len: 32768\n")
    result = scenario_dir.runpytest("-p", "no:cacheprovider", "--collect-only", "-q")
    assert "engine_config" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*good_one.yaml::good_one-seed3*"])
    (scenario_dir.path / "pytest.ini").write_text("[pytest]\nengramlab_scenario_glob = engine_*.yaml\n")
    globbed = scenario_dir.runpytest("-p", "no:cacheprovider", "--collect-only", "-q", "engine_config.yaml")
    assert globbed.ret == pytest.ExitCode.INTERRUPTED  # collected, and refused as a scenario: a collection error
    globbed.stdout.fnmatch_lines(["*engine_config.yaml*"])


def test_two_scenario_folders_and_a_symlink_to_dot_collect_each_file_once(scenario_dir):
    other = scenario_dir.path / "more"
    other.mkdir()
    (other / "conftest.py").write_text((scenario_dir.path / "conftest.py").read_text())
    (other / "good_two.yaml").write_text((scenario_dir.path / "good_one.yaml").read_text())
    (scenario_dir.path / "again").symlink_to(".")
    result = scenario_dir.runpytest("-p", "no:cacheprovider", "--collect-only", "-q", "good_one.yaml", "more",
                                    "again/good_one.yaml")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    assert "already added" not in result.stdout.str() + result.stderr.str()
    # Each path once, though the plugin is loaded three times (entry point and two conftest.py files).
    assert result.stdout.str().count("good_two.yaml::good_two-seed3") == 1
    assert result.stdout.str().count("again/good_one.yaml::good_one-seed3") == 1


@pytest.mark.parametrize("seeds, says", [
    ("0-2000000", "more than 10,000 seeds"),
    ("18446744073709551616", "past the largest seed"),
    ("2^64", "is not a seed or a range"),
])
def test_scenario_seeds_are_bounded(scenario_dir, seeds, says):
    result = scenario_dir.runpytest("-p", "no:cacheprovider", "--scenario-seeds", seeds, "good_one.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert says in result.stderr.str()


def test_the_installed_entry_point_loads_the_plugin_without_a_conftest(tmp_path, repo):
    # A folder with one scenario and no conftest.py: pytest finds the plugin through the package's
    # pytest11 entry point alone (engramlab-*.dist-info/entry_points.txt), in a process of its own so
    # this session's plugins do not stand in for it.
    import os
    import pathlib
    import subprocess
    import sys

    (tmp_path / "one.yaml").write_text((repo / "scenarios/dp1_resolves_disabled.yaml").read_text())
    env = dict(os.environ)
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    env["PYTHONPATH"] = str(pathlib.Path(engramlab.__file__).resolve().parents[1])
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "."],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert not list(tmp_path.glob("conftest.py"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "one.yaml::" in run.stdout, run.stdout
    # Without the entry point (autoload off) nothing collects the file: the test above is the plugin's.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    off = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "."],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "one.yaml::" not in off.stdout, off.stdout
