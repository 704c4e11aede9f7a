"""Bad input, family by family: meshflow raises (an instance of) the exception
class PyTorch raises for the same call, with a message that names the op."""
import pytest
import torch

import meshflow as mf

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # PyTorch's warnings before its errors


def F(lib):
    return lib.nn.functional


# (family, call written for either library, name the message must contain)
CASES = [
    ("elementwise", "lib.add(lib.ones(2, 3), lib.ones(4))", "add"),
    ("elementwise", "lib.bitwise_and(lib.ones(2), lib.ones(2))", "bitwise_and"),
    ("elementwise", "lib.sub(lib.ones(2, dtype=lib.bool), lib.ones(2, dtype=lib.bool))", "sub"),
    ("elementwise", "F(lib).gelu(lib.ones(2), approximate='bad')", "gelu"),
    ("elementwise", "lib.clamp(lib.ones(2))", "clamp"),
    ("elementwise", "lib.div(lib.ones(2), lib.ones(2), rounding_mode='x')", "div"),
    ("elementwise", "lib.where(lib.ones(2), lib.ones(2), lib.ones(2))", "where"),
    ("elementwise", "lib.lerp(lib.ones(2), lib.ones(3), 0.5)", "lerp"),
    ("elementwise", "lib.ones(2, dtype=lib.int64).add_(1.5)", "add_"),
    ("elementwise", "lib.ones(2, dtype=lib.int64).div_(2)", "div_"),
    ("reduce", "lib.sum(lib.ones(2, 3), 2)", "sum"),
    ("reduce", "lib.max(lib.ones(0))", "max"),
    ("reduce", "lib.argmax(lib.ones(2), 1)", "argmax"),
    ("reduce", "lib.mean(lib.ones(2, dtype=lib.int64))", "mean"),
    ("reduce", "lib.var(lib.ones(2, 3), 5)", "var"),
    ("reduce", "lib.cumsum(lib.ones(2), 1)", "cumsum"),
    ("reduce", "lib.logsumexp(lib.ones(2), 3)", "logsumexp"),
    ("shape", "lib.ones(2, 3).view(4)", "view"),
    ("shape", "lib.ones(2, 3).reshape(-1, -1)", "reshape"),
    ("shape", "lib.ones(2, 3).permute(0)", "permute"),
    ("shape", "lib.ones(2, 3).permute(0, 0)", "permute"),
    ("shape", "lib.transpose(lib.ones(2, 3), 0, 4)", "transpose"),
    ("shape", "lib.squeeze(lib.ones(2, 3), 3)", "squeeze"),
    ("shape", "lib.unsqueeze(lib.ones(2, 3), 5)", "unsqueeze"),
    ("shape", "lib.cat([lib.ones(2, 3), lib.ones(2, 4)])", "cat"),
    ("shape", "lib.cat([])", "cat"),
    ("shape", "lib.stack([lib.ones(2), lib.ones(3)])", "stack"),
    ("shape", "lib.narrow(lib.ones(4), 0, 2, 5)", "narrow"),
    ("shape", "lib.select(lib.ones(4), 0, 7)", "select"),
    ("shape", "lib.index_select(lib.ones(4), 0, lib.tensor([9]))", "index_select"),
    ("shape", "lib.index_select(lib.ones(4), 0, lib.tensor([1.0]))", "index_select"),
    ("shape", "lib.gather(lib.ones(3, 4), 1, lib.zeros(3, dtype=lib.int64))", "gather"),
    ("shape", "lib.gather(lib.ones(3, 4), 1, lib.full((3, 1), 9, dtype=lib.int64))", "gather"),
    ("shape", "lib.scatter(lib.ones(3, 4), 1, lib.full((3, 1), 9, dtype=lib.int64), lib.ones(3, 1))", "scatter"),
    ("shape", "lib.ones(2, 3).expand(4, 3)", "expand"),
    ("shape", "lib.split(lib.ones(4), 0)", "split"),
    ("shape", "lib.chunk(lib.ones(4), 0)", "chunk"),
    ("shape", "lib.flip(lib.ones(2, 3), (0, 0))", "flip"),
    ("shape", "lib.roll(lib.ones(2, 3), (1, 2), (0,))", "roll"),
    ("shape", "lib.topk(lib.ones(3), 5)", "topk"),
    ("shape", "lib.ones(2, 3).repeat(2)", "repeat"),
    ("shape", "lib.diagonal(lib.ones(3, 3), 0, 0, 0)", "diagonal"),
    ("shape", "lib.masked_select(lib.ones(3), lib.ones(4, dtype=lib.bool))", "masked_select"),
    ("shape", "lib.ones(3)[5]", "index"),
    ("shape", "lib.ones(3)[0, 0]", "index"),
    ("shape", "lib.ones(3)['a']", "valid indices"),
    ("linalg", "lib.matmul(lib.ones(2, 3), lib.ones(4, 5))", "matmul"),
    ("linalg", "lib.matmul(lib.ones(()), lib.ones(2))", "matmul"),
    ("linalg", "lib.mm(lib.ones(3), lib.ones(3, 2))", "mm"),
    ("linalg", "lib.bmm(lib.ones(2, 3), lib.ones(3, 2))", "bmm"),
    ("linalg", "lib.dot(lib.ones(2, 2), lib.ones(2, 2))", "dot"),
    ("linalg", "lib.dot(lib.ones(2), lib.ones(2, dtype=lib.float64))", "dot"),
    ("linalg", "lib.mv(lib.ones(2, 3), lib.ones(4))", "mv"),
    ("linalg", "lib.addmm(lib.ones(5), lib.ones(2, 3), lib.ones(3, 4))", "addmm"),
    ("linalg", "F(lib).linear(lib.ones(2, 3), lib.ones(4, 5))", "linear"),
    ("nn", "F(lib).softmax(lib.ones(2, 3), 2)", "softmax"),
    ("nn", "F(lib).log_softmax(lib.ones(2, dtype=lib.int64), 0)", "log_softmax"),
    ("nn", "F(lib).layer_norm(lib.ones(2, 3), (4,))", "layer_norm"),
    ("nn", "F(lib).batch_norm(lib.ones(2, 3), lib.ones(4), lib.ones(4))", "batch_norm"),
    ("nn", "F(lib).group_norm(lib.ones(2, 6), 4)", "group_norm"),
    ("nn", "F(lib).embedding(lib.tensor([5]), lib.ones(3, 2))", "embedding"),
    ("nn", "F(lib).embedding(lib.tensor([1.0]), lib.ones(3, 2))", "embedding"),
    ("nn", "F(lib).dropout(lib.ones(2), 1.5)", "dropout"),
    ("nn", "F(lib).cross_entropy(lib.ones(2, 3), lib.tensor([0, 5]))", "cross_entropy"),
    ("nn", "F(lib).cross_entropy(lib.ones(2, 3), lib.tensor([0, 1]), reduction='avg')", "cross_entropy"),
    ("nn", "F(lib).nll_loss(lib.ones(2, 3), lib.ones(2))", "nll_loss"),
    ("nn", "F(lib).mse_loss(lib.ones(2, 3), lib.ones(3, 2))", "mse_loss"),
    ("nn", "F(lib).binary_cross_entropy_with_logits(lib.ones(2), lib.ones(3))", "binary_cross_entropy_with_logits"),
    ("nn", "F(lib).one_hot(lib.tensor([-1]), 3)", "one_hot"),
    ("nn", "F(lib).one_hot(lib.tensor([1.0]), 3)", "one_hot"),
    ("nn", "F(lib).pad(lib.ones(2, 3), (1,))", "pad"),
    ("conv", "F(lib).conv2d(lib.ones(1, 3, 5, 5), lib.ones(2, 4, 3, 3))", "conv2d"),
    ("conv", "F(lib).conv2d(lib.ones(5, 5), lib.ones(2, 1, 3, 3))", "conv2d"),
    ("conv", "F(lib).conv2d(lib.ones(1, 1, 2, 2), lib.ones(1, 1, 3, 3))", "conv2d"),
    ("conv", "F(lib).conv2d(lib.ones(1, 4, 5, 5), lib.ones(3, 2, 3, 3), groups=2)", "conv2d"),
    ("conv", "F(lib).max_pool2d(lib.ones(1, 1, 2, 2), 3)", "max_pool2d"),
    ("conv", "F(lib).max_pool2d(lib.ones(1, 1, 6, 6), 2, padding=2)", "max_pool2d"),
    ("creation", "lib.zeros(-1)", "size must be non-negative"),
    ("creation", "lib.arange(0, 5, 0)", "arange"),
    ("creation", "lib.arange(5, 0, 1)", "arange"),
    ("creation", "lib.randint(5, 2, (3,))", "randint"),
    ("creation", "lib.eye(-2)", "eye"),
    ("creation", "lib.linspace(0, 1, -1)", "linspace"),
    ("creation", "lib.randperm(-1)", "randperm"),
    ("creation", "lib.full((2,), 300, dtype=lib.uint8)", "full"),
    ("creation", "lib.zeros(2, dtype=lib.int8).fill_(200)", "fill_"),
    ("creation", "lib.bernoulli(lib.full((2,), 1.5))", "bernoulli"),
    ("autograd", "(lib.ones(2, requires_grad=True) * 2).backward()", "backward"),
    ("autograd", "lib.ones(2, dtype=lib.int64).requires_grad_()", "requires_grad_"),
    ("autograd", "lib.autograd.grad(lib.ones(1).sum(), lib.ones(1))", "grad"),
    ("autograd", "lib.ones(2, requires_grad=True).add_(1)", "add_"),
    ("tensor", "lib.ones(2).item()", "item"),
    ("tensor", "lib.tensor([[1], [1, 2]])", "expected sequence of length"),
    ("tensor", "len(lib.tensor(1))", "len() of a 0-d tensor"),
    ("tensor", "iter(lib.tensor(1))", "iteration over a 0-d tensor"),
]

