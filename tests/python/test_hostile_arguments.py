"""Issue 50, item 16: the module against what a hostile or careless caller
passes. An edited model file is seen by the same process; a str with a lone
surrogate is a ValueError naming the argument; an unreadable file= path is an
engramlab error (a FIFO does not hang, a directory is named as one); plan('')
speaks of its argument, not of the CLI's --file; NaN for a count says so."""

import math
import os

import pytest

import engramlab

TINY = (
    "name: edited\n"
    "tables: {{layers: [1, 14], orders: [2, 3], heads_per_order: {heads}, engram_vocab_size: 1000, dim: 64, "
    "row_format: fp8_e4m3_ue8m0}}\n"
    "hashing: {{compressed_vocab_size: 640, pad_id: 2, dead_tokens: barrier, seed: 0x7179}}\n"
)


def test_an_edited_model_file_is_seen_by_the_same_process(tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text(TINY.format(heads=2))
    assert len(engramlab.model_info(str(path))["tables"][0]["primes"]) == 4
    path.write_text(TINY.format(heads=3) + "# edited\n")
    assert len(engramlab.model_info(str(path))["tables"][0]["primes"]) == 6


def test_a_lone_surrogate_names_the_argument():
    with pytest.raises(ValueError) as caught:
        engramlab.model_info("bad\udcff\ud800.yaml")
    assert "model" in str(caught.value) and "surrogate" in str(caught.value)
    with pytest.raises(ValueError) as caught:
        engramlab.plan({"hosts": [{"name": "a\ud800", "gpus": 1}], "layout": {"tp": 1}})
    assert "hosts[0].name" in str(caught.value) and "surrogate" in str(caught.value)


# fuzz runs on the emulator: a build without it (the GPU machines') says so
# first, whatever the file (test_fuzz_without_the_emulator_says_so).
@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.skipif(not engramlab.has_emulator, reason="this build has no emulator (fuzz)")
def test_unreadable_fuzz_files_raise_engramlab_errors(tmp_path, fifo):
    with pytest.raises(engramlab.InvalidArgumentError) as caught:
        engramlab.fuzz(1, file=str(fifo))
    assert "is a FIFO, not a regular file" in caught.value.message
    with pytest.raises(engramlab.InvalidArgumentError) as caught:
        engramlab.fuzz(1, file=str(tmp_path))
    assert "is a directory" in caught.value.message


@pytest.mark.skipif(engramlab.has_emulator, reason="this build has the emulator (test_unreadable_fuzz_files_...)")
def test_fuzz_without_the_emulator_says_so(fifo):
    with pytest.raises(engramlab.FailedPreconditionError) as caught:
        engramlab.fuzz(1, file=str(fifo))
    assert "built without it (-DENGRAM_BUILD_EMULATOR=OFF)" in caught.value.message


def test_an_unreadable_plan_file_raises_an_engramlab_error(tmp_path):
    with pytest.raises(engramlab.InvalidArgumentError) as caught:
        engramlab.plan(str(tmp_path / "missing.yaml"))
    assert caught.value.message.startswith("deployment: cannot read")


def test_an_empty_str_plan_speaks_of_its_argument():
    with pytest.raises(engramlab.InvalidArgumentError) as caught:
        engramlab.plan("")
    assert "--file" not in caught.value.message
    assert caught.value.message.startswith("deployment: an empty str")


def test_nan_for_a_count_says_nan():
    with pytest.raises(ValueError) as caught:
        engramlab.plan({"hosts": [{"name": "a", "gpus": math.nan}], "layout": {"tp": 1}})
    assert "hosts[0].gpus" in str(caught.value) and "nan" in str(caught.value)
    assert "found nothing" not in str(caught.value)
