"""meshflow.testing.assert_close and make_tensor against torch.testing: what passes, what fails and
the messages, on the same inputs."""
import numpy as np
import pytest
import torch

import meshflow as mf


def both(fn):
    """fn(lib, testing) for torch and meshflow: (outcome, message) pairs, which must agree."""
    results = []
    for lib in (torch, mf):
        try:
            fn(lib)
            results.append(("ok", ""))
        except AssertionError as e:
            results.append(("AssertionError", str(e)))
        except (TypeError, ValueError) as e:
            results.append((type(e).__name__, ""))
    return results


CASES = [
    lambda lib: lib.testing.assert_close(lib.tensor([1.0, 2.0]), lib.tensor([1.0, 2.0 + 1e-7])),
    lambda lib: lib.testing.assert_close(lib.tensor([1.0, 2.0, 3.0]), lib.tensor([1.0, 2.5, 3.0])),
    lambda lib: lib.testing.assert_close(lib.tensor([[1.0, 2.0], [3.0, 4.0]]), lib.tensor([[1.0, 2.0], [3.5, 4.0]])),
    lambda lib: lib.testing.assert_close(lib.tensor([1, 2]), lib.tensor([1, 3])),
    lambda lib: lib.testing.assert_close(lib.tensor(1.0), lib.tensor(1.5)),
    lambda lib: lib.testing.assert_close(lib.tensor([1.0]), lib.tensor([1.0], dtype=lib.float64)),
    lambda lib: lib.testing.assert_close(lib.tensor([1.0]), lib.tensor([1.0, 2.0])),
    lambda lib: lib.testing.assert_close(lib.tensor([1.0, 1.1]), lib.tensor([1.0, 1.0]), rtol=0.2, atol=0),
    lambda lib: lib.testing.assert_close(lib.tensor([float("nan")]), lib.tensor([float("nan")])),
    lambda lib: lib.testing.assert_close(lib.tensor([float("nan")]), lib.tensor([float("nan")]), equal_nan=True),
    lambda lib: lib.testing.assert_close(lib.tensor([1.0]), lib.tensor([1.0]), rtol=1e-3),
    lambda lib: lib.testing.assert_close([lib.tensor(1.0), 2], [lib.tensor(1.0), 2]),
    lambda lib: lib.testing.assert_close({"a": lib.tensor([1.0])}, {"a": lib.tensor([1.0])}),
    lambda lib: lib.testing.assert_close(1.0, 1.0 + 1e-9),
    lambda lib: lib.testing.assert_close(lib.tensor([1.0, 2.0]), lib.tensor([1.0, 2.0]).double(), check_dtype=False),
    lambda lib: lib.testing.assert_close(lib.tensor([True, False]), lib.tensor([True, True])),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_assert_close_like_torch(case):
    (t_outcome, t_msg), (m_outcome, m_msg) = both(CASES[case])
    assert m_outcome == t_outcome
    if t_outcome == "AssertionError":
        # the first lines (the verdict and the mismatch count) match torch's
        assert m_msg.splitlines()[:3] == t_msg.replace("torch.", "meshflow.").splitlines()[:3], (m_msg, t_msg)


def test_custom_message_and_make_tensor():
    with pytest.raises(AssertionError, match="^custom$"):
        mf.testing.assert_close(mf.ones(2), mf.zeros(2), msg="custom")
    t = mf.testing.make_tensor(3, 4, dtype=mf.float32, low=-1, high=1, noncontiguous=True)
    assert tuple(t.shape) == (3, 4) and not t.is_contiguous()
    assert np.all(np.abs(t.numpy()) <= 1)
    assert mf.testing.make_tensor((2,), dtype=mf.int64, low=3, high=4).tolist() == [3, 3]
