"""OpInfo entries of linear algebra and meshflow.nn.functional (see opinfo.py,
which imports this module so that opinfo.OPS always holds every entry)."""
import functools

import numpy as np

from opinfo import op
from sampling import ALL, NUMERIC, Arr, Dt, S, index_arr, make, method_call, scalar_of, unary, validate_dropout


# Linear algebra.
_MATMUL_TOL = {"float32": (1e-4, 1e-4), "bfloat16": (3e-2, 5e-2), "float16": (3e-3, 5e-3)}


def matmul_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1)

    # The last two are large enough for oneDNN's float32 path (Note [oneDNN
    # for float32 GEMMs] in kernels/cpu/gemm.cpp), their gradients too.
    return [S(x((3, 4)), x((4, 5))), S(x((2, 3, 4)), x((4, 2))), S(x((4,)), x((4,))), S(x((3, 4)), x((4,))),
            S(x((4,)), x((2, 4, 3))), S(x((2, 1, 3, 4)), x((5, 4, 2))), S(x((0, 4)), x((4, 3))),
            S(x((3, 0)), x((0, 2))), S(x((64, 128)), x((128, 512))), S(x((2, 2, 64, 64)), x((2, 64, 256)))]


op("matmul", matmul_samples, method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("mm", lambda rng, dtype: [S(make(rng, (3, 4), dtype, -1, 1), make(rng, (4, 5), dtype, -1, 1)),
                             S(make(rng, (1, 7), dtype, -1, 1), make(rng, (7, 1), dtype, -1, 1)),
                             S(make(rng, (2, 0), dtype), make(rng, (0, 3), dtype))],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("bmm", lambda rng, dtype: [S(make(rng, (2, 3, 4), dtype, -1, 1), make(rng, (2, 4, 5), dtype, -1, 1)),
                              S(make(rng, (0, 3, 4), dtype), make(rng, (0, 4, 2), dtype))],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)


def einsum_samples(rng, dtype):
    def x(*shape):
        return make(rng, shape, dtype, -1, 1)

    return [S("ij,jk->ik", x(3, 4), x(4, 5)), S("ij,jk", x(3, 4), x(4, 5)), S("bij,bjk->bik", x(2, 3, 4), x(2, 4, 5)),
            S("ii->i", x(4, 4)), S("ii", x(4, 4)), S("iij->j", x(3, 3, 4)), S("ij->ji", x(3, 4)), S("ij->", x(3, 4)),
            S("i,j->ij", x(3), x(4)), S("...ij,...jk->...ik", x(2, 1, 3, 4), x(5, 4, 2)),
            S("bhqd,bhkd->bhqk", x(2, 3, 4, 5), x(2, 3, 6, 5)), S("ij,jk,kl->il", x(3, 4), x(4, 5), x(5, 2)),
            S("bn,anm,bm->ba", x(2, 3), x(4, 3, 5), x(2, 5)), S("i,i,i->i", x(4), x(4), x(4)), S("ba", x(3, 4)),
            S("...->...", x(2, 3)), S("i->", x(0)), S("", x()), S("ij,jk->ik", [x(2, 3), x(3, 2)])]


op("einsum", einsum_samples, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("mv", lambda rng, dtype: [S(make(rng, (3, 4), dtype, -1, 1), make(rng, (4,), dtype, -1, 1)),
                             S(make(rng, (0, 2), dtype), make(rng, (2,), dtype))],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("dot", lambda rng, dtype: [S(make(rng, (5,), dtype, -1, 1), make(rng, (5,), dtype, -1, 1)),
                              S(make(rng, (0,), dtype), make(rng, (0,), dtype))],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("outer", lambda rng, dtype: [S(make(rng, (3,), dtype), make(rng, (4,), dtype)),
                                S(make(rng, (0,), dtype), make(rng, (2,), dtype))], method=True)
op("addmm", lambda rng, dtype: [S(make(rng, (3, 5), dtype, -1, 1), make(rng, (3, 4), dtype, -1, 1),
                                  make(rng, (4, 5), dtype, -1, 1)),
                                S(make(rng, (5,), dtype, -1, 1), make(rng, (2, 4), dtype, -1, 1),
                                  make(rng, (4, 5), dtype, -1, 1), beta=0.5, alpha=2),
                                S(make(rng, (512,), dtype, -1, 1), make(rng, (64, 128), dtype, -1, 1),
                                  make(rng, (128, 512), dtype, -1, 1), beta=0.5, alpha=2)],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("baddbmm", lambda rng, dtype: [S(make(rng, (2, 3, 5), dtype, -1, 1), make(rng, (2, 3, 4), dtype, -1, 1),
                                    make(rng, (2, 4, 5), dtype, -1, 1)),
                                  S(make(rng, (3, 1), dtype, -1, 1), make(rng, (2, 3, 4), dtype, -1, 1),
                                    make(rng, (2, 4, 2), dtype, -1, 1), beta=2, alpha=0.5),
                                  S(make(rng, (4, 64, 256), dtype, -1, 1), make(rng, (4, 64, 64), dtype, -1, 1),
                                    make(rng, (4, 64, 256), dtype, -1, 1), beta=2, alpha=0.5)],
   method=True, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("nn.functional.bilinear", lambda rng, dtype: [
    S(make(rng, (3, 4), dtype, -1, 1), make(rng, (3, 5), dtype, -1, 1), make(rng, (2, 4, 5), dtype, -1, 1),
      make(rng, (2,), dtype)),
    S(make(rng, (2, 3, 4), dtype, -1, 1), make(rng, (2, 3, 2), dtype, -1, 1), make(rng, (3, 4, 2), dtype, -1, 1)),
    S(make(rng, (4,), dtype, -1, 1), make(rng, (3,), dtype, -1, 1), make(rng, (2, 4, 3), dtype, -1, 1)),
    S(make(rng, (0, 2), dtype), make(rng, (0, 3), dtype), make(rng, (2, 2, 3), dtype), make(rng, (2,), dtype))],
   tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)
op("nn.functional.linear", lambda rng, dtype: [
    S(make(rng, (3, 4), dtype, -1, 1), make(rng, (5, 4), dtype, -1, 1), make(rng, (5,), dtype)),
    S(make(rng, (2, 3, 4), dtype, -1, 1), make(rng, (2, 4), dtype, -1, 1)),
    S(make(rng, (4,), dtype, -1, 1), make(rng, (3, 4), dtype, -1, 1), make(rng, (3,), dtype)),
    S(make(rng, (0, 4), dtype), make(rng, (2, 4), dtype), make(rng, (2,), dtype))],
   tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL)


# nn.functional: activations.
def f_unary(kwargs=(), low=-3.0, high=3.0):
    return unary(low, high, kwargs=kwargs)


op("nn.functional.relu", f_unary(({"inplace": False},)), dtypes=NUMERIC)
op("nn.functional.relu", unary(), call=lambda lib, x: lib.nn.functional.relu(x.clone() if x.requires_grad else x,
                                                                             inplace=True), dtypes=NUMERIC)
op("nn.functional.gelu", f_unary(({"approximate": "tanh"},)))
op("nn.functional.silu", f_unary())
op("nn.functional.leaky_relu", f_unary(({"negative_slope": 0.3},)))
op("nn.functional.elu", f_unary(({"alpha": 2.0},)))
for _name in ("silu", "leaky_relu", "elu"):
    op("nn.functional." + _name, unary(),
       call=lambda lib, x, _name=_name: getattr(lib.nn.functional, _name)(x.clone() if x.requires_grad else x,
                                                                           inplace=True))
op("nn.functional.softplus", f_unary(({"beta": 0.5, "threshold": 3.0},), -30.0, 30.0))
op("nn.functional.hardtanh", f_unary(({"min_val": -0.5, "max_val": 2.0},)))
op("nn.functional.relu6", f_unary(low=-8.0, high=8.0), dtypes=NUMERIC)
op("nn.functional.mish", f_unary(low=-6.0, high=6.0))
for _name in ("hardtanh", "relu6"):
    op("nn.functional." + _name, unary(-8.0, 8.0),
       call=lambda lib, x, _name=_name: getattr(lib.nn.functional, _name)(x.clone() if x.requires_grad else x,
                                                                           inplace=True))


def normalize_samples(rng, dtype):
    x = lambda shape: make(rng, shape, dtype, -2, 2)  # noqa: E731
    out = [S(x((3, 4))), S(x((3, 4)), dim=0), S(x((2, 3, 4)), p=1.0, dim=-1), S(x((5,)), dim=0), S(x((2, 0)), dim=1)]
    if dtype in ("float32", "float64"):  # norms below eps (which half precision cannot hold)
        out.append(S(make(rng, (2, 3), dtype, -1e-14, 1e-14), eps=1e-12))
    return out


op("nn.functional.normalize", normalize_samples)


def cosine_samples(rng, dtype):
    x = lambda shape: make(rng, shape, dtype, -2, 2)  # noqa: E731
    return [S(x((3, 4)), x((3, 4))), S(x((3, 4)), x((3, 4)), dim=0), S(x((2, 3, 4)), x((3, 4)), dim=-1),
            S(x((4, 5)), x((4, 5)), eps=0.5)]


op("nn.functional.cosine_similarity", cosine_samples)
op("nn.functional.glu", lambda rng, dtype: [S(make(rng, (3, 4), dtype)), S(make(rng, (4, 3), dtype), dim=0),
                                            S(make(rng, (2, 3, 6), dtype), dim=-1), S(make(rng, (0, 2), dtype))])
op("nn.functional.sigmoid", f_unary())
op("nn.functional.tanh", f_unary())


def softmax_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    return [S(x((3, 4)), 1), S(x((2, 3, 4)), 0), S(x((5,)), -1), S(x(()), 0), S(x((0, 3)), 1),
            S(x((2, 3)), dim=1, dtype=Dt("float64"))]


op("nn.functional.softmax", softmax_samples, aliases=("softmax",))
op("nn.functional.log_softmax", softmax_samples, aliases=("log_softmax",))
op("Tensor.softmax", lambda rng, dtype: softmax_samples(rng, dtype)[:5], call=method_call("softmax"))
op("Tensor.log_softmax", lambda rng, dtype: softmax_samples(rng, dtype)[:5], call=method_call("log_softmax"))

_NORM_TOL = {"float32": (1e-4, 1e-4), "bfloat16": (3e-2, 5e-2), "float16": (5e-3, 5e-3)}


def layer_norm_samples(rng, dtype):
    def x(shape, low=-3, high=3):
        return make(rng, shape, dtype, low, high)

    return [S(x((3, 4)), (4,)), S(x((2, 3, 4)), (3, 4), x((3, 4)), x((3, 4))), S(x((5, 6)), (6,), x((6,)), None, 1e-3),
            S(x((2, 3, 4)), [4], None, x((4,))), S(x((0, 3)), (3,))]


op("nn.functional.layer_norm", layer_norm_samples, aliases=("layer_norm",), tol=_NORM_TOL, grad_tol=_NORM_TOL)


def batch_norm_samples(rng, dtype):
    def x(shape, low=-3, high=3, **kw):
        return make(rng, shape, dtype, low, high, **kw)

    def stats(c):
        return x((c,), requires_grad=False), x((c,), 0.5, 2.0, requires_grad=False)

    return [S(x((4, 3)), *stats(3), x((3,)), x((3,)), True),
            S(x((2, 3, 4, 5)), *stats(3), None, None, True, 0.2),
            S(x((2, 3, 4)), *stats(3), x((3,)), x((3,)), False),
            S(x((4, 2, 3, 3)), None, None, x((2,)), x((2,)), True, eps=1e-3),
            S(x((3, 2)), *stats(2), training=False)]


op("nn.functional.batch_norm", batch_norm_samples, compare_inputs=True, tol=_NORM_TOL, grad_tol=_NORM_TOL)


def group_norm_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    return [S(x((2, 4, 3)), 2), S(x((2, 6, 2, 2)), 3, x((6,)), x((6,))), S(x((3, 4)), 2, x((4,)), x((4,)), 1e-3),
            S(x((1, 4, 5)), 1, x((4,)))]


op("nn.functional.group_norm", group_norm_samples, aliases=("group_norm",), tol=_NORM_TOL, grad_tol=_NORM_TOL)


def instance_norm_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    def stats(c):  # running statistics are written, not differentiated
        return (make(rng, (c,), dtype, -1, 1, requires_grad=False), make(rng, (c,), dtype, 0.5, 2, requires_grad=False))

    return [S(x((2, 3, 5))), S(x((2, 3, 4, 4)), weight=x((3,)), bias=x((3,)), eps=1e-3),
            S(x((3, 2, 6)), *stats(2), x((2,)), x((2,)), True, 0.3),
            S(x((2, 2, 3, 3)), *stats(2), use_input_stats=False)]


op("nn.functional.instance_norm", instance_norm_samples, tol=_NORM_TOL, grad_tol=_NORM_TOL, compare_inputs=True)
op("nn.functional.prelu", lambda rng, dtype: [S(make(rng, (3, 4), dtype), make(rng, (1,), dtype, 0, 0.5)),
                                              S(make(rng, (2, 3, 4), dtype), make(rng, (3,), dtype, 0, 0.5)),
                                              S(make(rng, (5,), dtype), make(rng, (1,), dtype, 0, 0.5))])


def embedding_samples(rng, dtype):
    weight = make(rng, (10, 3), dtype)
    return [S(index_arr(rng, (4,), 10), weight), S(index_arr(rng, (2, 3), 10), make(rng, (10, 3), dtype)),
            S(Arr(np.array([0, 2, 0, 5]), "int64", requires_grad=False), make(rng, (6, 4), dtype), padding_idx=0),
            S(index_arr(rng, (0,), 10), make(rng, (10, 2), dtype))]


# the composite activations (include/meshflow/ops/functional.h)
for _name, _kw in (("hardsigmoid", ()), ("hardswish", ()), ("selu", ()), ("celu", ({"alpha": 0.5},)),
                   ("softsign", ()), ("tanhshrink", ()), ("logsigmoid", ()), ("softshrink", ({"lambd": 0.3},)),
                   ("hardshrink", ({"lambd": 0.7},)), ("softmin", ({"dim": 0},)),
                   ("threshold", ({"threshold": 0.2, "value": -3.0},))):
    # away from the kinks (|x| = 3, lambd, threshold), where one-sided derivatives differ by convention
    op("nn.functional." + _name, unary(-5.0, 5.0, kwargs=_kw) if _name not in ("softmin", "threshold") else
       (lambda kw: lambda rng, dtype: [S(make(rng, shape, dtype, -5.0, 5.0), **kw[0])
                                       for shape in ((3, 4), (5,), (2, 0, 3))])(_kw))
op("nn.functional.embedding", embedding_samples)


def embedding_bag_samples(rng, dtype):
    def ints(values):
        return Arr(np.array(values), "int64", requires_grad=False)

    flat = ints([1, 4, 2, 0, 3, 3, 5, 1])
    return [S(index_arr(rng, (3, 4), 10), make(rng, (10, 3), dtype)),
            S(index_arr(rng, (2, 3), 10), make(rng, (10, 3), dtype), mode="sum"),
            S(index_arr(rng, (2, 5), 10), make(rng, (10, 2), dtype), mode="max"),
            S(flat, make(rng, (6, 3), dtype), ints([0, 2, 2, 5])),  # an empty bag
            S(flat, make(rng, (6, 3), dtype), ints([0, 3, 8]), mode="max", include_last_offset=True),
            S(flat, make(rng, (6, 3), dtype), ints([0, 1, 6]), mode="sum", per_sample_weights=make(rng, (8,), dtype)),
            S(flat, make(rng, (6, 4), dtype), ints([0, 4]), mode="mean", padding_idx=3),
            S(flat, make(rng, (6, 4), dtype), ints([0, 4]), mode="max", padding_idx=1),
            S(index_arr(rng, (0,), 5), make(rng, (5, 2), dtype), ints([0, 0]), mode="sum")]


op("nn.functional.embedding_bag", embedding_bag_samples, dtypes=("float16", "float32", "float64"))  # torch: no bf16


def dropout_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, nonzero=True)

    return [S(x((3, 4)), 0.0), S(x((2, 3)), 0.5, False), S(x((4,)), 1.0), S(x((0, 2)), 0.3), S(x(()), 0.0, True)]


op("nn.functional.dropout", dropout_samples)
for _n, _shape in (("dropout1d", (4, 6, 5)), ("dropout2d", (4, 6, 3, 3)), ("dropout3d", (3, 4, 2, 2, 2))):
    op("nn.functional." + _n, lambda rng, dtype, _shape=_shape: [S(make(rng, _shape, dtype), 0.5, False),
                                                                  S(make(rng, _shape, dtype), 0.0)])
op("nn.functional.dropout", lambda rng, dtype: [S(make(rng, (30, 40), dtype, nonzero=True), 0.5),
                                                S(make(rng, (10,), dtype, nonzero=True), 0.2, True)],
   check="meta", validate=validate_dropout)
op("nn.functional.dropout", lambda rng, dtype: [S(make(rng, (3, 4), dtype), 0.0, True, True)],
   call=lambda lib, x, *args: lib.nn.functional.dropout(x.clone() if x.requires_grad else x, *args))

_LOSS_TOL = {"float32": (1e-5, 1e-5), "bfloat16": (3e-2, 3e-2), "float16": (5e-3, 5e-3)}


def target_arr(rng, shape, classes, ignore=False):
    values = rng.integers(0, classes, size=shape)
    if ignore and values.size:
        values.reshape(-1)[0] = -100
    return Arr(values, "int64", requires_grad=False)


def class_weight(rng, classes, dtype):  # PyTorch does not differentiate class weights
    return make(rng, (classes,), dtype, 0.5, 2.0, requires_grad=False)


def cross_entropy_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    return [S(x((4, 5)), target_arr(rng, (4,), 5)),
            S(x((4, 5)), target_arr(rng, (4,), 5, ignore=True), reduction="sum"),
            S(x((3, 4)), target_arr(rng, (3,), 4), class_weight(rng, 4, dtype), reduction="none"),
            S(x((2, 3, 4, 2)), target_arr(rng, (2, 4, 2), 3)),
            S(x((5, 3)), target_arr(rng, (5,), 3, ignore=True), class_weight(rng, 3, dtype)),
            S(x((4, 5)), target_arr(rng, (4,), 5), label_smoothing=0.1),
            S(x((3,)), Arr(np.array(1), "int64", requires_grad=False)),
            S(x((4, 5)), make(rng, (4, 5), dtype, 0, 1)),
            S(x((0, 3)), target_arr(rng, (0,), 3), reduction="sum")]


op("nn.functional.cross_entropy", cross_entropy_samples, tol=_LOSS_TOL, grad_tol=_LOSS_TOL)


def nll_loss_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -3, 0)

    return [S(x((4, 5)), target_arr(rng, (4,), 5)),
            S(x((4, 5)), target_arr(rng, (4,), 5, ignore=True), reduction="none"),
            S(x((3, 4)), target_arr(rng, (3,), 4), class_weight(rng, 4, dtype)),
            S(x((2, 3, 4)), target_arr(rng, (2, 4), 3), reduction="sum"),
            S(x((3,)), Arr(np.array(2), "int64", requires_grad=False)),
            S(x((4, 3)), target_arr(rng, (4,), 3), ignore_index=1)]


op("nn.functional.nll_loss", nll_loss_samples, tol=_LOSS_TOL, grad_tol=_LOSS_TOL)
op("nn.functional.mse_loss", lambda rng, dtype: [S(make(rng, (3, 4), dtype), make(rng, (3, 4), dtype)),
                                                 S(make(rng, (2, 3), dtype), make(rng, (2, 3), dtype), reduction="sum"),
                                                 S(make(rng, (5,), dtype), make(rng, (5,), dtype), reduction="none"),
                                                 S(make(rng, (0, 2), dtype), make(rng, (0, 2), dtype),
                                                   reduction="sum")],
   tol=_LOSS_TOL, grad_tol=_LOSS_TOL)



def pointwise_loss_samples(*kwargs):
    def samples(rng, dtype):
        x = lambda shape: make(rng, shape, dtype)  # noqa: E731
        return ([S(x((3, 4)), x((3, 4))), S(x((2, 3)), x((2, 3)), reduction="sum"),
                 S(x((5,)), x((5,)), reduction="none"), S(x((0, 2)), x((0, 2)), reduction="sum")] +
                [S(x((3, 4)), x((3, 4)), **kw) for kw in kwargs])
    return samples


op("nn.functional.l1_loss", pointwise_loss_samples(), tol=_LOSS_TOL, grad_tol=_LOSS_TOL)
op("nn.functional.smooth_l1_loss", pointwise_loss_samples({"beta": 0.5}, {"beta": 0.0}, {"beta": 4.0}),
   tol=_LOSS_TOL, grad_tol=_LOSS_TOL)
op("nn.functional.huber_loss", pointwise_loss_samples({"delta": 0.5}, {"delta": 4.0}), tol=_LOSS_TOL,
   grad_tol=_LOSS_TOL)


def weight(arr):  # PyTorch does not differentiate loss weights
    arr.requires_grad = False
    return arr


def probability_loss_samples(rng, dtype):
    def p(shape):
        return make(rng, shape, dtype, 0.05, 0.95)

    return [S(p((3, 4)), p((3, 4))), S(p((2, 3)), p((2, 3)), weight(p((2, 3))), reduction="sum"),
            S(p((5,)), p((5,)), weight(p((5,))), reduction="none"), S(p((4, 3)), p((4, 3)), weight(p((3,)))),
            S(p((0, 2)), p((0, 2)), reduction="sum")]


op("nn.functional.binary_cross_entropy", probability_loss_samples, tol=_LOSS_TOL, grad_tol=_LOSS_TOL)


def kl_div_samples(rng, dtype):
    def logp(shape):
        return make(rng, shape, dtype, -3, 0)

    def q(shape):  # with exact zeros, where torch's target gradient is NaN (0/0): not compared
        return weight(make(rng, shape, dtype, 0.0, 1.0, grid=0.25))

    return [S(logp((3, 4)), q((3, 4)), reduction="batchmean"), S(logp((2, 3)), q((2, 3)), reduction="sum"),
            S(logp((5,)), q((5,)), reduction="none"), S(logp((2, 3)), logp((2, 3)), reduction="batchmean",
                                                          log_target=True),
            S(logp((4,)), logp((4,)), reduction="sum", log_target=True), S(logp(()), q(()), reduction="batchmean")]


op("nn.functional.kl_div", kl_div_samples, tol=_LOSS_TOL, grad_tol=_LOSS_TOL)


def bce_samples(rng, dtype):
    def x(shape, low=-3, high=3):
        return make(rng, shape, dtype, low, high)

    return [S(x((3, 4)), x((3, 4), 0, 1)),
            S(x((2, 3)), x((2, 3), 0, 1), weight(x((2, 3), 0.5, 2)), reduction="sum"),
            S(x((4, 3)), x((4, 3), 0, 1), pos_weight=weight(x((3,), 0.5, 3))),
            S(x((5,)), x((5,), 0, 1), weight(x((5,), 0.5, 2)), reduction="none", pos_weight=weight(x((5,), 0.5, 3)))]


op("nn.functional.binary_cross_entropy_with_logits", bce_samples, tol=_LOSS_TOL, grad_tol=_LOSS_TOL)

def attention_reference(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """scaled_dot_product_attention in PyTorch 1.13, which has no fused one."""
    import torch

    scores = q @ k.transpose(-2, -1) * (q.size(-1) ** -0.5 if scale is None else scale)
    if is_causal:
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    return torch.softmax(scores, -1) @ v


def attention_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1)

    keep = make(rng, (3, 5), "bool")
    keep.data[:, 0] = True  # every query attends to something
    return [S(x((2, 3, 4)), x((2, 5, 4)), x((2, 5, 6))),
            S(x((2, 2, 3, 4)), x((2, 2, 5, 4)), x((2, 2, 5, 3)), keep),
            S(x((3, 4)), x((5, 4)), x((5, 2)), x((3, 5))),
            S(x((2, 4, 3)), x((2, 4, 3)), x((2, 4, 3)), is_causal=True),
            S(x((1, 3, 4)), x((1, 5, 4)), x((1, 5, 4)), None, 0.0, False, scale=0.3)]


op("nn.functional.scaled_dot_product_attention", attention_samples, tol=_MATMUL_TOL, grad_tol=_MATMUL_TOL,
   call=lambda lib, *args, **kwargs: (lib.nn.functional.scaled_dot_product_attention(*args, **kwargs)
                                      if lib.__name__ == "meshflow" else attention_reference(*args, **kwargs)))

_CONV_TOL = {"float32": (1e-4, 1e-4), "bfloat16": (3e-2, 6e-2), "float16": (5e-3, 5e-3)}


def conv_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1)

    return [S(x((2, 3, 6, 6)), x((4, 3, 3, 3)), x((4,))),
            S(x((1, 2, 7, 5)), x((3, 2, 3, 2)), None, 2, 1),
            S(x((2, 4, 6, 6)), x((4, 2, 3, 3)), x((4,)), padding=(1, 2), groups=2),
            S(x((1, 2, 8, 8)), x((2, 2, 3, 3)), dilation=2, stride=(1, 2)),
            S(x((2, 3, 5, 5)), x((2, 3, 3, 3)), x((2,)), padding="same"),
            S(x((3, 5, 5)), x((2, 3, 1, 1)), padding="valid"),
            S(x((0, 2, 4, 4)), x((3, 2, 3, 3))),
            S(x((1, 2, 5, 6)), x((3, 2, 2, 4)), padding="same", dilation=(2, 1))]


op("nn.functional.conv2d", conv_samples, aliases=("conv2d",), tol=_CONV_TOL, grad_tol=_CONV_TOL)


def conv3d_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1)

    return [S(x((2, 3, 4, 5, 4)), x((4, 3, 3, 2, 3)), x((4,))),
            S(x((1, 2, 5, 4, 6)), x((3, 2, 2, 3, 2)), None, 2, 1),
            S(x((2, 4, 4, 4, 4)), x((4, 2, 3, 1, 3)), x((4,)), padding=(1, 0, 2), groups=2),
            S(x((1, 2, 7, 6, 6)), x((2, 2, 2, 2, 3)), dilation=(2, 1, 2), stride=(1, 2, 3)),
            S(x((1, 3, 4, 5, 3)), x((2, 3, 2, 3, 2)), x((2,)), padding="same"),
            S(x((3, 4, 4, 4)), x((2, 3, 1, 2, 1)), padding="valid"),
            S(x((0, 2, 3, 3, 3)), x((3, 2, 2, 2, 2)))]


op("nn.functional.conv3d", conv3d_samples, aliases=("conv3d",), tol=_CONV_TOL, grad_tol=_CONV_TOL)


# Transposed convolutions: strides with output_padding, groups, dilation
# (output_padding below the dilation only, and above the padding: the
# output's last elements come from no input), unbatched and empty batches.
def conv_transpose1d_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1)

    return [S(x((2, 4, 5)), x((4, 3, 3)), x((3,))),
            S(x((1, 2, 6)), x((2, 3, 2)), None, 2, 1, 1),
            S(x((2, 4, 5)), x((4, 2, 3)), x((4,)), stride=3, output_padding=2, groups=2),
            S(x((1, 2, 7)), x((2, 2, 3)), dilation=2, output_padding=1),
            S(x((3, 5)), x((3, 2, 2)), padding=1, stride=(2,)),
            S(x((0, 2, 4)), x((2, 3, 3)), x((3,)))]


def conv_transpose2d_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1)

    return [S(x((2, 4, 5, 5)), x((4, 3, 3, 3)), x((3,))),
            S(x((1, 2, 4, 6)), x((2, 3, 2, 3)), None, 2, 1, 1),
            S(x((2, 4, 3, 5)), x((4, 2, 3, 2)), x((4,)), stride=(3, 2), padding=(1, 0), output_padding=(2, 1),
              groups=2),
            S(x((1, 2, 5, 6)), x((2, 2, 3, 3)), dilation=(2, 3), output_padding=(1, 2), padding=(0, 1)),
            S(x((3, 4, 5)), x((3, 2, 2, 2)), x((2,)), stride=2),
            S(x((0, 2, 4, 4)), x((2, 3, 3, 3))),
            S(x((2, 6, 3, 3)), x((6, 1, 3, 3)), x((3,)), padding=1, groups=3)]


def conv_transpose3d_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1)

    return [S(x((2, 3, 3, 4, 3)), x((3, 2, 2, 3, 2)), x((2,))),
            S(x((1, 2, 3, 3, 4)), x((2, 3, 2, 2, 2)), None, 2, 1, 1),
            S(x((1, 4, 3, 2, 3)), x((4, 1, 3, 2, 2)), x((2,)), stride=(2, 3, 1), output_padding=(1, 2, 0), groups=2),
            S(x((1, 2, 4, 3, 3)), x((2, 2, 2, 2, 3)), dilation=(1, 2, 2), output_padding=(0, 1, 1)),
            S(x((2, 3, 3, 3)), x((2, 2, 2, 2, 2)), padding=(1, 0, 1)),
            S(x((0, 2, 2, 2, 2)), x((2, 3, 2, 2, 2)))]


