"""The oracle against rules written here from their descriptions, not from
engramlab's C++: hash ids against tests/numpy_hash_reference.py (numpy, after
the Engram reference), and reference_lookup against a numpy decoder of the
stored rows (table_rows) under each engine's scale-byte rule
(docs/design.md sections 1, 4 and 9)."""

import sys

import numpy as np
import pytest

import engramlab

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import numpy_hash_reference as ref  # noqa: E402  (tests/, beside the C++ tests that read it)


def tiny_sequence(rng, length, pad):
    x = rng.integers(0, 640, size=length, dtype=np.int64)
    pick = rng.random(length)
    x[pick < 0.12] = -1
    x[(pick >= 0.12) & (pick < 0.17)] = pad
    return x


@pytest.mark.parametrize("rule", ["barrier", "barrier_no_row", "literal"])
def test_hash_ids_equal_the_numpy_reference(rule):
    info = engramlab.model_info("tiny", dead_tokens=rule)
    rng = np.random.default_rng(28)
    layers = [t["layer"] for t in info["tables"]]
    primes = ref.layer_primes(1000, len(layers), 3, 2)  # tiny.yaml: engram vocab 1000, orders 2 and 3, 2 heads each
    for i, table in enumerate(info["tables"]):
        assert table["primes"] == primes[i]
        mults = ref.multipliers(info["hash_seed"], table["layer"], info["compressed_vocab_size"], 3)
        assert table["multipliers"] == mults.tolist()
        for length in (1, 2, 7, 300):
            x = tiny_sequence(rng, length, info["pad_id"])
            want = ref.row_ids(x[None, :], rule, info["pad_id"], mults, primes[i], 2)
            got = engramlab.hash_ids(x, "tiny", table["layer"], dead_tokens=rule)
            assert got.dtype == np.int64 and got.shape == (length, 4)
            np.testing.assert_array_equal(got, want)


def test_sequence_starts_hash_each_sequence_alone():
    rng = np.random.default_rng(5)
    a, b = tiny_sequence(rng, 9, 2), tiny_sequence(rng, 6, 2)
    starts = np.zeros(15, dtype=bool)
    starts[9] = True
    both = engramlab.hash_ids(np.concatenate([a, b]), "tiny", 14, sequence_starts=starts)
    np.testing.assert_array_equal(both[:9], engramlab.hash_ids(a, "tiny", 14))
    np.testing.assert_array_equal(both[9:], engramlab.hash_ids(b, "tiny", 14))


# --- the dequantisation rule, from its description ---

def e4m3_to_float32(codes):
    codes = codes.astype(np.int32)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> 3) & 0xF
    mantissa = codes & 0x7
    value = np.where(exponent == 0, mantissa / 8.0 * 2.0**-6, (1 + mantissa / 8.0) * 2.0 ** (exponent - 7.0))
    value = np.where((exponent == 15) & (mantissa == 7), np.nan, value)  # e4m3fn: no infinity, one NaN code
    return (sign * value).astype(np.float32)


def ue8m0_to_float32(scales, engine):
    scales = scales.astype(np.int64)
    with np.errstate(all="ignore"):
        value = np.ldexp(np.float32(1.0), (scales - 127).astype(np.int32)).astype(np.float32)
    if engine == "sglang+torch-fallback":  # torch.float8_e8m0fnu: 0 is 2^-127, 255 NaN
        return np.where(scales == 255, np.float32(np.nan), value).astype(np.float32)
    if engine == "sglang":  # its CUDA engram_gather: 0 is 2^-127, 255 the exponent bits' +inf
        return np.where(scales == 255, np.float32(np.inf), value).astype(np.float32)
    # vLLM: the byte put into a float's exponent bits: 0 is +0, 255 +inf
    return np.where(scales == 0, np.float32(0), np.where(scales == 255, np.float32(np.inf), value)).astype(np.float32)


def float32_to_bf16_bits(values, nan_sign):
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    return np.where(nan, (0x7FC0 | nan_sign).astype(np.uint16), rounded)


def lookup_rule(bits, keep_minus_zero=False):
    """-0 written as +0 (the collective's sum) unless the engine keeps it, NaN canonical with its sign."""
    if not keep_minus_zero:
        bits = np.where(bits == 0x8000, 0, bits)
    nan = ((bits & 0x7F80) == 0x7F80) & ((bits & 0x7F) != 0)
    return np.where(nan, 0x7FC0 | (bits & 0x8000), bits).astype(np.uint16)


