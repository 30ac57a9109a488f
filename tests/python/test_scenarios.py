"""engramlab.run_scenario, scenario_info and fuzz: the documents the CLI's
--json prints, a failing scenario as a result with its reproduce line."""

import json
import subprocess

import pytest

import engramlab

pytestmark = pytest.mark.skipif(not engramlab.has_emulator, reason="this build has no emulator (run_scenario, fuzz)")


def test_a_scenario_passes_as_the_cli_runs_it(repo):
    path = repo / "scenarios/dp1_resolves_disabled.yaml"
    outcome = engramlab.run_scenario(path)
    assert outcome["result"] == "pass", outcome["failures"]
    assert outcome["placement"] == "host_private" and outcome["seed"] == 3
    cli = subprocess.run([engramlab.cli_path, "scenario", "run", str(path), "--json"], capture_output=True,
                         text=True, check=True)
    (entry,) = json.loads(cli.stdout)["scenarios"]
    assert outcome["trace_hash"] == entry["trace_hash"]  # the same run, event for event
    assert outcome["reproduce"] == f"{engramlab.cli_path} scenario run {path} --seed 3"


def test_a_failing_scenario_is_a_result_with_the_line_that_reruns_it(repo, tmp_path):
    text = (repo / "scenarios/dp1_resolves_disabled.yaml").read_text().replace("placement: host_private",
                                                                                "placement: host_shared")
    path = tmp_path / "wrong_expectation.yaml"
    path.write_text(text)
    assert engramlab.scenario_info(path) == {"name": "wrong_expectation", "description":
                                             "DP=1 -> dp_shared_memory disabled -> host_private",
                                             "file": str(path), "seed": 3, "faults_drawn": False}
    outcome = engramlab.run_scenario(path, seed=11)
    assert outcome["result"] == "fail" and outcome["seed"] == 11
    assert any("host_shared" in f for f in outcome["failures"])
    assert outcome["reproduce"].endswith(f"scenario run {path} --seed 11")
    rerun = subprocess.run(outcome["reproduce"], shell=True, capture_output=True, text=True)
    assert rerun.returncode == 1 and "FAIL wrong_expectation" in rerun.stdout


def test_a_bad_file_raises_naming_the_line_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("hosts:\n  - {name: a, gpus: 4}\nlayout: {tp: 4, dp: 1}\nseed: many\n")
    with pytest.raises(engramlab.InvalidArgumentError, match="line 4, column 7: seed"):
        engramlab.run_scenario(path)
    with pytest.raises(engramlab.InvalidArgumentError, match="line 4"):
        engramlab.scenario_info(path)


def test_fuzz_gives_the_cli_document():
    report = engramlab.fuzz(seeds=4, first_seed=7, check_determinism=True)
    cli = subprocess.run([engramlab.cli_path, "fuzz", "--seeds", "4", "--seed", "7", "--check-determinism", "--json"],
                         capture_output=True, text=True)
    document = json.loads(cli.stdout)
    assert report["passed"] and report["failed_seeds"] == 0
    for key in ("first_seed", "seeds", "fault_sites", "outcomes", "failures", "passed"):
        assert report[key] == document[key], key
    with pytest.raises(engramlab.InvalidArgumentError, match="seeds: 0"):
        engramlab.fuzz(seeds=0)
