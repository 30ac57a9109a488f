"""Shared fixtures of the Python module's tests (tools/test.sh runs them
against the release build: PYTHONPATH=build/python)."""

import os
import pathlib
import socket
import uuid

import pytest

pytest_plugins = ["pytester"]  # test_pytest_plugin.py runs pytest on scenario folders of its own

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def repo():
    return REPO


@pytest.fixture
def one_rank_job(monkeypatch, tmp_path):
    """This process as rank 0 of a one-rank torchrun-style job: what
    EngramTables reads (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT, the job's token and id), its sockets under tmp_path.
    A job of one rank never listens on MASTER_PORT (its collectives need no
    rendezvous), so the port only has to be a valid one: a socket bound to
    it stays open for the test, so no port is picked and then released."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.setenv(name, "1" if "WORLD" in name else "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    monkeypatch.setenv("MASTER_PORT", str(held.getsockname()[1]))
    monkeypatch.setenv("ENGRAMLAB_JOB_TOKEN", uuid.uuid4().hex)
    monkeypatch.setenv("ENGRAMLAB_JOB_ID", "pytest-" + uuid.uuid4().hex[:12])
    monkeypatch.setenv("ENGRAMLAB_SOCKET_DIR", str(tmp_path / "sockets"))
    for name in ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "ENGRAMLAB_MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with held:
        yield os.environ


class FakeTensor:
    """A tensor as DLPack shows it, on any device: for the device checks a
    machine without that device cannot make a real tensor for."""

    def __init__(self, device_type, device_id):
        self.device = f"device {device_type}:{device_id}"
        self._device = (device_type, device_id)

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, stream=None):
        raise AssertionError("the device check must refuse this tensor before taking it")