def conv_transpose_call(name, top_level):
    """call= for the transposed convolutions: PyTorch 1.13's bfloat16 CPU path
    takes them for plain convolutions and raises, so in bfloat16 the torch
    reference runs in float32 (through casts, so gradients flow) and is
    rounded back, as test_ops does for ops PyTorch lacks in 16 bits."""
    def call(lib, x, weight, bias=None, *args, **kwargs):
        fn = getattr(lib if top_level else lib.nn.functional, name)
        if lib.__name__ != "torch" or x.dtype != lib.bfloat16:
            return fn(x, weight, bias, *args, **kwargs)
        bias = None if bias is None else bias.float()
        return fn(x.float(), weight.float(), bias, *args, **kwargs).bfloat16()

    return call


for _dims, _samples in ((1, conv_transpose1d_samples), (2, conv_transpose2d_samples), (3, conv_transpose3d_samples)):
    for _top_level in (False, True):
        _name = f"conv_transpose{_dims}d"
        op(_name if _top_level else "nn.functional." + _name, _samples, tol=_CONV_TOL, grad_tol=_CONV_TOL,
           call=conv_transpose_call(_name, _top_level))


def pool_input(rng, dtype, shape):
    return make(rng, shape, dtype, distinct=True)


def max_pool_samples(rng, dtype):
    return [S(pool_input(rng, dtype, (2, 3, 6, 6)), 2), S(pool_input(rng, dtype, (1, 2, 7, 5)), 3, 2, 1),
            S(pool_input(rng, dtype, (2, 2, 8, 8)), (2, 3), dilation=2),
            S(pool_input(rng, dtype, (1, 1, 5, 5)), 2, ceil_mode=True),
            S(pool_input(rng, dtype, (3, 6, 6)), 3, 1, 1),
            S(pool_input(rng, dtype, (1, 2, 6, 6)), 2, return_indices=True)]