# Calls where meshflow deliberately raises another class than PyTorch 1.13:
# (call, PyTorch's class, meshflow's class). PyTorch's class comes from an
# implementation detail there (a shape check inside an index helper).
DEVIATIONS = [
    ("lib.tril(lib.ones(3))", IndexError, mf.errors.ShapeError),
    ("F(lib).avg_pool2d(lib.ones(5), 2)", IndexError, mf.errors.ShapeError),
    ("F(lib).cross_entropy(lib.ones(2, 3), lib.tensor([0, 1, 2]))", ValueError, mf.errors.ShapeError),
]


def raised(expr, lib):
    try:
        eval(expr, {"lib": lib, "F": F})
    except Exception as error:  # noqa: BLE001  (the class is what the test compares)
        return error
    return None


@pytest.mark.parametrize("family,expr,op", CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_bad_input_raises_like_pytorch(family, expr, op):
    expected = raised(expr, torch)
    assert expected is not None, "PyTorch accepts this call; the case is wrong"
    error = raised(expr, mf)
    assert error is not None, "meshflow accepted a call PyTorch refuses"
    assert isinstance(error, type(expected)), (
        f"meshflow raised {type(error).__name__}, PyTorch raises {type(expected).__name__}: {error}")
    assert isinstance(error, (mf.errors.Error, TypeError, ValueError)), type(error)
    assert op in str(error), f"message does not name {op!r}: {error}"


@pytest.mark.parametrize("expr,torch_class,mf_class", DEVIATIONS, ids=[d[0] for d in DEVIATIONS])
def test_documented_deviations(expr, torch_class, mf_class):
    assert isinstance(raised(expr, torch), torch_class)
    assert isinstance(raised(expr, mf), mf_class)


def test_error_classes():
    errors = mf.errors
    assert issubclass(errors.Error, RuntimeError)
    for cls, builtin in ((errors.TypeError, TypeError), (errors.IndexError, IndexError),
                         (errors.ValueError, ValueError), (errors.NotImplementedError, NotImplementedError)):
        assert issubclass(cls, builtin) and issubclass(cls, errors.Error)
    assert issubclass(errors.ShapeError, errors.Error) and issubclass(errors.DistributedError, errors.Error)
    with pytest.raises(errors.ShapeError, match=r"matmul: a.shape\[-1\] \(3\) must equal b.shape\[-2\] \(4\)"):
        mf.ones(2, 3) @ mf.ones(4, 5)


def test_wrong_argument_types_are_type_errors():
    with pytest.raises(TypeError, match="incompatible function arguments"):
        mf.add(mf.ones(2), "x")
    with pytest.raises(TypeError):
        mf.zeros(2, dtype="float32")
    with pytest.raises(TypeError, match="size"):
        mf.ones(2).view(1.5)
    with pytest.raises(TypeError):
        mf.ones(2).sum(dim="a")
    with pytest.raises(mf.errors.ValueError, match="conv2d: padding"):
        mf.nn.functional.conv2d(mf.ones(1, 1, 4, 4), mf.ones(1, 1, 3, 3), padding="full")
    with pytest.raises(mf.errors.ValueError, match="cross_entropy: size_average"):
        mf.nn.functional.cross_entropy(mf.ones(2, 3), mf.tensor([0, 1]), size_average=True)
    with pytest.raises(mf.errors.NotImplementedError, match="pad: unrecognised padding mode 'bogus'"):
        mf.nn.functional.pad(mf.ones(2, 3), (1, 1), mode="bogus")