def decode_fp8_rows(rows, dim, engine, keep_minus_zero=False):
    codes, scales = rows[:, :dim], rows[:, dim:]
    with np.errstate(all="ignore"):  # 2^128 is +inf, and 0 x inf NaN, on purpose
        products = e4m3_to_float32(codes) * np.repeat(ue8m0_to_float32(scales, engine), 32, axis=1)
    sign = ((codes.astype(np.uint16) & 0x80) << 8).astype(np.uint16)
    return lookup_rule(float32_to_bf16_bits(products.astype(np.float32), sign), keep_minus_zero)


def decode_bf16_rows(rows, dim):
    return lookup_rule(rows.view(np.uint16).reshape(len(rows), dim))


@pytest.mark.parametrize("engine", ["engramlab", "vllm", "sglang", "sglang+torch-fallback"])
def test_reference_lookup_equals_the_rule_on_every_row(engine):
    info = engramlab.model_info("tiny")
    for table in info["tables"]:
        rows = engramlab.table_rows("tiny", table["layer"], 0, table["rows"])
        # vLLM never sums a row and SGLang's reference path (tp 1) does not either: -0 stays -0.
        want = decode_fp8_rows(rows, table["dim"], engine if engine.startswith("sglang") else "vllm",
                               keep_minus_zero=engine != "engramlab")
        got = engramlab.reference_lookup("tiny", table["layer"], np.arange(table["rows"], dtype=np.int64),
                                         engine=engine)
        assert got.dtype == np.uint16 and got.shape == (table["rows"], table["dim"])
        np.testing.assert_array_equal(got, want)


def test_the_docstring_says_a_nans_sign_follows_its_byte():
    # Issue 48: it said "NaN canonical", which the rows above disprove (the sign follows the FP8 byte).
    doc = engramlab._engramlab.reference_lookup.__doc__
    assert "NaN canonical" not in doc
    assert "0x7fc0 carrying its FP8 byte's sign" in " ".join(doc.split())


def test_the_rows_hold_what_the_engines_disagree_on():
    # The fill writes scale bytes 0 and 255 and -0 / NaN codes (core/model/table_fill.h): the two rules must
    # differ on exactly the blocks of those scales, or the test above checks nothing of the difference.
    rows = engramlab.table_rows("tiny", 1, 0, 1006)
    scales = rows[:, 64:]
    assert (scales == 0).any() and (scales == 255).any()
    ids = np.arange(1006, dtype=np.int64)
    vllm = engramlab.reference_lookup("tiny", 1, ids, engine="vllm")
    sglang = engramlab.reference_lookup("tiny", 1, ids, engine="sglang")
    differs = (vllm != sglang).reshape(1006, 2, 32).any(axis=2)
    assert differs.any()
    # SGLang's CUDA kernel and vLLM read byte 255 alike (+inf): they differ on byte 0 only.
    assert not differs[scales != 0].any()
    torch_fallback = engramlab.reference_lookup("tiny", 1, ids, engine="sglang+torch-fallback")
    assert (torch_fallback != sglang).reshape(1006, 2, 32).any(axis=2)[scales == 255].any()
    # -0: vLLM keeps it, engramlab writes +0, SGLang's summed (all-reduce) path makes it +0.
    assert (vllm == 0x8000).sum() > 0
    assert (engramlab.reference_lookup("tiny", 1, ids) == 0x8000).sum() == 0
    assert (engramlab.reference_lookup("tiny", 1, ids, engine="sglang", summed=True) == 0x8000).sum() == 0


@pytest.mark.parametrize("engine,kept,kept_summed", [("engramlab", False, False), ("vllm", True, True),
                                                      ("sglang", True, False)])
def test_summed_loses_minus_zero_only_where_the_engine_sums(engine, kept, kept_summed):
    # vLLM never sums rows, so a lookup that combines its group's rows keeps -0 too; SGLang's all-reduce adds +0.
    ids = np.arange(1006, dtype=np.int64)
    plain = engramlab.reference_lookup("tiny", 1, ids, engine=engine)
    summed = engramlab.reference_lookup("tiny", 1, ids, engine=engine, summed=True)
    assert (plain == 0x8000).any() == kept
    assert (summed == 0x8000).any() == kept_summed
    # -0 is all they differ in.
    np.testing.assert_array_equal(np.where(plain == 0x8000, 0, plain), np.where(summed == 0x8000, 0, summed))


