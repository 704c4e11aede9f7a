"""The CPU's GEMM libraries (Note [Choosing a GEMM library] in
src/backend/cpu/kernels/gemm.cpp): every library meshflow can pick gives the
product PyTorch computes, on every operand layout the matmul kernel passes
on (transposed, strided, broadcast batches, vectors, an accumulated
output), and "auto" records one measured choice per product shape."""
import numpy as np
import pytest
import torch

import meshflow as mf

cpu = mf.backends.cpu
LIBRARIES = ["openblas", "onednn"] + (["mkl"] if mf.backends.mkl.is_available() else [])


@pytest.fixture(autouse=True)
def restore_auto():
    yield
    cpu.preferred_blas_library("auto")


def to_mf(a, dtype):
    return mf.tensor(a).to(dtype)


def rounded(a, dtype):
    """a as the dtype holds it, in float64 (the reference multiplies the
    rounded operands exactly)."""
    t = torch.from_numpy(a)
    return (t.to(torch.bfloat16) if dtype == mf.bfloat16 else t.to(torch.float32)).double()


def check(ours, ref, dtype, k):
    got = ours.float().numpy().astype(np.float64)
    ref = ref.numpy()
    # float32 accumulates k products in float32; bfloat16 results are rounded
    # to 8 bits once, after a float32 accumulation.
    rtol = 8e-3 if dtype == mf.bfloat16 else 1e-5 * max(1.0, np.sqrt(k))
    scale = np.abs(ref).max() + 1e-30
    np.testing.assert_allclose(got, ref, rtol=0, atol=rtol * scale)


rng = np.random.default_rng(0)


def operands(case):
    """(a, b) as float64 arrays, and how to view them from meshflow tensors."""
    n, k, m = 33, 70, 45
    if case == "plain":
        return rng.standard_normal((n, k)), rng.standard_normal((k, m)), lambda a: a, lambda b: b
    if case == "a_transposed":
        return rng.standard_normal((k, n)), rng.standard_normal((k, m)), lambda a: a.t(), lambda b: b
    if case == "b_transposed":
        return rng.standard_normal((n, k)), rng.standard_normal((m, k)), lambda a: a, lambda b: b.t()
    if case == "strided":     # neither unit stride: the kernel copies it
        return rng.standard_normal((n, 2 * k)), rng.standard_normal((k, m)), lambda a: a[:, ::2], lambda b: b
    if case == "broadcast_batch":
        return (rng.standard_normal((3, 1, n, k)), rng.standard_normal((4, k, m)), lambda a: a, lambda b: b)
    if case == "batch":
        return rng.standard_normal((5, n, k)), rng.standard_normal((5, k, m)), lambda a: a, lambda b: b
    if case == "matrix_vector":
        return rng.standard_normal((n, k)), rng.standard_normal((k, 1)), lambda a: a, lambda b: b
    if case == "vector_matrix":
        return rng.standard_normal((1, k)), rng.standard_normal((k, m)), lambda a: a, lambda b: b
    raise AssertionError(case)


