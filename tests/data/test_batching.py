"""Tests for scratchformer.data.batching: bucketing sampler, padding, truncate/segment."""

import math

import pytest
import torch

from scratchformer.data.batching import (
    LengthBucketSampler, bucketing_report, pad_sequences, padding_fraction, segment, truncate)

# Skewed, deterministic lengths: 900 short (5..19) and 100 long (200..499) sequences.
SKEWED = [5 + (i * 7) % 15 for i in range(900)] + [200 + (i * 37) % 300 for i in range(100)]


def flat(batches):
    return [i for b in batches for i in b]


@pytest.mark.parametrize("opts", [dict(batch_size=32), dict(max_tokens=1000),
                                  dict(batch_size=16, max_tokens=600),
                                  dict(batch_size=32, bucket_size_multiplier=1)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_every_index_exactly_once_per_epoch(opts, shuffle):
    sampler = LengthBucketSampler(SKEWED, shuffle=shuffle, seed=3, **opts)
    for epoch in range(3):
        assert sorted(flat(sampler.epoch_batches(epoch))) == list(range(len(SKEWED)))


def test_deterministic_in_seed_and_epoch():
    a = LengthBucketSampler(SKEWED, batch_size=32, seed=7)
    b = LengthBucketSampler(SKEWED, batch_size=32, seed=7)  # a fresh object, as after resume
    assert a.epoch_batches(5) == b.epoch_batches(5)
    assert a.epoch_batches(5) == a.epoch_batches(5)
    assert a.epoch_batches(0) != a.epoch_batches(1)
    assert a.epoch_batches(0) != LengthBucketSampler(SKEWED, batch_size=32, seed=8).epoch_batches(0)


def test_no_shuffle_is_fixed_and_sorted():
    s = LengthBucketSampler(SKEWED, batch_size=32, shuffle=False)
    assert s.epoch_batches(0) == s.epoch_batches(9)
    order = flat(s.epoch_batches(0))
    assert [SKEWED[i] for i in order] == sorted(SKEWED)
    assert len(s.epoch_batches(0)) == math.ceil(1000 / 32)
    assert s.epoch_batches(0)[0] == [0, 15, 30, 45, 60, 75, 90, 105, 120, 135, 150, 165, 180,
                                     195, 210, 225, 240, 255, 270, 285, 300, 315, 330, 345,
                                     360, 375, 390, 405, 420, 435, 450, 465]  # all length 5


def test_batch_size_respected():
    s = LengthBucketSampler(SKEWED, batch_size=32, bucket_size_multiplier=4, seed=1)
    batches = s.epoch_batches(0)
    assert all(1 <= len(b) <= 32 for b in batches)
    # 7 chunks of 128 (4 batches each) + one chunk of 104 (4 batches): 32 batches.
    assert len(batches) == 32


@pytest.mark.parametrize("budget", [64, 500, 1000, 4096])
def test_max_tokens_budget_respected(budget):
    s = LengthBucketSampler(SKEWED, max_tokens=budget, seed=0)
    for b in s.epoch_batches(2):
        cost = len(b) * max(SKEWED[i] for i in b)
        assert cost <= budget or len(b) == 1  # a lone sequence longer than the budget


def test_max_tokens_oversized_sequence_gets_own_batch():
    s = LengthBucketSampler([3, 50, 2, 4], max_tokens=10, shuffle=False)
    # Sorted lengths 2, 3, 4, 50: [2, 3] costs 2 * 3 = 6; adding 4 would cost 3 * 4 = 12 > 10;
    # [4, 50] would cost 100, so the 50 (over budget on its own) sits alone.
    assert s.epoch_batches(0) == [[2, 0], [3], [1]]


def test_padding_fraction_exact():
    assert padding_fraction([[0, 3], [1, 2]], [1, 2, 3, 4]) == pytest.approx(4 / 14)
    assert padding_fraction([], [1]) == 0.0
    s = LengthBucketSampler([1, 2, 3, 4], batch_size=2, shuffle=False)
    assert s.epoch_batches() == [[0, 1], [2, 3]]
    assert s.padding_fraction(s.epoch_batches()) == pytest.approx(2 / 12)


def test_bucketing_lowers_padding_on_skewed_lengths():
    rep = bucketing_report(SKEWED, batch_size=32)
    assert rep["padding_fraction_random"] > 0.85  # random batches: mostly padding
    # The chunk (3200) covers all 1000 examples, so bucketing equals a full sort here.
    assert rep["padding_fraction_bucketed"] == pytest.approx(rep["padding_fraction_sorted"])
    assert rep["padding_fraction_sorted"] == pytest.approx(0.10574361385362796)
    assert rep["speedup_bound"] > 7.5
    small_chunks = bucketing_report(SKEWED, batch_size=32, bucket_size_multiplier=4)
    assert (small_chunks["padding_fraction_sorted"] < small_chunks["padding_fraction_bucketed"]
            < small_chunks["padding_fraction_random"] - 0.1)


def test_token_budget_batches_pad_little():
    s = LengthBucketSampler(SKEWED, max_tokens=1000, seed=0)
    assert s.padding_fraction(s.epoch_batches(0)) < 0.05


def test_torch_batch_sampler_protocol():
    data = torch.arange(len(SKEWED))
    s = LengthBucketSampler(SKEWED, batch_size=50, seed=2)
    s.set_epoch(4)
    loader = torch.utils.data.DataLoader(data, batch_sampler=s)
    got = [b.tolist() for b in loader]
    assert got == s.epoch_batches(4)
    assert len(s) == len(got) == 20


def test_sampler_rejects_bad_options():
    with pytest.raises(ValueError):
        LengthBucketSampler([1, 2])
    with pytest.raises(ValueError):
        LengthBucketSampler([1, 2], batch_size=0)
    with pytest.raises(ValueError):
        LengthBucketSampler([1, -2], batch_size=2)


# ---- padding --------------------------------------------------------------------------------
def test_pad_sequences():
    ids, lens = pad_sequences([[5, 6, 7], [8], []], pad_id=0)
    assert ids.dtype == torch.long and lens.dtype == torch.long
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert lens.tolist() == [3, 1, 0]
    ids, lens = pad_sequences([[1, 2]], pad_id=9, max_len=4)
    assert ids.tolist() == [[1, 2, 9, 9]] and lens.tolist() == [2]
    ids, lens = pad_sequences([])
    assert ids.shape == (0, 0) and lens.shape == (0,)
    with pytest.raises(ValueError, match="truncate"):
        pad_sequences([[1, 2, 3]], max_len=2)


# ---- long documents -------------------------------------------------------------------------
def test_truncate():
    ids = list(range(10))
    assert truncate(ids, 4) == [0, 1, 2, 3]
    assert truncate(ids, 4, keep="tail") == [6, 7, 8, 9]
    assert truncate(ids, 5, keep="head+tail") == [0, 1, 2, 8, 9]
    assert truncate(ids, 4, keep="head+tail") == [0, 1, 8, 9]
    assert truncate(ids, 1, keep="head+tail") == [0]
    assert truncate(ids, 0, keep="tail") == []
    assert truncate(ids, 20, keep="head+tail") == ids
    with pytest.raises(ValueError):
        truncate(ids, 3, keep="middle")


def test_segment():
    ids = [1, 2, 3, 4, 5]
    assert segment(ids, 2) == [[1, 2], [3, 4], [5]]
    assert segment(ids, 5) == [[1, 2, 3, 4, 5]]
    assert segment(ids, 8) == [[1, 2, 3, 4, 5]]
    assert segment(ids, 3, stride=2) == [[1, 2, 3], [3, 4, 5]]
    assert segment(list(range(10)), 4, stride=3) == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9]]
    assert segment(list(range(10)), 3, max_segments=2) == [[0, 1, 2], [3, 4, 5]]
    assert segment([], 4) == []
    with pytest.raises(ValueError):
        segment(ids, 2, stride=3)
    with pytest.raises(ValueError):
        segment(ids, 0)