op("nn.functional.max_pool2d", max_pool_samples)
op("max_pool2d", lambda rng, dtype: max_pool_samples(rng, dtype)[:5])
op("nn.functional.max_pool2d_with_indices", lambda rng, dtype: max_pool_samples(rng, dtype)[:5])


def avg_pool_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    return [S(x((2, 3, 6, 6)), 2), S(x((1, 2, 7, 5)), 3, 2, 1),
            S(x((1, 2, 7, 5)), 3, 2, 1, count_include_pad=False), S(x((1, 1, 5, 5)), 2, ceil_mode=True),
            S(x((3, 6, 6)), (2, 3), (1, 2), (1, 1))]


op("nn.functional.avg_pool2d", avg_pool_samples, tol=_NORM_TOL)


def conv1d_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype, -1, 1)

    return [S(x((2, 3, 9)), x((4, 3, 3)), x((4,))), S(x((1, 2, 7)), x((3, 2, 2)), None, 2, 1),
            S(x((2, 4, 8)), x((4, 2, 3)), x((4,)), padding=(1,), groups=2),
            S(x((1, 2, 12)), x((2, 2, 3)), dilation=2, stride=(3,)),
            S(x((2, 3, 7)), x((2, 3, 4)), x((2,)), padding="same"), S(x((3, 5)), x((2, 3, 1)), padding="valid"),
            S(x((0, 2, 4)), x((3, 2, 3)))]