CASES = ["plain", "a_transposed", "b_transposed", "strided", "broadcast_batch", "batch", "matrix_vector",
         "vector_matrix"]


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("dtype", [mf.float32, mf.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", CASES)
def test_every_library_gives_the_product(library, dtype, case):
    cpu.preferred_blas_library(library)
    a, b, view_a, view_b = operands(case)
    ours = view_a(to_mf(a, dtype)) @ view_b(to_mf(b, dtype))
    ref = view_a(rounded(a, dtype)) @ view_b(rounded(b, dtype))
    assert ours.dtype == dtype and tuple(ours.shape) == tuple(ref.shape)
    check(ours, ref, dtype, k=ref.shape[-1])


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("dtype", [mf.float32, mf.bfloat16], ids=["float32", "bfloat16"])
def test_every_library_scales_and_accumulates(library, dtype):
    """addmm and baddbmm reach the kernel as out = beta * out + alpha * a @ b."""
    cpu.preferred_blas_library(library)
    c, a, b = rng.standard_normal((17, 29)), rng.standard_normal((17, 40)), rng.standard_normal((29, 40))
    ours = mf.addmm(to_mf(c, dtype), to_mf(a, dtype), to_mf(b, dtype).t(), beta=0.5, alpha=-2.0)
    ref = 0.5 * rounded(c, dtype) - 2.0 * rounded(a, dtype) @ rounded(b, dtype).t()
    check(ours, ref, dtype, k=40)
    c3, a3, b3 = rng.standard_normal((3, 6, 7)), rng.standard_normal((3, 6, 9)), rng.standard_normal((3, 9, 7))
    ours = mf.baddbmm(to_mf(c3, dtype), to_mf(a3, dtype), to_mf(b3, dtype), beta=2.0, alpha=0.25)
    ref = 2.0 * rounded(c3, dtype) + 0.25 * rounded(a3, dtype) @ rounded(b3, dtype)
    check(ours, ref, dtype, k=9)


@pytest.mark.parametrize("library", LIBRARIES)
def test_every_library_trains_the_same_linear_layer(library):
    """Forward and both gradients of a linear layer (a @ w^T, g @ w and
    g^T @ x: every transposition) against PyTorch's."""
    cpu.preferred_blas_library(library)
    x, w = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((32, 48)).astype(np.float32)
    g = rng.standard_normal((64, 32)).astype(np.float32)
    xm, wm = mf.tensor(x, requires_grad=True), mf.tensor(w, requires_grad=True)
    mf.nn.functional.linear(xm, wm).backward(mf.tensor(g))
    xt, wt = torch.tensor(x, dtype=torch.float64, requires_grad=True), torch.tensor(w, dtype=torch.float64,
                                                                                     requires_grad=True)
    torch.nn.functional.linear(xt, wt).backward(torch.tensor(g, dtype=torch.float64))
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(wm.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-4)


def large(dtype, n=256, k=128, m=160):
    """Operands of a product above the size where "auto" measures."""
    a, b = rng.standard_normal((n, k)), rng.standard_normal((k, m))
    return a, b, to_mf(a, dtype), to_mf(b, dtype)


@pytest.mark.parametrize("dtype", [mf.float32, mf.bfloat16], ids=["float32", "bfloat16"])
def test_auto_measures_each_shape_once_and_keeps_the_fastest(dtype):
    cpu.clear_blas_choices()
    assert cpu.preferred_blas_library() == "auto"
    a, b, am, bm = large(dtype)
    first = am @ bm.t().contiguous().t()                  # b read transposed: a key of its own
    again = am @ bm.t().contiguous().t()
    ref = rounded(a, dtype) @ rounded(b, dtype)
    check(first, ref, dtype, k=128)
    np.testing.assert_array_equal(first.float().numpy(), again.float().numpy())
    choices = [c for c in cpu.blas_choices() if (c["n"], c["m"], c["k"]) == (256, 160, 128)]
    assert len(choices) == 1
    c = choices[0]
    assert c["dtype"] == ("float32" if dtype == mf.float32 else "bfloat16")
    assert (c["batch"], c["a_transposed"], c["b_transposed"]) == (1, False, True)
    assert c["threads"] == mf.get_num_threads()
    expected = {"onednn"} | ({"openblas"} if dtype == mf.float32 else set()) | (
        {"mkl"} if mf.backends.mkl.is_available() else set())
    assert set(c["seconds"]) == expected
    assert c["library"] == min(c["seconds"], key=c["seconds"].get)
    assert all(s > 0 for s in c["seconds"].values())
    # A product of another shape is a key of its own; a small one is not measured.
    am2 = to_mf(rng.standard_normal((8, 8)), dtype)
    am2 @ am2
    assert len(cpu.blas_choices()) == len(choices) + sum(
        1 for c in cpu.blas_choices() if (c["n"], c["m"], c["k"]) != (256, 160, 128))
    assert not [c for c in cpu.blas_choices() if c["n"] == 8]


def test_auto_does_not_measure_an_accumulating_product():
    """beta != 0 reads the output, so measuring would add the product more
    than once: the first such product runs on the default library."""
    cpu.clear_blas_choices()
    a, b, am, bm = large(mf.float32)
    c = rng.standard_normal((256, 160))
    ours = mf.addmm(mf.tensor(c).float(), am, bm, beta=1.0)
    check(ours, rounded(c, mf.float32) + rounded(a, mf.float32) @ rounded(b, mf.float32), mf.float32, k=128)
    assert cpu.blas_choices() == []
    am @ bm                                              # beta == 0: measured and kept
    assert len(cpu.blas_choices()) == 1
    ours = mf.addmm(mf.tensor(c).float(), am, bm, beta=1.0)   # now uses that choice
    check(ours, rounded(c, mf.float32) + rounded(a, mf.float32) @ rounded(b, mf.float32), mf.float32, k=128)


def test_a_forced_library_is_not_measured():
    cpu.clear_blas_choices()
    assert cpu.preferred_blas_library("onednn") == "onednn"
    assert cpu.preferred_blas_library("mkldnn") == "onednn"    # PyTorch's name for oneDNN
    _, _, am, bm = large(mf.float32)
    am @ bm
    assert cpu.blas_choices() == []
    assert cpu.preferred_blas_library() == "onednn"


def test_float64_and_integers_keep_their_kernels():
    for library in LIBRARIES:
        cpu.preferred_blas_library(library)
        a, b = rng.standard_normal((9, 11)), rng.standard_normal((11, 5))
        np.testing.assert_allclose((mf.tensor(a) @ mf.tensor(b)).numpy(), a @ b, rtol=1e-13, atol=1e-13)
        ai, bi = rng.integers(-5, 5, (4, 6)), rng.integers(-5, 5, (6, 3))
        np.testing.assert_array_equal((mf.tensor(ai) @ mf.tensor(bi)).numpy(), ai @ bi)


def test_bad_library_names_are_clear_errors():
    with pytest.raises(ValueError, match="preferred_blas_library: expected one of .* got 'cublas'"):
        cpu.preferred_blas_library("cublas")
    with pytest.raises(TypeError, match="preferred_blas_library: expected a str or None, got int"):
        cpu.preferred_blas_library(3)
    assert cpu.preferred_blas_library() == "auto"


def test_mkl_is_reported():
    info = mf._C._build_info()
    assert info["GEMM library"] == "auto"
    if mf.backends.mkl.is_available():
        assert "Math Kernel Library" in mf.backends.mkl.version() and info["oneMKL"] == mf.backends.mkl.version()
    else:
        assert mf.backends.mkl.version() is None and info["oneMKL"] == "not loaded"
        with pytest.raises(ValueError, match="oneMKL is not available here"):
            cpu.preferred_blas_library("mkl")


def test_without_mkl_every_product_still_runs():
    """A machine without oneMKL (here: pointed at a file that is not there)
    runs on OpenBLAS and oneDNN, says where it looked, and refuses "mkl"."""
    import os
    import subprocess
    import sys
    code = """
import meshflow as mf, numpy as np
cpu = mf.backends.cpu
assert not mf.backends.mkl.is_available() and mf.backends.mkl.version() is None
assert mf._C._build_info()["oneMKL"] == "not loaded"
try:
    cpu.preferred_blas_library("mkl")
except ValueError as e:
    assert "oneMKL is not available here" in str(e) and "/nonexistent/libmkl_rt.so.3" in str(e), e
else:
    raise AssertionError("mkl accepted")
a, b = np.random.default_rng(0).standard_normal((2, 256, 300))
got = (mf.tensor(a).float() @ mf.tensor(b).float().t()).numpy()
np.testing.assert_allclose(got, a @ b.T, rtol=1e-4, atol=1e-3)
c = cpu.blas_choices()[0]
assert set(c["seconds"]) == {"openblas", "onednn"}, c
print("ok")
"""
    env = dict(os.environ, MESHFLOW_MKL_LIBRARY="/nonexistent/libmkl_rt.so.3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
