"""EngramTables on ranks without a GPU: the runtime built in a launched job
(torchrun's environment, engramlab's rendezvous), its host lookup bitwise
equal to reference_lookup, and its argument checks. A machine whose ranks
have a GPU runs test_engram_tables_gpu.py instead."""

import os
import subprocess
import sys

import numpy as np
import pytest

import engramlab
import tables_check
from conftest import FakeTensor


def gpu_visible():
    if not engramlab.has_cuda:
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = pytest.mark.skipif(gpu_visible(), reason="ranks here look up on their GPU: test_engram_tables_gpu.py")


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def test_one_rank_host_private_equals_the_reference(one_rank_job):
    fds_before = open_fds()
    with engramlab.EngramTables("tiny", cpu_offload=True, tokens_per_rank_max=64) as tables:
        assert (tables.placement, tables.device, tables.rank, tables.world_size) == ("host_private", "cpu", 0, 1)
        assert tables.layers == [1, 14] and tables.output_shape(5, layer=14) == (5, 4, 64)
        assert tables.facts["host_bytes"] > 0
        tables_check.check_host(tables, "tiny", 64, seed=1)
        # A CPU torch tensor works as numpy does, through DLPack.
        torch = pytest.importorskip("torch")
        ids = tables_check.lookup_ids("tiny", 1, 9, seed=3)
        out = torch.empty(tables.output_shape(9, 1), dtype=torch.bfloat16)
        tables.lookup(torch.from_numpy(ids), out, layer=1)
        want = engramlab.reference_lookup("tiny", 1, ids, dtype=torch.bfloat16)
        assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    assert open_fds() == fds_before  # sockets, segments and the rendezvous closed with the tables


def test_wrong_arguments_name_themselves(one_rank_job):
    with engramlab.EngramTables("tiny", cpu_offload=True, tokens_per_rank_max=16) as tables:
        ids = tables_check.lookup_ids("tiny", 1, 4, seed=0)
        out = np.zeros((4, 4, 64), dtype=np.uint16)
        with pytest.raises(TypeError, match=r"row_ids: dtype int32; give int64"):
            tables.lookup(ids.astype(np.int32), out, layer=1)
        with pytest.raises(TypeError, match=r"out: dtype float32; give bfloat16"):
            tables.lookup(ids, out.astype(np.float32), layer=1)
        with pytest.raises(ValueError, match=r"out: not contiguous"):
            tables.lookup(ids, np.zeros((4, 64, 4), dtype=np.uint16).transpose(0, 2, 1), layer=1)
        with pytest.raises(ValueError, match=r"row_ids: shape \(4, 3\); give \[tokens, 4\]"):
            tables.lookup(ids[:, :3].copy(), out, layer=1)
        with pytest.raises(ValueError, match=r"out: shape \(4, 4, 32\); give \[4, 4, 64\]"):
            tables.lookup(ids, out[:, :, :32].copy(), layer=1)
        with pytest.raises(ValueError, match=r"row_ids: a tensor on cuda:0, but this rank has no GPU"):
            tables.lookup(FakeTensor(2, 0), out, layer=1)
        with pytest.raises(ValueError, match=r"stream: this rank has no GPU"):
            tables.lookup(ids, out, 7, layer=1)
        with pytest.raises(TypeError, match=r"row_ids: a list, which is no tensor"):
            tables.lookup(ids.tolist(), out, layer=1)
        with pytest.raises(engramlab.InvalidArgumentError, match="layer: model tiny has 2 Engram layers"):
            tables.lookup(ids, out)
        big = tables_check.lookup_ids("tiny", 1, 17, seed=0)
        with pytest.raises(engramlab.InvalidArgumentError) as caught:  # more tokens than the DP slot
            tables.lookup(big, np.zeros((17, 4, 64), dtype=np.uint16), layer=1)
        assert caught.value.rank == 0
        tables_check.check_host(tables, "tiny", 16, seed=2)  # nothing refused changed the tables
    with pytest.raises(engramlab.FailedPreconditionError, match="closed"):
        tables.lookup(ids, out, layer=1)


def test_a_device_placement_without_a_gpu_is_refused_naming_why(one_rank_job):
    with pytest.raises(engramlab.Error) as caught:
        engramlab.EngramTables("tiny")
    error = caught.value
    assert (error.code, error.rank, error.step) == ("failed_precondition", 0, "start")
    assert "device_collective needs a GPU, and this rank has none; set cpu_offload: true" in error.message


