"""engramlab.plan: the same document as `engramlab plan --json`, and errors
as exceptions carrying code, message, rank, peer and step."""

import json
import subprocess

import pytest

import engramlab

DEP4 = {
    "hosts": [{"name": "gb200", "gpus": 4, "gpu_model": "GB200", "shm_size": "190GiB"}],
    "layout": {"tp": 1, "dp": 4},
    "config": {"cpu_offload": True},
}


def test_readme_example_places_host_shared():
    assert engramlab.plan(DEP4)["ranks"][0]["placement"] == "host_shared"


def test_dict_text_and_file_give_the_cli_document(repo):
    path = repo / "scenarios/deployments/dep4_gb200_shm190.yaml"
    from_file = engramlab.plan(path)
    assert engramlab.plan(str(path)) == from_file
    assert engramlab.plan(path.read_text()) == from_file
    cli = subprocess.run([engramlab.cli_path, "plan", "--file", str(path), "--json"], capture_output=True,
                         text=True, check=True)
    assert from_file == json.loads(cli.stdout)
    assert [r["placement"] for r in from_file["ranks"]] == ["host_shared"] * 4


def test_bad_field_is_an_invalid_argument_error_naming_it():
    with pytest.raises(engramlab.InvalidArgumentError) as caught:
        engramlab.plan({**DEP4, "layout": {"tp": 1, "dp": "four"}})
    error = caught.value
    assert isinstance(error, ValueError) and isinstance(error, engramlab.Error)
    assert error.code == "invalid_argument"
    assert "layout.dp" in error.message and "four" in error.message
    assert error.rank is None and error.peer is None and error.step is None


def test_tables_beyond_the_gpu_raise_with_the_plan_attached():
    # V4.1's 188.8 GiB of tables on one H100 rank: it cannot run.
    deployment = {"hosts": [{"name": "h100", "gpus": 1, "gpu_model": "H100"}], "layout": {"tp": 1, "dp": 1}}
    with pytest.raises(engramlab.ResourceExhaustedError) as caught:
        engramlab.plan(deployment)
    assert caught.value.code == "resource_exhausted"
    document = caught.value.document
    assert document["ranks"][0]["placement"] == "device_collective"
    assert document["error"]["code"] == "resource_exhausted"


def test_not_a_deployment_is_a_type_error():
    with pytest.raises(TypeError, match="deployment: a int"):
        engramlab.plan(42)
    with pytest.raises(TypeError, match=r"deployment\.hosts\[0\]\.gpus: a set"):
        engramlab.plan({"hosts": [{"gpus": {4}}]})


def test_missing_file_names_it(tmp_path):
    with pytest.raises(engramlab.Error) as caught:
        engramlab.plan(tmp_path / "nowhere.yaml")
    assert "nowhere.yaml" in str(caught.value)