op("nn.functional.conv1d", conv1d_samples, aliases=("conv1d",), tol=_CONV_TOL, grad_tol=_CONV_TOL)
op("nn.functional.max_pool1d", lambda rng, dtype: [S(pool_input(rng, dtype, (2, 3, 9)), 2),
                                                   S(pool_input(rng, dtype, (1, 2, 8)), 3, 2, 1),
                                                   S(pool_input(rng, dtype, (2, 7)), (2,), dilation=2, ceil_mode=True)],
   aliases=("max_pool1d",))
op("nn.functional.avg_pool1d", lambda rng, dtype: [S(make(rng, (2, 3, 9), dtype), 2),
                                                   S(make(rng, (1, 2, 8), dtype), 3, 2, 1, count_include_pad=False),
                                                   S(make(rng, (2, 7), dtype), 2, ceil_mode=True)],
   aliases=("avg_pool1d",), tol=_NORM_TOL)
op("nn.functional.adaptive_avg_pool1d", lambda rng, dtype: [S(make(rng, (2, 3, 9), dtype), 1),
                                                            S(make(rng, (1, 2, 7), dtype), 3),
                                                            S(make(rng, (3, 5), dtype), (5,))],
   aliases=("adaptive_avg_pool1d",), tol=_NORM_TOL)
