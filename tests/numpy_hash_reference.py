#!/usr/bin/env python3
"""Reference vectors for tests/hashing_numpy_test.cc, computed with numpy.

The hash follows NgramHashMapping in deepseek-ai/Engram engram_demo_v1.py
(multipliers from numpy's default_rng(seed + 10007 * layer_id), the shifted
windows padded with the pad id, the XOR mix, numpy's % per head, the per-head
offsets MultiHeadEmbedding adds), and the DEAD-token rule the engines add to it
(vLLM's _hash_ids_kernel, SGLang's EngramHasher.forward: a DEAD token and every
position before it read the pad id). It is written from those descriptions, not
from engramlab's C++, so the two can disagree.

Prints one record per line on stdout (numbers in decimal, space separated):
  seedseq ENTROPY W0..W7             SeedSequence(ENTROPY).generate_state(8)
  pcg ENTROPY STATE INC R0..R3       PCG64(ENTROPY): state, increment, random_raw(4)
  draws METHOD ENTROPY N (LOW HIGH COUNT V..)xN
                                     one generator, N calls in turn: Generator
                                     .integers (lemire) or RandomState.randint
                                     (masked), dtype int64
  case NAME ENGRAM_VOCAB MAX_NGRAM HEADS COMPRESSED_VOCAB PAD SEED LAYER,LAYER..
  primes LAYER_INDEX P..             (then the case's records:)
  mult LAYER_INDEX M..
  seq INDEX T..                      compressed ids, -1 = DEAD
  ids RULE LAYER_INDEX SEQ_INDEX ROW..   [token][head] row ids
  end
"""

import sys

import numpy as np

INT64_MAX = int(np.iinfo(np.int64).max)
DEAD = -1


def is_prime(n):
    # Deterministic Miller-Rabin for n < 3.3e24.
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    for p in small:
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def find_next_prime(start, seen):
    candidate = start + 1
    while not is_prime(candidate) or candidate in seen:
        candidate += 1
    return candidate


def layer_primes(engram_vocab_size, layer_count, max_ngram, heads):
    """calculate_vocab_size_across_layers with one table size for every order."""
    seen, out = set(), []
    for _ in range(layer_count):
        per_layer = []
        for _ in range(2, max_ngram + 1):
            current = engram_vocab_size - 1
            for _ in range(heads):
                current = find_next_prime(current, seen)
                seen.add(current)
                per_layer.append(current)
        out.append(per_layer)
    return out


