"""engramlab.RequestHasher from Python: however the steps cut a sequence
(prefill chunks, decode tokens, a cached prefix, lookback ids handed over,
verify blocks with rejected drafts, idle slots, padding), the ids equal
hash_ids over each accepted sequence whole (docs/design.md section 10)."""

import numpy as np
import pytest

import engramlab

MODEL, LAYER = "tiny", 14


def whole(sequence):
    return engramlab.hash_ids(np.asarray(sequence, dtype=np.int64), MODEL, LAYER)


def draw_tokens(rng, n):
    x = rng.integers(0, 640, size=n, dtype=np.int64)
    x[rng.random(n) < 0.1] = -1  # DEAD: image tokens block the lookback
    return x


def test_random_schedules_equal_whole_sequences():
    rng = np.random.default_rng(2025)
    slots = 4
    hasher = engramlab.RequestHasher(MODEL, LAYER, slots)
    assert hasher.heads == 4 and hasher.history_length == 2 and hasher.slots == slots
    for _ in range(40):
        # Each slot: a prefix that may be cached (handed to begin), then steps.
        accepted = {}
        for slot in range(slots):
            # A cached prefix (or lookback ids handed over), or a fresh sequence.
            prefix = draw_tokens(rng, int(rng.integers(0, 6)))
            hasher.begin(slot, prefix if len(prefix) else None)
            accepted[slot] = list(prefix)
        for step in range(int(rng.integers(1, 6))):
            tokens, runs = [], []
            for slot in range(slots):
                kind = rng.integers(0, 4)
                if kind == 3:
                    continue  # this slot sits the step out
                count = int(rng.integers(1, 5))  # a chunk or a decode token; on odd steps a verify block
                runs.append((slot, len(tokens), count))
                tokens.extend(draw_tokens(rng, count))
                if rng.integers(0, 3) == 0:
                    tokens.append(int(rng.integers(0, 640)))  # padding no run covers
            if rng.integers(0, 4) == 0:
                runs.append((-1, len(tokens), 2))  # an idle DP slot
                tokens.extend([5, 6])
            tokens = np.asarray(tokens, dtype=np.int64)
            rows = (hasher.verify if step % 2 == 1 else hasher.extend)(tokens, np.asarray(runs, dtype=np.int64)
                                                                       if runs else [])
            covered = np.zeros(len(tokens), dtype=bool)
            commits = []
            for slot, first, count in runs:
                covered[first:first + count] = True
                if slot < 0:
                    continue
                block = tokens[first:first + count]
                want = whole(accepted[slot] + list(block))[len(accepted[slot]):]
                np.testing.assert_array_equal(rows[first:first + count], want)
                if step % 2 == 1:
                    kept = int(rng.integers(0, count))  # accepted drafts after the anchor
                    commits.append((slot, kept))
                    accepted[slot].extend(block[:1 + kept])
                else:
                    accepted[slot].extend(block)
            # Padding and idle slots hash to DEAD for every head, never row 0.
            assert (rows[~covered] == -1).all()
            if commits:
                hasher.commit(np.asarray(commits, dtype=np.int64))
        for slot in range(slots):
            hasher.release(slot)
            assert hasher.state(slot) == "free"


def test_a_refused_step_changes_no_history():
    hasher = engramlab.RequestHasher(MODEL, LAYER, 2)
    hasher.begin(0, np.array([7, 8, 9], dtype=np.int64))
    before = hasher.history(0).copy()
    np.testing.assert_array_equal(before, [9, 8])  # newest first
    with pytest.raises(engramlab.InvalidArgumentError) as caught:
        # slot 1 was never begun: the whole batch is refused
        hasher.extend(np.array([1, 2, 3], dtype=np.int64), [(0, 0, 2), (1, 2, 1)])
    assert "slot" in caught.value.message
    np.testing.assert_array_equal(hasher.history(0), before)
    assert hasher.state(0) == "active" and hasher.state(1) == "free"


def test_bad_arguments_name_themselves():
    hasher = engramlab.RequestHasher(MODEL, LAYER, 2)
    hasher.begin(0)
    with pytest.raises(TypeError, match="tokens: dtype int32"):
        hasher.extend(np.zeros(2, dtype=np.int32), [(0, 0, 2)])
    with pytest.raises(ValueError, match=r"runs: shape \(1, 2\); give \[n, 3\]"):
        hasher.extend(np.zeros(2, dtype=np.int64), [(0, 0)])
    with pytest.raises(engramlab.InvalidArgumentError, match="slot: 5 is not a slot"):
        hasher.history(5)
    with pytest.raises(engramlab.InvalidArgumentError, match="dead_tokens: 'skip'"):
        engramlab.RequestHasher(MODEL, LAYER, 2, dead_tokens="skip")