op("nn.functional.pixel_shuffle", lambda rng, dtype: [S(make(rng, (2, 8, 3, 3), dtype), 2),
                                                      S(make(rng, (9, 2, 1), dtype), 3),
                                                      S(make(rng, (2, 1, 4, 1, 2), dtype), 2)],
   aliases=("pixel_shuffle",), dtypes=ALL)
op("nn.functional.pixel_unshuffle", lambda rng, dtype: [S(make(rng, (2, 2, 4, 6), dtype), 2),
                                                        S(make(rng, (1, 6, 3), dtype), 3)],
   aliases=("pixel_unshuffle",), dtypes=ALL)
op("nn.functional.adaptive_avg_pool2d", lambda rng, dtype: [S(make(rng, (2, 3, 6, 6), dtype), 1),
                                                            S(make(rng, (1, 2, 7, 5), dtype), (3, 2)),
                                                            S(make(rng, (3, 5, 5), dtype), (5, 5)),
                                                            S(make(rng, (1, 1, 4, 6), dtype), (3, 4))],
   tol=_NORM_TOL)


def adaptive_max_pool2d_samples(rng, dtype):
    def x(shape):
        return pool_input(rng, dtype, shape)

    return [S(x((2, 3, 7, 5)), (3, 2)), S(x((1, 2, 6, 6)), 4, return_indices=True), S(x((3, 5, 4)), (None, 3)),
            S(x((1, 1, 3, 4)), (5, 6), True), S(x((0, 2, 4, 4)), 2), S(x((2, 2, 4, 6)), [1, None])]