def test_bf16_rows_and_dead_and_out_of_table_ids():
    info = engramlab.model_info("example-3x16-bf16")
    table = info["tables"][0]
    ids = np.array([0, -1, table["rows"], 5], dtype=np.int64)  # flat: [n, heads] takes one id per head
    got = engramlab.reference_lookup("example-3x16-bf16", table["layer"], ids)
    assert got.shape == (4, table["dim"])
    assert not got[1].any() and not got[2].any()  # DEAD and past the table: zero rows
    rows = engramlab.table_rows("example-3x16-bf16", table["layer"], 0, 6)
    np.testing.assert_array_equal(got[0], decode_bf16_rows(rows[0:1], table["dim"])[0])
    np.testing.assert_array_equal(got[3], decode_bf16_rows(rows[5:6], table["dim"])[0])


def test_reference_lookup_as_torch_bfloat16():
    torch = pytest.importorskip("torch")
    ids = np.arange(10, dtype=np.int64)
    bits = engramlab.reference_lookup("tiny", 14, ids)
    tensor = engramlab.reference_lookup("tiny", 14, ids, dtype=torch.bfloat16)
    assert tensor.dtype == torch.bfloat16 and tuple(tensor.shape) == bits.shape
    assert np.array_equal(tensor.view(torch.int16).numpy().view(np.uint16), bits)


@pytest.mark.parametrize("call", [
    lambda ids: engramlab.reference_lookup("tiny", 1, ids),
    lambda ids: engramlab.hash_ids(ids, "tiny", 1),
])
def test_int32_ids_are_a_type_error_naming_the_argument(call):
    with pytest.raises(TypeError, match=r"(row_ids|tokens): dtype int32; give int64"):
        call(np.zeros(4, dtype=np.int32))


def test_wrong_shapes_values_and_devices_name_the_argument():
    with pytest.raises(ValueError, match=r"row_ids: 3 dimension\(s\)"):
        engramlab.reference_lookup("tiny", 1, np.zeros((2, 2, 2), dtype=np.int64))
    with pytest.raises(TypeError, match="row_ids: a str"):
        engramlab.reference_lookup("tiny", 1, "0,1")
    with pytest.raises(engramlab.InvalidArgumentError, match="layer: 3 is not an Engram layer of model tiny; its "
                                                             "layers are 1 and 14"):
        engramlab.reference_lookup("tiny", 3, [0])
    with pytest.raises(engramlab.InvalidArgumentError, match="engine: 'trtllm'"):
        engramlab.reference_lookup("tiny", 1, [0], engine="trtllm")
    with pytest.raises(engramlab.InvalidArgumentError, match=r"token 0 has id 640, outside the compressed"):
        engramlab.hash_ids(np.array([640], dtype=np.int64), "tiny", 1)
    with pytest.raises(engramlab.InvalidArgumentError, match=r"rows \[4000, 4100\) are not inside"):
        engramlab.table_rows("tiny", 1, 4000, 100)  # layer 1 has 4,062 rows
    from conftest import FakeTensor
    with pytest.raises(ValueError, match="row_ids: a tensor on device 2:0"):
        engramlab.reference_lookup("tiny", 1, FakeTensor(2, 0))


def test_the_v41_reference_needs_no_table_in_memory():
    # Rows of the real 94 GiB table, each filled alone.
    info = engramlab.model_info("deepseek-v4.1-flash")
    last = info["tables"][1]["rows"] - 1
    got = engramlab.reference_lookup("deepseek-v4.1-flash", 14, [0, last, last + 1])
    rows = np.concatenate([engramlab.table_rows("deepseek-v4.1-flash", 14, 0, 1),
                           engramlab.table_rows("deepseek-v4.1-flash", 14, last, 1)])
    np.testing.assert_array_equal(got[:2], decode_fp8_rows(rows, 256, "vllm"))
    assert not got[2].any()


def test_reference_lookup_refuses_ids_of_another_head_count():
    heads = engramlab.model_info("tiny")["tables"][0]["heads"]
    layer = engramlab.model_info("tiny")["tables"][0]["layer"]
    ids = np.zeros((16, heads + 1), dtype=np.int64)
    with pytest.raises(ValueError, match=rf"row_ids: shape \[16, {heads + 1}\], but layer {layer} has {heads} heads"):
        engramlab.reference_lookup("tiny", layer, ids)
    assert engramlab.reference_lookup("tiny", layer, np.zeros((16, heads), dtype=np.int64)).shape[:2] == (16, heads)
