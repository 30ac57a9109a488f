"""The seed's exchange through ctypes over several processes, as a program
using the CUDA driver's VMM API (cuda-python, an engine's own exchange) would
run it on an emulated rack: `engramlab launch --emulate-driver` starts the
ranks of two GB300 nodes of one NVLink domain, each exports a FABRIC handle,
gathers the others', imports, maps and reads every peer's shard."""

import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
ENGRAMLAB = BUILD / "apps" / "engramlab"
EMULATED = BUILD / "emulated_driver" / "lib" / "libcuda.so.1"


@pytest.mark.skipif(not EMULATED.exists() or not ENGRAMLAB.exists(),
                    reason="the emulated CUDA driver or engramlab is not built in build/")
def test_fabric_exchange_through_ctypes_on_two_emulated_gb300_nodes(tmp_path):
    deployment = tmp_path / "rack.yaml"
    deployment.write_text(
        "hosts:\n"
        "  - {name: gb300, count: 2, gpus: 2, gpu_model: GB300, nvlink_domain: nvl72-a,"
        " imex_channel: true, fabric_attribute: true}\n"
        "layout: {tp: 4, dp: 1}\n")
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    run = subprocess.run(
        [str(ENGRAMLAB), "launch", "--emulate-driver", str(deployment), "--", sys.executable,
         str(REPO / "tests" / "python" / "emulated_vmm_rank.py"), str(exchange)],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("read 3 peers' shards through FABRIC handles: OK") == 4, run.stdout + run.stderr