def adaptive_max_pool1d_samples(rng, dtype):
    def x(shape):
        return pool_input(rng, dtype, shape)

    return [S(x((2, 3, 9)), 4), S(x((1, 2, 7)), (3,), return_indices=True), S(x((3, 5)), 5),
            S(x((1, 2, 3)), 7, True), S(x((0, 2, 4)), 2)]


op("nn.functional.adaptive_max_pool2d", adaptive_max_pool2d_samples)
op("nn.functional.adaptive_max_pool2d_with_indices", adaptive_max_pool2d_samples)
op("nn.functional.adaptive_max_pool1d", adaptive_max_pool1d_samples)
op("nn.functional.adaptive_max_pool1d_with_indices", adaptive_max_pool1d_samples)
# torch.adaptive_max_pool1d(input, output_size) always returns (values, indices).
op("adaptive_max_pool1d", lambda rng, dtype: [S(s.args[0], s.args[1]) for s in adaptive_max_pool1d_samples(rng, dtype)])


def max_pool3d_samples(rng, dtype):
    def x(shape):
        return pool_input(rng, dtype, shape)

    return [S(x((2, 3, 4, 5, 4)), 2), S(x((1, 2, 5, 4, 6)), 3, 2, 1),
            S(x((1, 2, 6, 5, 6)), (2, 1, 3), dilation=(2, 1, 1), padding=(1, 0, 1)),
            S(x((1, 1, 4, 5, 5)), 2, ceil_mode=True), S(x((2, 4, 4, 4)), 3, 1, 1), S(x((0, 2, 3, 3, 3)), 2),
            S(x((1, 2, 4, 4, 4)), 2, return_indices=True)]