def multipliers(seed, layer_id, compressed_vocab, max_ngram):
    half_bound = max(1, (INT64_MAX // compressed_vocab) // 2)
    g = np.random.default_rng(int(seed + 10007 * int(layer_id)))
    r = g.integers(low=0, high=half_bound, size=(max_ngram,), dtype=np.int64)
    return r * 2 + 1


def shifted(x, k, pad):
    if k == 0:
        return x
    return np.pad(x, ((0, 0), (k, 0)), mode="constant", constant_values=pad)[:, : x.shape[1]]


def windows(x, rule, pad, max_ngram):
    """The max_ngram lookback columns of a [1, T] batch, DEAD handled by `rule`."""
    if rule == "literal":
        return [shifted(x, k, pad) for k in range(max_ngram)]
    positions = np.arange(x.shape[1])[None, :]
    blocked = np.zeros(x.shape, dtype=bool)
    out = []
    for k in range(max_ngram):
        source = shifted(x, k, DEAD)  # before the start: blocked below anyway
        blocked = blocked | (positions < k) | (source == DEAD)
        out.append(np.where(blocked, pad, source))
    return out


def row_ids(x, rule, pad, mults, primes, heads):
    max_ngram = len(mults)
    tokens = windows(x, rule, pad, max_ngram)
    columns = []
    for n in range(2, max_ngram + 1):
        mix = tokens[0] * mults[0]
        for k in range(1, n):
            mix = np.bitwise_xor(mix, tokens[k] * mults[k])
        for j in range(heads):
            columns.append((mix % int(primes[(n - 2) * heads + j])).astype(np.int64, copy=False))
    hashes = np.stack(columns, axis=2)[0]  # [T, heads]
    offsets = np.cumsum([0] + list(primes[:-1])).astype(np.int64)
    rows = hashes + offsets
    if rule == "barrier_no_row":
        rows[x[0] == DEAD] = DEAD
    return rows


def line(*parts):
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")


def emit_generator_records():
    for entropy in (0, 1, 7, 10007, 140_097, 2**32 - 1, 2**32, 2**64 - 1, 2**64 + 10007 * 29, 2**96 + 5):
        line("seedseq", entropy, *np.random.SeedSequence(entropy).generate_state(8).tolist())
        bit_generator = np.random.PCG64(entropy)
        state = bit_generator.state["state"]
        line("pcg", entropy, state["state"], state["inc"], *bit_generator.random_raw(4).tolist())
    # Bounds across every branch: one value (draws nothing), 32-bit ranges
    # (two values per 64-bit draw), exactly 2^32 values (raw 32-bit draws),
    # 64-bit ranges, with and without a buffered half left between calls.
    calls = [(0, 1, 3), (0, 10, 5), (-5, 7, 3), (0, 2**32 - 1, 3), (0, 2**32, 4), (0, 2**32 + 1, 3),
             (0, 2**40 + 12345, 5), (0, 7, 1), (0, 2**62 + 1, 4), (-(2**63), 2**63 - 1, 3),
             (0, 3 * 2**61, 6), (10, 11, 2), (0, 46_542_455_532_843_487, 4), (0, 5, 1)]
    for method in ("lemire", "masked"):
        for entropy in (0, 3, 20_014, 987_654_321_987):
            if method == "lemire":
                g = np.random.default_rng(entropy)
                draw = lambda lo, hi, n: g.integers(lo, hi, size=n, dtype=np.int64)
            else:
                g = np.random.RandomState(np.random.PCG64(entropy))
                draw = lambda lo, hi, n: g.randint(lo, hi, size=n, dtype=np.int64)
            parts = []
            for lo, hi, n in calls:
                parts += [lo, hi, n] + draw(lo, hi, n).tolist()
            line("draws", method, entropy, len(calls), *parts)


def emit_case(data_rng, name, engram_vocab, max_ngram, heads, compressed_vocab, pad, seed, layers,
              sequence_count, length_max):
    line("case", name, engram_vocab, max_ngram, heads, compressed_vocab, pad, seed, ",".join(map(str, layers)))
    primes = layer_primes(engram_vocab, len(layers), max_ngram, heads)
    mults = [multipliers(seed, layer, compressed_vocab, max_ngram) for layer in layers]
    for i in range(len(layers)):
        line("primes", i, *primes[i])
        line("mult", i, *mults[i].tolist())
    for s in range(sequence_count):
        length = int(data_rng.integers(1, length_max + 1))
        x = data_rng.integers(0, compressed_vocab, size=length, dtype=np.int64)
        pick = data_rng.random(length)
        x[pick < 0.12] = DEAD
        x[(pick >= 0.12) & (pick < 0.17)] = pad  # the pad id is a token too
        if s % 5 == 4:
            x[: max(1, length // 3)] = DEAD  # a run of DEAD (an image span)
        line("seq", s, *x.tolist())
        batch = x[None, :]
        for rule in ("barrier", "barrier_no_row", "literal"):
            for i in range(len(layers)):
                line("ids", rule, i, s, *row_ids(batch, rule, pad, mults[i], primes[i], heads).reshape(-1).tolist())
    line("end")


def main():
    emit_generator_records()
    data_rng = np.random.default_rng(20_251_216)
    # DeepSeek-V4.1-Flash's sizes (see table_spec.cc for the sources), the
    # engines' seed 0 and two others, its layer ids and others.
    emit_case(data_rng, "v41", 16_000_000, 4, 8, 99_092, 2, 0, (1, 14), 16, 160)
    emit_case(data_rng, "v41_seed_7", 16_000_000, 4, 8, 99_092, 2, 7, (1, 14), 8, 120)
    emit_case(data_rng, "v41_layers", 16_000_000, 4, 8, 99_092, 99_091, 2**64 - 1, (0, 5, 29), 8, 120)
    # Small sizes, and token spaces that reach the draw's branches: a 64-bit
    # range (most), 32-bit ranges (2^31 ids; 2^30 ids, the widest short of
    # 2^32 values, which no vocabulary size gives: the draws records cover
    # it), one value (2^62 ids: every multiplier is 1).
    small = [
        ("tiny", 1000, 3, 2, 640, 2, 0x7179, (1, 14)),
        ("small_a", 37, 2, 1, 7, 0, 0, (0,)),
        ("small_b", 100, 5, 3, 50, 49, 12_345, (3, 4)),
        ("small_c", 5, 4, 4, 1, 0, 1, (2,)),
        ("vocab_2_31", 1000, 4, 2, 2**31, 12, 99, (1, 2)),
        ("vocab_2_30", 1000, 4, 2, 2**30, 5, 3, (1,)),
        ("vocab_2_62", 300, 3, 2, 2**62, 7, 5, (6,)),
    ]
    for name, engram_vocab, max_ngram, heads, compressed_vocab, pad, seed, layers in small:
        emit_case(data_rng, name, engram_vocab, max_ngram, heads, compressed_vocab, pad, seed, layers, 12, 40)


if __name__ == "__main__":
    main()