@pytest.mark.parametrize("engine,placement", [("vllm", "host_head_sharded"), ("sglang", "sglang_shared")])
def test_an_engines_tables_write_minus_zero_as_that_engine_does(one_rank_job, engine, placement):
    # One rank: nothing sums rows, so vLLM and SGLang keep -0 (bf16 0x8000) where engramlab writes +0.
    with engramlab.EngramTables("tiny", cpu_offload=True, tokens_per_rank_max=64, engine=engine) as tables:
        assert tables.placement == placement and tables.facts["rows_summed"] is False
        for layer in tables.layers:
            ids = tables_check.lookup_ids("tiny", layer, 64, seed=layer)
            out = np.full(tables.output_shape(64, layer), 0xFFFF, dtype=np.uint16)
            tables.lookup(ids, out, layer=layer)
            want = engramlab.reference_lookup("tiny", layer, ids, engine=engine)
            np.testing.assert_array_equal(out, want)
            assert (out == 0x8000).any()
            assert not (engramlab.reference_lookup("tiny", layer, ids) == 0x8000).any()


def test_an_unknown_engine_variant_is_refused_naming_the_ones_that_exist(one_rank_job):
    with pytest.raises(engramlab.InvalidArgumentError, match=r"engine: 'nope' is not a variant of engine vllm.*"
                       r"sp-all-to-all"):
        engramlab.EngramTables("tiny", cpu_offload=True, engine="vllm+nope")


def test_outside_a_launched_job_it_says_how_to_start_one(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(engramlab.InvalidArgumentError, match="torchrun --nproc-per-node N"):
        engramlab.EngramTables("tiny", cpu_offload=True)


def test_two_ranks_share_one_host_table(repo):
    # Two processes under `engramlab launch` (torchrun's variables, its own token): DP 2 on one host shares one
    # /dev/shm copy of each table (host_shared), each rank looking up its own tokens.
    rank = repo / "tests/python/tables_rank.py"
    run = subprocess.run([engramlab.cli_path, "launch", "-n", "2", "--", sys.executable, str(rank), "--dp", "2",
                          "--cpu-offload", "--expect-placement", "host_shared"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert run.returncode == 0, run.stdout + run.stderr
    for r in (0, 1):
        for layer in (1, 14):
            assert f"rank {r}/2 on cpu: host_shared layer {layer} tokens 64: host lookup == reference_lookup" \
                in run.stdout, run.stdout


@pytest.mark.parametrize("flags,placement", [(["--dp", "2"], "host_shared")])
def test_an_idle_rank_beside_a_busy_one(repo, flags, placement):
    # The normal call of an idle DP rank: torch.zeros((0, heads), int64). It must take its part in the step, so
    # the busy rank beside it finishes too, bitwise. (TP ranks of one replica bring the same ids: no idle TP rank.)
    pytest.importorskip("torch")
    rank = repo / "tests/python/tables_rank.py"
    run = subprocess.run([engramlab.cli_path, "launch", "-n", "2", "--", sys.executable, str(rank), *flags,
                          "--cpu-offload", "--expect-placement", placement, "--step-tokens", "0,4"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert run.returncode == 0, run.stdout + run.stderr
    for r, tokens in ((0, 0), (1, 4)):
        for layer in (1, 14):
            assert f"rank {r}/2 on cpu: {placement} layer {layer} step of {tokens} tokens == reference_lookup" \
                in run.stdout, run.stdout


def test_an_empty_tensor_of_any_strides_is_a_step(one_rank_job):
    torch = pytest.importorskip("torch")
    with engramlab.EngramTables("tiny", cpu_offload=True, tokens_per_rank_max=16) as tables:
        # Strides (1, 1), as torch gives torch.zeros((0, 4)) through DLPack in the version: refused
        # before as not contiguous. And the plain one.
        empty_ids = (torch.empty_strided((0, 4), (1, 1), dtype=torch.int64), torch.zeros((0, 4), dtype=torch.int64))
        empty_outs = (torch.zeros((0, 4, 64), dtype=torch.bfloat16), torch.zeros((0, 256), dtype=torch.bfloat16),
                      torch.zeros((64, 4, 0), dtype=torch.bfloat16).permute(2, 1, 0))
        for ids in empty_ids:
            for out in empty_outs:
                tables.lookup(ids, out, layer=1)
        tables.lookup(np.zeros((0, 4), dtype=np.int64), np.zeros((0, 4, 64), dtype=np.uint16), layer=14)
        tables_check.check_host(tables, "tiny", 16, seed=4)  # and a busy step after the idle ones