def avg_pool3d_samples(rng, dtype):
    def x(shape):
        return make(rng, shape, dtype)

    return [S(x((2, 3, 4, 5, 4)), 2), S(x((1, 2, 5, 4, 6)), 3, 2, 1),
            S(x((1, 2, 5, 4, 6)), 3, 2, 1, count_include_pad=False), S(x((1, 1, 5, 5, 5)), 2, ceil_mode=True),
            S(x((3, 4, 6, 6)), (2, 3, 2), (1, 2, 1), (1, 1, 0)), S(x((0, 2, 3, 3, 3)), 2)]


op("nn.functional.max_pool3d", max_pool3d_samples)
op("max_pool3d", lambda rng, dtype: max_pool3d_samples(rng, dtype)[:6])
op("nn.functional.max_pool3d_with_indices", lambda rng, dtype: max_pool3d_samples(rng, dtype)[:6])
op("nn.functional.avg_pool3d", avg_pool3d_samples, tol=_NORM_TOL)
op("nn.functional.adaptive_avg_pool3d", lambda rng, dtype: [S(make(rng, (2, 3, 4, 6, 5), dtype), 1),
                                                            S(make(rng, (1, 2, 5, 7, 4), dtype), (3, 2, 4)),
                                                            S(make(rng, (3, 4, 5, 5), dtype), (None, 2, 3)),
                                                            S(make(rng, (1, 1, 3, 4, 2), dtype), (5, 4, 3))],
   tol=_NORM_TOL)
op("nn.functional.pad", lambda rng, dtype: [S(make(rng, (3, 4), dtype), (1, 2)),
                                            S(make(rng, (2, 3, 4), dtype), (1, 0, 2, 1), value=scalar_of(dtype)),
                                            S(make(rng, (3, 5), dtype), (-1, 2, 0, -1)),
                                            S(make(rng, (2,), dtype), [0, 0], "constant", 0)], dtypes=ALL)
op("nn.functional.one_hot", lambda rng, dtype: [S(index_arr(rng, (4,), 5)), S(index_arr(rng, (2, 3), 3), 5),
                                                S(index_arr(rng, (0,), 3), 3)],
   dtypes=("int64",), differentiable=False)


# Resampling: interpolate's modes (output sizes that are and are not multiples, downsampling, scale
# factors used by the kernels or recomputed, an empty batch) and F.pad's reflect/replicate/circular.
def _resample_input(rng, dtype, *shape):
    return make(rng, shape, dtype, -2, 2)


def nearest_samples(mode):
    def samples(rng, dtype):
        x = functools.partial(_resample_input, rng, dtype)
        return [S(x(2, 3, 5), size=8, mode=mode), S(x(2, 3, 5), scale_factor=1.7, mode=mode),
                S(x(1, 2, 7), size=3, mode=mode), S(x(2, 2, 4, 5), scale_factor=(2, 0.6), mode=mode),
                S(x(2, 2, 4, 5), size=(6, 3), mode=mode), S(x(1, 2, 3, 4, 5), size=(5, 2, 7), mode=mode),
                S(x(1, 1, 3, 4, 5), scale_factor=1.5, mode=mode, recompute_scale_factor=True),
                S(x(0, 2, 4, 4), size=7, mode=mode), S(x(2, 1, 10), scale_factor=1.05, mode=mode),
                S(x(2, 1, 5), scale_factor=2.1, mode=mode), S(x(1, 2, 6, 5), scale_factor=0.45, mode=mode)]

    return samples


