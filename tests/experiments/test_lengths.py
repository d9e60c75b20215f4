"""Length buckets of the rnn-baseline experiment: thirds by character length."""
import numpy as np

from scratchformer.experiments.lengths import length_thirds


def test_lengths_fall_into_thirds_by_quantile():
    lengths = np.array([3, 4, 5, 10, 11, 12, 20, 21, 22])
    bucket, long_over = length_thirds(lengths)
    assert bucket.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert 12 <= long_over < 20
