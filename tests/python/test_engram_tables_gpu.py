"""EngramTables on a GPU: torch CUDA tensors through the runtime's device
lookup, eager and captured in a torch.cuda.CUDAGraph, bitwise equal to
reference_lookup, for each placement one GPU holds: one rank each of
device_collective, device_peer and host_private, then two ranks sharing the
GPU under torchrun (--ranks-per-gpu, as `engramlab acceptance` runs them) on
device_peer and host_shared. Skipped, saying so, without a GPU.
tools/gpu_python.sh runs it on the GPU machine."""

import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

import engramlab
import tables_check
from conftest import FakeTensor


def gpu_missing():
    if not engramlab.has_cuda:
        return "this engramlab is built without the CUDA backend"
    try:
        import torch
    except ImportError:
        return "no torch"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    return None


pytestmark = pytest.mark.skipif(gpu_missing() is not None, reason=f"needs a GPU: {gpu_missing()}")

ONE_RANK = {
    "device_collective": {},
    "device_peer": {"peer_shards": True},
    "host_private": {"cpu_offload": True},
}


@pytest.mark.parametrize("placement", ONE_RANK)
def test_one_rank_eager_and_graph_equal_the_reference(one_rank_job, placement):
    with engramlab.EngramTables("tiny", tokens_per_rank_max=4096, **ONE_RANK[placement]) as tables:
        assert tables.placement == placement, tables.facts["reason"]
        assert tables.device == "cuda:0"
        for tokens in (1, 64, 4096):
            for line in tables_check.check_gpu(tables, "tiny", tokens, seed=tokens):
                print(line)


def test_wrong_tensors_name_the_argument(one_rank_job):
    import torch

    with engramlab.EngramTables("tiny", peer_shards=True, tokens_per_rank_max=16) as tables:
        ids_host = tables_check.lookup_ids("tiny", 1, 8, seed=0)
        ids = torch.from_numpy(ids_host).cuda()
        out = torch.empty((8, 4, 64), dtype=torch.bfloat16, device="cuda")
        with pytest.raises(ValueError, match=r"row_ids: a tensor on cpu, but this rank looks up on its GPU cuda:0"):
            tables.lookup(ids.cpu(), out, layer=1)
        with pytest.raises(ValueError, match=r"out: a tensor on cpu, but this rank looks up on its GPU cuda:0"):
            tables.lookup(ids, out.cpu(), layer=1)
        with pytest.raises(ValueError, match=r"row_ids: a tensor on cuda:1, but this rank looks up on its GPU cuda:0"):
            tables.lookup(FakeTensor(2, 1), out, layer=1)
        with pytest.raises(TypeError, match=r"row_ids: dtype int32; give int64"):
            tables.lookup(ids.int(), out, layer=1)
        with pytest.raises(TypeError, match=r"out: dtype float32"):
            tables.lookup(ids, out.float(), layer=1)
        with pytest.raises(ValueError, match=r"out: not contiguous"):
            tables.lookup(ids, torch.empty((8, 64, 4), dtype=torch.bfloat16, device="cuda").transpose(1, 2), layer=1)
        with pytest.raises(TypeError, match=r"stream: a str"):
            tables.lookup(ids, out, "default", layer=1)
        # None of it changed anything: a lookup on an explicit stream still equals the reference.
        stream = torch.cuda.Stream()
        tables.lookup(ids, out, stream, layer=1)
        stream.synchronize()
        assert np.array_equal(tables_check.bits(out), engramlab.reference_lookup("tiny", 1, ids_host))


@pytest.mark.parametrize("placement,flags", [
    ("device_peer", ["--tp", "2", "--peer-shards"]),
    ("host_shared", ["--dp", "2", "--cpu-offload"]),
])
def test_two_ranks_sharing_the_gpu_under_torchrun(repo, placement, flags):
    env = dict(os.environ, ENGRAMLAB_JOB_TOKEN=uuid.uuid4().hex, ENGRAMLAB_JOB_ID="pytest-" + uuid.uuid4().hex[:12])
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(repo / "tests/python/tables_rank.py"), "--ranks-per-gpu", "2", "--tokens", "1024",
               "--expect-placement", placement, *flags]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    print(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
    for r in (0, 1):
        for layer in (1, 14):
            assert (f"rank {r}/2 on cuda:0: {placement} layer {layer} tokens 1024: eager and CUDA graph replay == "
                    f"reference_lookup") in run.stdout


@pytest.mark.parametrize("placement,flags", [
    ("device_peer", ["--tp", "2", "--peer-shards"]),
    ("host_shared", ["--dp", "2", "--cpu-offload"]),
])
def test_an_idle_rank_beside_a_busy_one_on_the_gpu(repo, placement, flags):
    # An idle rank's CUDA step, torch.zeros((0, heads), int64) (strides (1, 1)), beside a 4-token rank under
    # `engramlab launch -n 2`, both ranks on one GPU: both finish, bitwise.
    rank = repo / "tests/python/tables_rank.py"
    run = subprocess.run([engramlab.cli_path, "launch", "-n", "2", "--", sys.executable, str(rank), "--ranks-per-gpu",
                          "2", "--expect-placement", placement, "--step-tokens", "0,4", *flags],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert run.returncode == 0, run.stdout + run.stderr
    for r, tokens in ((0, 0), (1, 4)):
        for layer in (1, 14):
            assert f"rank {r}/2 on cuda:0: {placement} layer {layer} step of {tokens} tokens == reference_lookup" \
                in run.stdout, run.stdout