def linear_samples(rng, dtype):
    x = functools.partial(_resample_input, rng, dtype)
    return [S(x(2, 3, 5), size=8, mode="linear"), S(x(2, 3, 5), scale_factor=1.7, mode="linear", align_corners=True),
            S(x(2, 2, 4, 5), size=(7, 3), mode="bilinear"),
            S(x(1, 2, 3, 4, 5), size=(5, 2, 7), mode="trilinear"),
            S(x(1, 2, 7), size=3, mode="linear"), S(x(1, 2, 7), size=1, mode="linear"),
            S(x(1, 2, 7), size=1, mode="linear", align_corners=True),
            S(x(2, 1, 10), scale_factor=1.05, mode="linear"),
            S(x(2, 2, 4, 5), scale_factor=(1.5, 0.7), mode="bilinear", align_corners=True),
            S(x(1, 2, 4, 5), scale_factor=2.3, mode="bilinear", recompute_scale_factor=True),
            S(x(1, 2, 4, 5), scale_factor=2.3, mode="bilinear", recompute_scale_factor=False),
            S(x(0, 2, 3, 3), size=5, mode="bilinear"),
            S(x(1, 1, 3, 4, 2), scale_factor=1.5, mode="trilinear", align_corners=True),
            S(x(2, 1, 3, 5, 4), scale_factor=(0.7, 1.3, 2.0), mode="trilinear")]


def bicubic_samples(rng, dtype):
    x = functools.partial(_resample_input, rng, dtype)
    return [S(x(2, 2, 4, 5), size=(7, 3), mode="bicubic"),
            S(x(1, 2, 5, 5), scale_factor=1.6, mode="bicubic", align_corners=True),
            S(x(1, 1, 6, 7), scale_factor=(0.6, 1.3), mode="bicubic"),
            S(x(1, 1, 10, 10), scale_factor=1.05, mode="bicubic"), S(x(0, 1, 3, 3), size=4, mode="bicubic"),
            S(x(1, 2, 3, 4), size=1, mode="bicubic"), S(x(1, 1, 4, 3), scale_factor=2, mode="bicubic")]


def area_samples(rng, dtype):
    x = functools.partial(_resample_input, rng, dtype)
    return [S(x(2, 3, 7), size=3, mode="area"), S(x(1, 2, 6, 5), scale_factor=0.5, mode="area"),
            S(x(1, 2, 4, 5), size=(7, 3), mode="area")]


_RESAMPLE_TOL = {"float32": (1e-5, 1e-5), "float16": (2e-3, 4e-3)}
op("nn.functional.interpolate", nearest_samples("nearest"), tol=_RESAMPLE_TOL)
op("nn.functional.interpolate", nearest_samples("nearest-exact"), tol=_RESAMPLE_TOL)
# torch 1.13 computes bfloat16 linear and cubic interpolation in bfloat16 arithmetic; meshflow in float32.
op("nn.functional.interpolate", linear_samples, dtypes=("float16", "float32", "float64"), tol=_RESAMPLE_TOL)
op("nn.functional.interpolate", bicubic_samples, dtypes=("float16", "float32", "float64"), tol=_RESAMPLE_TOL,
   grad_tol={"float32": (1e-5, 2e-5)})
op("nn.functional.interpolate", area_samples, dtypes=("float32", "float64"), tol=_NORM_TOL)
op("nn.functional.upsample", lambda rng, dtype: [S(_resample_input(rng, dtype, 2, 3, 5), 8),
                                                 S(_resample_input(rng, dtype, 1, 2, 4, 5), None, 1.5, "bilinear"),
                                                 S(_resample_input(rng, dtype, 1, 2, 4, 5), (3, 7), None, "bicubic",
                                                   True)],
   dtypes=("float32", "float64"))
op("nn.functional.upsample_nearest", lambda rng, dtype: [S(_resample_input(rng, dtype, 2, 3, 4, 5), (7, 3)),
                                                         S(_resample_input(rng, dtype, 1, 2, 3), scale_factor=2.5)])
op("nn.functional.upsample_bilinear", lambda rng, dtype: [S(_resample_input(rng, dtype, 2, 3, 4, 5), (7, 3)),
                                                          S(_resample_input(rng, dtype, 1, 2, 3, 3), scale_factor=1.5)],
   dtypes=("float32", "float64"))


def pad_mode_samples(mode):
    def samples(rng, dtype):
        x = functools.partial(make, rng, dtype=dtype)
        if mode == "circular":
            return [S(x((2, 3, 5)), (2, 1), mode=mode), S(x((2, 3, 5)), (-1, 2), mode=mode),
                    S(x((2, 2, 4, 5)), (1, 2, 3, 0), mode=mode), S(x((1, 2, 3, 3, 4)), (1, 1, 2, 3, 0, 2), mode=mode),
                    S(x((1, 1, 4)), (4, 4), mode=mode), S(x((2, 0, 4)), (1, 1), mode=mode),
                    S(x((1, 2, 4, 5)), (-2, -1, 1, -3), mode=mode), S(x((0, 2, 3)), (1, 2), mode=mode),
                    S(x((1, 2, 5)), (-5, 0), mode=mode), S(x((1, 1, 4)), (1, 1), mode=mode, value=0.0)]
        out = [S(x((3, 5)), (2, 1), mode=mode), S(x((2, 3, 5)), (1, 3), mode=mode),
               S(x((2, 3, 5)), (-1, 2), mode=mode), S(x((2, 4, 5)), (1, 2, 3, 0), mode=mode),
               S(x((1, 2, 4, 5)), (2, -1, 1, 3), mode=mode), S(x((2, 3, 3, 4)), (1, 1, 2, 2, 0, 1), mode=mode),
               S(x((1, 1, 3, 3, 4)), (1, 2, 2, 1, 1, 1), mode=mode), S(x((0, 2, 4, 4)), (1, 1, 1, 1), mode=mode),
               S(x((2, 5)), (0, 0), mode=mode, value=0.0), S(x((1, 2, 5)), (-5, 1), mode=mode)]
        if mode == "replicate":  # pads as large as the input and beyond
            out += [S(x((1, 2, 4)), (6, 4), mode=mode), S(x((2, 1, 3, 2)), (5, -1, 0, 3), mode=mode)]
        return out

    return samples


op("nn.functional.pad", pad_mode_samples("reflect"))
op("nn.functional.pad", pad_mode_samples("replicate"))
op("nn.functional.pad", pad_mode_samples("circular"), dtypes=ALL)
