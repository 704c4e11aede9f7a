"""The direct entry points of Tensor's operators and unary methods (Note
[Fast calls] in python/bindings/fast_calls.cpp) behave as the pybind11
overloads they replace: same results and dtypes as PyTorch for every operand
type, the same errors, in-place identity, autograd, and unchanged handling of
what they pass on (NumPy operands, None, keywords, foreign types)."""
import operator

import numpy as np
import pytest
import torch

import meshflow as mf

BINARY = [operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
          operator.pow, operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]
INPLACE = [operator.iadd, operator.isub, operator.imul, operator.itruediv]
UNARY = ["exp", "log", "sin", "cos", "tanh", "sigmoid", "sqrt", "abs", "neg", "relu", "floor", "round",
         "reciprocal", "square", "tan", "log2"]
OTHERS = [2, -3, 2.5, True, False]


def pair(values, dtype):
    return mf.tensor(values, dtype=getattr(mf, dtype)), torch.tensor(values, dtype=getattr(torch, dtype))


def same(got, want):
    assert isinstance(got, mf.Tensor), type(got)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], (got.dtype, want.dtype)
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64), rtol=1e-6,
                               equal_nan=True)


def same_or_both_raise(call_mf, call_torch):
    try:
        want = call_torch()
    except RuntimeError:
        with pytest.raises(Exception):
            call_mf()
        return
    same(call_mf(), want)


@pytest.mark.parametrize("op", BINARY, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", ["float32", "int64", "float64"])
def test_binary_operators_with_tensors_and_numbers_match_torch(op, dtype):
    a, ta = pair([1.0, 2.0, 3.0, 5.0], dtype)
    b, tb = pair([2.0, 1.0, 3.0, 4.0], dtype)
    same(op(a, b), op(ta, tb))
    for other in OTHERS:
        same_or_both_raise(lambda: op(a, other), lambda: op(ta, other))
        same_or_both_raise(lambda: op(other, a), lambda: op(other, ta))


@pytest.mark.parametrize("op", INPLACE, ids=lambda f: f.__name__)
def test_inplace_operators_return_the_same_object_and_bump_the_version(op):
    a, ta = pair([1.0, 2.0, 3.0], "float32")
    b, tb = pair([2.0, 4.0, 8.0], "float32")
    before = a._version
    result = op(a, b)
    assert result is a and a._version == before + 1
    same(a, op(ta, tb))
    result = op(a, 2)
    assert result is a
    same(a, op(ta, 2))


def test_inplace_on_a_leaf_that_requires_grad_raises_as_before():
    w = mf.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w += 1
    with pytest.raises(RuntimeError, match="leaf"):
        w *= mf.ones(3)


@pytest.mark.parametrize("name", UNARY)
def test_unary_methods_match_torch(name):
    a, ta = pair([0.5, 1.5, 2.0, 4.0], "float32")
    same(getattr(a, name)(), getattr(ta, name)())
    same(getattr(mf.Tensor, name)(a), getattr(ta, name)())  # unbound, as a plain function


def test_operators_on_numpy_none_and_foreign_types_keep_their_behaviour():
    a = mf.tensor([1.0, 2.0, 3.0])
    same(a + np.array([1.0, 1.0, 1.0], dtype=np.float32), torch.tensor([2.0, 3.0, 4.0]))
    assert (a == None) is False  # noqa: E711
    assert (a != None) is True  # noqa: E711
    assert a.__add__("x") is NotImplemented
    with pytest.raises(TypeError):
        a + "x"
    with pytest.raises(TypeError):
        a * [1, 2]
    with pytest.raises(TypeError):
        a + (1 << 70)  # outside int64: the overloads refuse it
    same(a + np.float64(2.0), torch.tensor([3.0, 4.0, 5.0]))


def test_errors_of_the_op_are_translated():
    with pytest.raises(mf.errors.ShapeError, match="must match the size"):
        mf.ones(3) + mf.ones(4)
    with pytest.raises(mf.errors.ShapeError, match="must match the size"):
        x = mf.ones(3)
        x += mf.ones(4)
    with pytest.raises(TypeError, match="bool"):
        mf.ones(3, dtype=mf.bool) - True  # subtraction of bools
    with pytest.raises(TypeError, match="bool"):
        mf.ones(3) - True
    with pytest.raises(TypeError, match="bool"):
        True - mf.ones(3)


def test_arguments_the_fast_path_does_not_take_go_to_the_replaced_function():
    a = mf.tensor([1.0, 2.0])
    with pytest.raises(TypeError):
        a.exp(1)
    with pytest.raises(TypeError):
        a.exp(nonsense=1)
    assert a.__add__() is NotImplemented  # pybind11's operator overloads say so on a bad call
    assert mf.Tensor.__add__(a, 1).tolist() == [2.0, 3.0]
    assert mf.Tensor.exp.__doc__  # the replaced function's signature


def test_subclasses_and_parameters_take_the_same_paths():
    class Sub(mf.Tensor):
        pass

    p = mf.nn.Parameter(mf.tensor([1.0, 2.0]))
    x = mf.tensor([3.0, 4.0])
    assert (x + p).tolist() == [4.0, 6.0]
    assert (p + x).tolist() == [4.0, 6.0]
    assert (p * 2).tolist() == [2.0, 4.0]
    assert (2 * p).tolist() == [2.0, 4.0]
    assert p.exp().tolist() == pytest.approx([np.exp(1.0), np.exp(2.0)])
    # A one-element tensor on the left of a parameter stays a tensor operand
    # (its gradient flows), never a number.
    one = mf.tensor([2.0], requires_grad=True)
    (one * p).sum().backward()
    assert one.grad.tolist() == [3.0]
    assert Sub.__add__ is mf.Tensor.__add__


def test_autograd_through_the_fast_paths():
    x = mf.tensor([0.5, 1.0, 2.0], requires_grad=True)
    tx = torch.tensor([0.5, 1.0, 2.0], requires_grad=True)
    for lib, v in ((mf, x), (torch, tx)):
        y = ((v * 3 + 1) / 2 - v).exp().sin().abs().sqrt()
        z = (-y + v @ v).relu().sum()
        z.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)


def test_results_are_new_objects_with_one_identity():
    a = mf.ones(2)
    b = a + 0
    assert b is not a
    assert mf.Tensor.__pos__(a) is a
    assert (-a).neg().tolist() == [1.0, 1.0]
