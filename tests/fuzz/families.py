"""Generators for the public API beyond single ops: nn layers, optimizers and
lr schedulers, DataLoader, checkpoints (round trips and corrupted files),
global tensors, indexing, operators, tensor construction from Python data
and NumPy, and nn.init.

These need more coupling between arguments than api.Spec's parameter lists
express (a layer's constructor arguments decide its input's shape), so each
is a small function emit(g) -> called name. Constructor arguments still go
through g.arg(), so adversarial calls replace one of them with a bad value
while the input stays consistent with the valid one.
"""
from api import OPS, size_arg
from generators import ALL, FLOATS, INTS, NUMERIC, dt, shape_text


class Family:
    def __init__(self, name, emit, weight=1.0, covers=()):
        self.name, self.emit_fn, self.weight, self.covers = name, emit, weight, tuple(covers) or (name,)

    def covered(self):
        return list(self.covers)

    def emit(self, g):
        return self.emit_fn(g)


FAMILIES = []


def family(name, weight=1.0, covers=()):
    def register(fn):
        FAMILIES.append(Family(name, fn, weight, covers))
        return fn

    return register


def a(g, kind, value):
    return g.arg(kind, value if isinstance(value, str) else repr(value))


def kwargs(g, items, p=0.5):
    """'k=v' texts of (name, kind, valid value) items, each present with probability p."""
    return [f"{k}={a(g, kind, v)}" for k, kind, v in items if g.chance(p)]


# --- nn layers ----------------------------------------------------------------------------
# Each returns (constructor arguments, input variables); module_case emits the rest.


def _linear(g, dtype):
    i, o = g.size(0, 8), g.size(0, 8)
    x = g.tensor(g.shape(0, 2, hi=4) + (i,), dtype)
    return [a(g, "int", i), a(g, "int", o)] + kwargs(g, [("bias", "bool", g.chance(0.5)), ("dtype", "dtype", dt(dtype))]), [x]


def _conv2d(g, dtype):
    groups = g.choice((1, 1, 2))
    cin, cout, k = groups * g.size(1, 3), groups * g.size(1, 3), g.r.randint(1, 3)
    x = g.tensor((g.size(0, 3), cin, k + g.r.randint(0, 5), k + g.r.randint(0, 5)), dtype)
    padding = g.choice((0, 1, "'same'", "'valid'", (1, 0)))
    kw = kwargs(g, [("stride", "int", g.r.randint(1, 2)), ("padding", "size", str(padding)),
                    ("dilation", "int", g.r.randint(1, 2)), ("bias", "bool", g.chance(0.5)),
                    ("padding_mode", "str", repr(g.choice(("zeros", "reflect", "circular")))),
                    ("dtype", "dtype", dt(dtype))])
    return [a(g, "int", cin), a(g, "int", cout), a(g, "int", k), f"groups={a(g, 'int', groups)}"] + kw, [x]


def _batchnorm(two_d):
    def make(g, dtype):
        c = g.size(1, 5)
        tail = (g.size(1, 4), g.size(1, 4)) if two_d else g.choice(((), (g.size(1, 4),)))
        x = g.tensor((g.size(1, 4), c) + tail, dtype)
        return [a(g, "int", c)] + kwargs(g, [("eps", "float", 1e-5), ("momentum", "float", g.choice((0.1, None, 1.0))),
                                            ("affine", "bool", g.chance(0.5)),
                                            ("track_running_stats", "bool", g.chance(0.5)),
                                            ("dtype", "dtype", dt(dtype))]), [x]

    return make


def _layernorm(g, dtype):
    x = g.tensor(g.shape(1, 4), dtype)
    ns = list(x.shape[x.ndim - g.r.randint(1, x.ndim):])
    arg = size_arg(g, ns) if len(ns) > 1 or g.chance(0.5) else a(g, "int", ns[0])
    return [arg] + kwargs(g, [("eps", "float", 1e-5), ("elementwise_affine", "bool", g.chance(0.5)),
                              ("dtype", "dtype", dt(dtype))]), [x]


def _groupnorm(g, dtype):
    groups = g.size(1, 3)
    c = groups * g.size(1, 3)
    x = g.tensor((g.size(1, 3), c) + g.shape(0, 2, hi=4), dtype)
    return [a(g, "int", groups), a(g, "int", c)] + kwargs(g, [("eps", "float", 1e-5), ("affine", "bool", True),
                                                              ("dtype", "dtype", dt(dtype))]), [x]


def _embedding(g, dtype):
    n, d = g.size(1, 10), g.size(0, 5)
    idx = g.tensor(g.shape(0, 2), "int64", ints=(0, n))
    return [a(g, "int", n), a(g, "int", d)] + kwargs(g, [("padding_idx", "int", g.r.randint(-n, n - 1)),
                                                         ("dtype", "dtype", dt(dtype))]), [idx]


def _simple(*items):
    """Layers that take one tensor of any shape: constructor keyword items only."""

    def make(g, dtype):
        return kwargs(g, items), [g.tensor(g.shape(), dtype)]

    return make


def _softmax_like(g, dtype):
    x = g.tensor(g.shape(), dtype)
    return [a(g, "dim", g.dim(x.ndim))], [x]


def _flatten(g, dtype):
    x = g.tensor(g.shape(), dtype)
    return kwargs(g, [("start_dim", "dim", g.dim(x.ndim)), ("end_dim", "dim", g.dim(x.ndim))]), [x]


def _pool(kind):
    def make(g, dtype):
        x = g.tensor((g.size(0, 3), g.size(1, 3), g.r.randint(1, 9), g.r.randint(1, 9)), dtype)
        if kind == "adaptive":
            return [size_arg(g, [g.r.randint(1, 4), g.r.randint(1, 4)]) if g.chance(0.5)
                    else a(g, "int", g.r.randint(1, 4))], [x]
        k = g.r.randint(1, 3)
        items = [("stride", "int", g.r.randint(1, 3)), ("padding", "int", g.r.randint(0, k // 2)),
                 ("ceil_mode", "bool", g.chance(0.5))]
        items += [("dilation", "int", 1), ("return_indices", "bool", g.chance(0.3))] if kind == "max" else [
            ("count_include_pad", "bool", g.chance(0.5)), ("divisor_override", "int", g.choice(("None", 2)))]
        return [a(g, "int", k)] + kwargs(g, items), [x]

    return make


def _mha(g, dtype):
    heads = g.size(1, 3)
    e = heads * g.size(1, 3)
    batch_first = g.chance(0.5)
    n, lq, lk = g.size(1, 3), g.size(1, 4), g.size(1, 4)
    shape = (lambda l: (n, l, e) if batch_first else (l, n, e)) if g.chance(0.85) else (lambda l: (l, e))
    q = g.tensor(shape(lq), dtype)
    k = g.tensor(shape(lk), dtype)
    v = g.tensor(shape(lk), dtype)
    ctor = [a(g, "int", e), a(g, "int", heads)] + kwargs(g, [
        ("dropout", "float", g.choice((0.0, 0.5))), ("bias", "bool", g.chance(0.7)), ("batch_first", "bool", batch_first),
        ("add_bias_kv", "bool", False), ("kdim", "int", "None"), ("dtype", "dtype", dt(dtype))], p=0.6)
    if "batch_first" not in " ".join(ctor):
        ctor.append(f"batch_first={batch_first}")
    inputs = [q, k, v]
    if g.chance(0.3):
        inputs.append(f"key_padding_mask={g.tensor((n, lk) if len(q.shape) == 3 else (lk,), 'bool').var}")
    if g.chance(0.3):
        inputs.append(f"attn_mask={g.tensor((lq, lk), g.choice(('bool', dtype))).var}")
    inputs += kwargs(g, [("need_weights", "bool", g.chance(0.5)), ("average_attn_weights", "bool", g.chance(0.5))])
    return ctor, inputs


def _encoder_layer(g, dtype):
    heads = g.size(1, 2)
    d = heads * g.size(1, 3)
    batch_first = g.chance(0.5)
    n, l = g.size(1, 3), g.size(1, 4)
    x = g.tensor(((n, l, d) if batch_first else (l, n, d)) if g.chance(0.85) else (l, d), dtype)
    ctor = [a(g, "int", d), a(g, "int", heads)] + kwargs(g, [
        ("dim_feedforward", "int", g.size(1, 8)), ("dropout", "float", g.choice((0.0, 0.1))),
        ("activation", "str", repr(g.choice(("relu", "gelu")))), ("layer_norm_eps", "float", 1e-5),
        ("norm_first", "bool", g.chance(0.5)), ("dtype", "dtype", dt(dtype))], p=0.6)
    ctor.append(f"batch_first={batch_first}")
    inputs = [x]
    if g.chance(0.3):
        inputs.append(f"src_mask={g.tensor((l, l), g.choice(('bool', dtype))).var}")
    if g.chance(0.2) and len(x.shape) == 3:
        inputs.append(f"src_key_padding_mask={g.tensor((n, l), 'bool').var}")
    return ctor, inputs


def _transformer(kind):
    """TransformerDecoderLayer, the two stacks and Transformer: (ctor, [tgt or src, memory or tgt, masks])."""
    def make(g, dtype):
        heads = g.size(1, 2)
        d = heads * g.size(1, 3)
        batch_first = g.chance(0.5)
        n, l, s = g.size(1, 3), g.size(1, 4), g.size(1, 4)
        batched = g.chance(0.85)

        def seq(length):
            return g.tensor(((n, length, d) if batch_first else (length, n, d)) if batched else (length, d), dtype)

        layer = [a(g, "int", d), a(g, "int", heads)] + kwargs(g, [
            ("dim_feedforward", "int", g.size(1, 8)), ("dropout", "float", g.choice((0.0, 0.1))),
            ("activation", "str", repr(g.choice(("relu", "gelu")))), ("norm_first", "bool", g.chance(0.5)),
            ("dtype", "dtype", dt(dtype))], p=0.6) + [f"batch_first={batch_first}"]
        norm = [f"norm=nn.LayerNorm({d}, dtype={dt(dtype)})"] if g.chance(0.5) else []
        if kind == "Transformer":
            ctor = [f"d_model={a(g, 'int', d)}", f"nhead={a(g, 'int', heads)}",
                    f"num_encoder_layers={a(g, 'int', g.r.randint(0, 2))}",
                    f"num_decoder_layers={a(g, 'int', g.r.randint(0, 2))}"] + layer[2:]
            first, second = seq(s), seq(l)
            names = ("src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask", "tgt_key_padding_mask")
            masks = {"src_mask": (s, s), "tgt_mask": (l, l), "memory_mask": (l, s)}
            padding = {"src_key_padding_mask": (n, s), "tgt_key_padding_mask": (n, l)}
        else:
            if kind == "TransformerEncoder":
                ctor = [f"nn.TransformerEncoderLayer({', '.join(layer)})", a(g, "int", g.r.randint(0, 2))] + norm
                first, second = seq(l), None
                names = ("mask", "src_key_padding_mask")
                masks, padding = {"mask": (l, l)}, {"src_key_padding_mask": (n, l)}
            else:
                ctor = layer if kind == "TransformerDecoderLayer" else (
                    [f"nn.TransformerDecoderLayer({', '.join(layer)})", a(g, "int", g.r.randint(0, 2))] + norm)
                first, second = seq(l), seq(s)
                names = ("tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask")
                masks = {"tgt_mask": (l, l), "memory_mask": (l, s)}
                padding = {"tgt_key_padding_mask": (n, l), "memory_key_padding_mask": (n, s)}
        inputs = [first] + ([second] if second is not None else [])
        for name in names:
            if name in masks and g.chance(0.25):
                inputs.append(f"{name}={g.tensor(masks[name], g.choice(('bool', dtype))).var}")
            elif name in padding and batched and g.chance(0.2):
                inputs.append(f"{name}={g.tensor(padding[name], 'bool').var}")
        return ctor, inputs

    return make


def _embedding_bag(g, dtype):
    n, d = g.size(1, 8), g.size(0, 4)
    mode = g.choice(("mean", "sum", "max"))
    ctor = [a(g, "int", n), a(g, "int", d), f"mode={a(g, 'str', repr(mode))}"] + kwargs(g, [
        ("padding_idx", "int", g.r.randint(-n, n - 1)), ("dtype", "dtype", dt(dtype))])
    if g.chance(0.5):
        return ctor, [g.tensor((g.size(0, 3), g.size(0, 4)), "int64", ints=(0, n))]
    length = g.size(0, 6)
    starts = sorted(g.r.randint(0, length) for _ in range(g.size(1, 3)))
    return ctor, [g.tensor((length,), "int64", ints=(0, n)), f"mf.tensor({[0] + starts[1:]}, dtype=mf.int64)"]


def _bilinear(g, dtype):
    i, j, o = g.size(0, 4), g.size(0, 4), g.size(0, 3)
    batch = g.shape(0, 2, hi=3)
    ctor = [a(g, "int", i), a(g, "int", j), a(g, "int", o)] + kwargs(g, [("bias", "bool", g.chance(0.5)),
                                                                       ("dtype", "dtype", dt(dtype))])
    return ctor, [g.tensor(batch + (i,), dtype), g.tensor(batch + (j,), dtype)]


def _threshold(g, dtype):
    return [a(g, "float", 0.1), a(g, "float", -2.0)] + kwargs(g, [("inplace", "bool", False)]), [
        g.tensor(g.shape(0, 3), dtype)]


def _loss(kind):
    def make(g, dtype):
        red = ("reduction", "str", repr(g.choice(("mean", "sum", "none"))))
        if kind in ("CrossEntropyLoss", "NLLLoss"):
            classes, batch = g.size(1, 5), g.size(0, 4)
            x = g.tensor((batch, classes), dtype)
            t = g.tensor((batch,), "int64", ints=(0, classes))
            w = g.tensor((classes,), dtype, grad=False).var
            items = [("weight", "tensor", w), ("ignore_index", "int", g.r.randint(-100, 2)), red]
            if kind == "CrossEntropyLoss":
                items.append(("label_smoothing", "float", g.choice((0.0, 0.2))))
            return kwargs(g, items), [x, t]
        x = g.tensor(g.shape(), dtype)
        y = g.tensor(x.shape, dtype)
        items = [red]
        if kind == "SmoothL1Loss":
            items.append(("beta", "float", g.choice((1.0, 0.0, 0.5))))
        if kind == "HuberLoss":
            items.append(("delta", "float", g.choice((1.0, 0.5))))
        if kind == "BCELoss":
            items.append(("weight", "tensor", g.tensor(g.bshape(x.shape), dtype, grad=False).var))
        if kind == "KLDivLoss":
            items[0] = ("reduction", "str", g.choice(("'batchmean'", "'sum'", "'none'", "'mean'")))
            items.append(("log_target", "bool", g.choice((False, True))))
        if kind == "BCEWithLogitsLoss":
            items += [("weight", "tensor", g.tensor(g.bshape(x.shape), dtype, grad=False).var),
                      ("pos_weight", "tensor", g.tensor(x.shape[-1:], dtype, grad=False).var)]
        return kwargs(g, items), [x, y]

    return make


def _cosine_similarity(g, dtype):
    x = g.tensor(g.shape(1, 3), dtype)
    return kwargs(g, [("dim", "int", g.r.randint(-1, 1)), ("eps", "float", 1e-8)]), [x, g.tensor(x.shape, dtype)]


def _conv1d(g, dtype):
    groups = g.choice((1, 1, 2))
    cin, cout, k = groups * g.size(1, 3), groups * g.size(1, 3), g.r.randint(1, 3)
    x = g.tensor((g.size(0, 3), cin, k + g.r.randint(0, 6)), dtype)
    kw = kwargs(g, [("stride", "int", g.r.randint(1, 2)),
                    ("padding", "size", str(g.choice((0, 1, "'same'", "'valid'", (1,))))),
                    ("dilation", "int", g.r.randint(1, 2)), ("bias", "bool", g.chance(0.5)),
                    ("dtype", "dtype", dt(dtype))])
    return [a(g, "int", cin), a(g, "int", cout), a(g, "int", k), f"groups={a(g, 'int', groups)}"] + kw, [x]


def _pool1d(kind):
    def make(g, dtype):
        x = g.tensor((g.size(0, 3), g.size(1, 3), g.r.randint(1, 9)), dtype)
        if kind == "adaptive":
            return [a(g, "int", g.r.randint(1, 4))], [x]
        k = g.r.randint(1, 3)
        items = [("stride", "int", g.r.randint(1, 3)), ("padding", "int", g.r.randint(0, k // 2)),
                 ("ceil_mode", "bool", g.chance(0.5))]
        return [a(g, "int", k)] + kwargs(g, items), [x]

    return make


def _conv3d(g, dtype):
    groups = g.choice((1, 1, 2))
    cin, cout, k = groups * g.size(1, 2), groups * g.size(1, 2), g.r.randint(1, 2)
    x = g.tensor((g.size(0, 2), cin) + tuple(k + g.r.randint(0, 3) for _ in range(3)), dtype)
    kw = kwargs(g, [("stride", "int", g.r.randint(1, 2)),
                    ("padding", "size", str(g.choice((0, 1, "'same'", "'valid'", (1, 0, 1))))),
                    ("dilation", "int", g.r.randint(1, 2)), ("bias", "bool", g.chance(0.5)),
                    ("padding_mode", "str", repr(g.choice(("zeros", "reflect")))), ("dtype", "dtype", dt(dtype))])
    return [a(g, "int", cin), a(g, "int", cout), a(g, "int", k), f"groups={a(g, 'int', groups)}"] + kw, [x]


def _conv_transpose(dims):
    def make(g, dtype):
        groups = g.choice((1, 1, 2))
        cin, cout, k, stride = groups * g.size(1, 2), groups * g.size(1, 2), g.r.randint(1, 3), g.r.randint(1, 3)
        sizes = tuple(g.r.randint(1, 4) for _ in range(dims))
        x = g.tensor(((g.size(0, 2), cin) if g.chance(0.85) else (cin,)) + sizes, dtype)
        kw = kwargs(g, [("stride", "int", stride), ("padding", "int", g.r.randint(0, 1)),
                        ("output_padding", "int", g.r.randint(0, stride - 1)), ("dilation", "int", g.r.randint(1, 2)),
                        ("bias", "bool", g.chance(0.5)), ("dtype", "dtype", dt(dtype))])
        inputs = [x]
        if g.chance(0.3):  # a size in range for stride and padding 0 (else a clear ValueError)
            out = [(s - 1) * stride + k + g.r.randint(0, stride - 1) for s in sizes]
            inputs.append(f"output_size={size_arg(g, out)}")
        return [a(g, "int", cin), a(g, "int", cout), a(g, "int", k), f"groups={a(g, 'int', groups)}"] + kw, inputs

    return make


def _adaptive_max_pool(dims):
    def make(g, dtype):
        x = g.tensor((g.size(0, 3), g.size(1, 3)) + tuple(g.r.randint(1, 7) for _ in range(dims)), dtype)
        if dims == 2 and g.chance(0.3):
            size = g.choice(("(None, 2)", "(3, None)", "(2, 2)"))
        else:
            size = a(g, "int", g.r.randint(0, 4))
        return [size] + kwargs(g, [("return_indices", "bool", g.chance(0.5))]), [x]

    return make


def _pool3d(kind):
    def make(g, dtype):
        x = g.tensor((g.size(0, 2), g.size(1, 3)) + tuple(g.r.randint(1, 6) for _ in range(3)), dtype)
        if kind == "adaptive":
            size = g.choice(("(None, 2, 1)", "(2, 2, 2)")) if g.chance(0.3) else a(g, "int", g.r.randint(0, 4))
            return [size], [x]
        k = g.r.randint(1, 3)
        items = [("stride", "int", g.r.randint(1, 3)), ("padding", "int", g.r.randint(0, k // 2)),
                 ("ceil_mode", "bool", g.chance(0.5))]
        items += [("dilation", "int", g.r.randint(1, 2)), ("return_indices", "bool", g.chance(0.3))] if kind == "max" \
            else [("count_include_pad", "bool", g.chance(0.5)), ("divisor_override", "int", g.choice(("None", 2)))]
        return [a(g, "int", k)] + kwargs(g, items), [x]

    return make


def _pixel_shuffle(unshuffle):
    def make(g, dtype):
        r = g.r.randint(1, 3)
        shape = (g.size(0, 2), g.size(1, 2) * (1 if unshuffle else r * r), g.size(1, 3) * (r if unshuffle else 1),
                 g.size(1, 3) * (r if unshuffle else 1))
        return [a(g, "int", r)], [g.tensor(shape, dtype)]

    return make


def _channel_layer(spatial, *items, channels=False):
    def make(g, dtype):
        c = g.size(1, 3)
        shape = (g.size(1, 3), c) + tuple(g.size(1, 3) for _ in range(spatial))
        if g.chance(0.2):
            shape = shape[1:]
        ctor = [a(g, "int", c)] if channels else []
        return ctor + kwargs(g, list(items)), [g.tensor(shape, dtype)]

    return make


def _rnn(kind):
    def make(g, dtype):
        i, h, layers = g.size(1, 3), g.size(1, 3), g.r.randint(1, 2)
        bidirectional, batch_first = g.chance(0.4), g.chance(0.5)
        n, steps = g.size(0, 3), g.size(1, 4)
        batched = g.chance(0.85)
        shape = ((n, steps, i) if batch_first else (steps, n, i)) if batched else (steps, i)
        items = [("num_layers", "int", layers), ("bias", "bool", g.chance(0.8)), ("batch_first", "bool", batch_first),
                 ("dropout", "float", g.choice((0.0, 0.5))), ("bidirectional", "bool", bidirectional),
                 ("dtype", "dtype", dt(dtype))]
        if kind == "RNN":
            items.append(("nonlinearity", "str", repr(g.choice(("tanh", "relu")))))
        ctor = [a(g, "int", i), a(g, "int", h)] + kwargs(g, items, p=0.7)
        # The state's shape follows the constructor as generated (defaults where an argument was left out).
        text = " ".join(ctor)
        states = (2 if "bidirectional=True" in text else 1) * (layers if "num_layers" in text else 1)
        inputs = [g.tensor(shape, dtype)]
        if g.chance(0.5):
            state = (states, n, h) if batched else (states, h)
            hx = [g.tensor(state, dtype).var for _ in range(2 if kind == "LSTM" else 1)]
            inputs.append(f"({hx[0]}, {hx[1]})" if kind == "LSTM" else hx[0])
        return ctor, inputs

    return make


def _rnn_cell(kind):
    def make(g, dtype):
        i, h, n = g.size(1, 3), g.size(1, 3), g.size(0, 3)
        batched = g.chance(0.85)
        items = [("bias", "bool", g.chance(0.8)), ("dtype", "dtype", dt(dtype))]
        if kind == "RNNCell":
            items.append(("nonlinearity", "str", repr(g.choice(("tanh", "relu")))))
        inputs = [g.tensor((n, i) if batched else (i,), dtype)]
        if g.chance(0.5):
            hx = [g.tensor((n, h) if batched else (h,), dtype).var for _ in range(2 if kind == "LSTMCell" else 1)]
            inputs.append(f"({hx[0]}, {hx[1]})" if kind == "LSTMCell" else hx[0])
        return [a(g, "int", i), a(g, "int", h)] + kwargs(g, items, p=0.7), inputs

    return make


def _unflatten(g, dtype):
    x = g.tensor((g.size(1, 3), 6, g.size(1, 2)), dtype)
    return [a(g, "int", 1), size_arg(g, g.choice(([2, 3], [3, 2], [-1, 2], [6], [4, 2])))], [x]


def _upsample(name):
    def make(g, dtype):
        nd = 4 if name != "Upsample" else g.choice((3, 4, 5))
        x = g.tensor((g.size(0, 2), g.size(1, 3)) + tuple(g.r.randint(1, 5) for _ in range(nd - 2)), dtype)
        if g.chance(0.5):
            ctor = [f"size={size_arg(g, [g.r.randint(1, 7) for _ in range(nd - 2)])}"]
        else:
            ctor = [f"scale_factor={a(g, 'float', g.choice(('2', '1.5', '0.7', '(2.0, 1.5)', '0')))}"]
        if name == "Upsample":
            mode = g.choice(("nearest", "nearest-exact", {3: "linear", 4: "bilinear", 5: "trilinear"}[nd], "bicubic"))
            ctor.append(f"mode={a(g, 'str', repr(mode))}")
            linear = mode not in ("nearest", "nearest-exact")
            ctor += kwargs(g, [("align_corners", "bool", g.chance(0.5) if linear else None),
                               ("recompute_scale_factor", "bool", g.choice((None, True, False)))])
        return ctor, [x]

    return make


def _pad_layer(dims, constant=False):
    def make(g, dtype):
        shape = (g.size(1, 3),) + tuple(g.r.randint(1, 5) for _ in range(dims))
        if g.chance(0.7):
            shape = (g.size(0, 2),) + shape
        x = g.tensor(shape, dtype)
        if g.chance(0.4):
            ctor = [a(g, "int", g.r.randint(0, 3))]
        else:
            ctor = [size_arg(g, [g.r.randint(-1, 3) for _ in range(2 * dims)])]
        if constant:
            ctor.append(a(g, "float", g.choice(("1.5", "0", "-2", "3"))))
        return ctor, [x]

    return make


LAYERS = {
    "Linear": _linear, "Conv2d": _conv2d, "BatchNorm1d": _batchnorm(False), "BatchNorm2d": _batchnorm(True),
    "LayerNorm": _layernorm, "GroupNorm": _groupnorm, "Embedding": _embedding,
    "Dropout": _simple(("p", "float", 0.5), ("inplace", "bool", False)),
    "ReLU": _simple(("inplace", "bool", False)), "GELU": _simple(("approximate", "str", "'tanh'")),
    "SiLU": _simple(("inplace", "bool", False)), "Tanh": _simple(), "Sigmoid": _simple(),
    "LeakyReLU": _simple(("negative_slope", "float", 0.2), ("inplace", "bool", False)),
    "Softmax": _softmax_like, "LogSoftmax": _softmax_like, "Flatten": _flatten, "Identity": _simple(),
    "MaxPool2d": _pool("max"), "AvgPool2d": _pool("avg"), "AdaptiveAvgPool2d": _pool("adaptive"),
    "MultiheadAttention": _mha, "TransformerEncoderLayer": _encoder_layer,
    "CrossEntropyLoss": _loss("CrossEntropyLoss"), "NLLLoss": _loss("NLLLoss"), "MSELoss": _loss("MSELoss"),
    "BCEWithLogitsLoss": _loss("BCEWithLogitsLoss"), "L1Loss": _loss("L1Loss"), "SmoothL1Loss": _loss("SmoothL1Loss"),
    "HuberLoss": _loss("HuberLoss"), "CosineSimilarity": _cosine_similarity,
    "ReLU6": _simple(("inplace", "bool", False)),
    "Hardtanh": _simple(("min_val", "float", -0.5), ("max_val", "float", 2.0), ("inplace", "bool", False)),
    "GLU": _simple(("dim", "int", -1)),
    "BCELoss": _loss("BCELoss"), "KLDivLoss": _loss("KLDivLoss"),
    "Conv1d": _conv1d, "MaxPool1d": _pool1d("max"), "AvgPool1d": _pool1d("avg"),
    "AdaptiveAvgPool1d": _pool1d("adaptive"), "PixelShuffle": _pixel_shuffle(False),
    "PixelUnshuffle": _pixel_shuffle(True), "Unflatten": _unflatten, "Mish": _simple(("inplace", "bool", False)),
    "ELU": _simple(("alpha", "float", 0.5), ("inplace", "bool", False)),
    "Softplus": _simple(("beta", "float", 2.0), ("threshold", "float", 5.0)),
    "PReLU": _simple(("num_parameters", "int", 1)),
    "Dropout1d": _channel_layer(1, ("p", "float", 0.5)), "Dropout2d": _channel_layer(2, ("p", "float", 0.5)),
    "Dropout3d": _channel_layer(3, ("p", "float", 0.5)),
    "InstanceNorm1d": _channel_layer(1, ("affine", "bool", True), ("track_running_stats", "bool", True), channels=True),
    "InstanceNorm2d": _channel_layer(2, ("affine", "bool", False), channels=True),
    "RNN": _rnn("RNN"), "LSTM": _rnn("LSTM"), "GRU": _rnn("GRU"), "RNNCell": _rnn_cell("RNNCell"),
    "LSTMCell": _rnn_cell("LSTMCell"), "GRUCell": _rnn_cell("GRUCell"),
    "TransformerDecoderLayer": _transformer("TransformerDecoderLayer"),
    "TransformerEncoder": _transformer("TransformerEncoder"), "TransformerDecoder": _transformer("TransformerDecoder"),
    "Transformer": _transformer("Transformer"), "EmbeddingBag": _embedding_bag, "Bilinear": _bilinear,
    "SyncBatchNorm": _channel_layer(2, ("momentum", "float", 0.1), ("affine", "bool", False), channels=True),
    "Hardswish": _simple(("inplace", "bool", False)), "Hardsigmoid": _simple(("inplace", "bool", False)),
    "SELU": _simple(("inplace", "bool", False)), "CELU": _simple(("alpha", "float", 0.5), ("inplace", "bool", False)),
    "Softsign": _simple(), "Tanhshrink": _simple(), "LogSigmoid": _simple(),
    "Threshold": _threshold, "Softshrink": _simple(("lambd", "float", 0.3)),
    "Hardshrink": _simple(("lambd", "float", 0.3)), "Softmin": _simple(("dim", "int", -1)),
    "Softmax2d": _channel_layer(2),
    "Upsample": _upsample("Upsample"), "UpsamplingNearest2d": _upsample("UpsamplingNearest2d"),
    "UpsamplingBilinear2d": _upsample("UpsamplingBilinear2d"),
    "ReflectionPad1d": _pad_layer(1), "ReflectionPad2d": _pad_layer(2), "ReflectionPad3d": _pad_layer(3),
    "ReplicationPad1d": _pad_layer(1), "ReplicationPad2d": _pad_layer(2), "ReplicationPad3d": _pad_layer(3),
    "ZeroPad2d": _pad_layer(2), "ConstantPad1d": _pad_layer(1, True), "ConstantPad2d": _pad_layer(2, True),
    "ConstantPad3d": _pad_layer(3, True),
    "Conv3d": _conv3d, "ConvTranspose1d": _conv_transpose(1), "ConvTranspose2d": _conv_transpose(2),
    "ConvTranspose3d": _conv_transpose(3), "AdaptiveMaxPool1d": _adaptive_max_pool(1),
    "AdaptiveMaxPool2d": _adaptive_max_pool(2), "MaxPool3d": _pool3d("max"), "AvgPool3d": _pool3d("avg"),
    "AdaptiveAvgPool3d": _pool3d("adaptive"),
}

# Things to do to a built module before or after calling it.
MODULE_ACTIONS = ("m.eval()", "m.train()", "m.double()", "m.half()", "m.bfloat16()", "m.float()",
                  "m.requires_grad_(False)", "m.zero_grad()", "m.apply(lambda mod: None)", "repr(m)",
                  "m.load_state_dict(m.state_dict())", "list(m.named_parameters())", "list(m.named_buffers())",
                  "m.to(mf.float64)", "m.to_global(mf.placement('cpu', [0]), mf.sbp.broadcast)")
MODULE_BAD_ACTIONS = ("m.load_state_dict({'weight': mf.ones(1)})", "m.load_state_dict({}, strict=False)",
                      "_expect(AttributeError, lambda: m.get_parameter('nope'))",
                      "_expect(AttributeError, lambda: m.get_submodule('a.b'))", "m.register_parameter('a.b', None)",
                      "m.register_buffer('', mf.ones(1))", "m.register_buffer('x', 5)", "m.train(None)",
                      "m.to('cuda')", "m.load_state_dict({k: v.reshape(-1)[:1] for k, v in m.state_dict().items()})",
                      "m.load_state_dict({k: v.double() for k, v in m.state_dict().items()})",
                      "m.add_module('l', m)", "setattr(m, 'weight', mf.ones(2))", "m.state_dict(prefix=None)")


def _module_case(name):
    make = LAYERS[name]

    def emit(g):
        dtype = g.dtype(FLOATS) if g.chance(0.9) else g.dtype(ALL)
        ctor, inputs = make(g, dtype)
        g.emit(f"m = nn.{name}({', '.join(ctor)})")
        if g.chance(0.25):
            g.emit(g.choice(MODULE_ACTIONS))
        if g.adv and g.chance(0.2):
            g.emit(g.choice(MODULE_BAD_ACTIONS))
        args = [x if isinstance(x, str) else g.targ(x) for x in inputs]
        g.emit(f"r = m({', '.join(args)})")
        g.grad = True  # layers hold parameters: backward reaches them
        if g.chance(0.1):
            g.emit("r = (r, m.state_dict())")
        return "nn." + name

    return emit


for _name in LAYERS:
    family("nn." + _name, 1.0)(_module_case(_name))


@family("nn.parameter_containers", 1.0, covers=("nn.ParameterList", "nn.ParameterDict", "nn.Parameter"))
def _parameter_containers(g):
    shape = (g.size(1, 3), g.size(1, 3))
    values = [f"mf.ones({shape[0]}, {shape[1]})", "nn.Parameter(mf.zeros(2))",
              g.choice(("mf.ones(1)", "None", "3", "'x'", "mf.ones(2, dtype=mf.int64)"))]
    if g.chance(0.5):
        g.emit(f"p = nn.ParameterList([{', '.join(values)}])")
        g.emit(g.choice(("p.append(mf.ones(2))", "p.extend([mf.ones(1)])", "p.extend(mf.ones(2))",
                         f"p[{a(g, 'int', 0)}] = mf.ones(3)", f"r = p[{a(g, 'int', -1)}]", "r = p[1:]",
                         "r = p('call')", "r = list(p.parameters())")))
    else:
        g.emit("p = nn.ParameterDict({" + ", ".join(f"'k{i}': {v}" for i, v in enumerate(values)) + "})")
        g.emit(g.choice(("p['n'] = mf.ones(2)", f"_expect(KeyError, lambda: p[{a(g, 'str', repr('k0'))}])",
                         "p.update([('z', mf.ones(1))])",
                         "p.update([1, 2])", "r = p.pop('k1')", "r = p.popitem()", "p[3] = mf.ones(1)",
                         "r = p.state_dict()")))
    g.emit("r = (len(p), list(p.named_parameters()), repr(p))")
    return "nn.ParameterList"


@family("nn.containers", 2.0, covers=("nn.Sequential", "nn.ModuleList", "nn.ModuleDict", "nn.Module"))
def _containers(g):
    i, h, o = g.size(1, 5), g.size(1, 5), g.size(1, 5)
    x = g.tensor((g.size(0, 3), i), "float32")
    layers = [f"nn.Linear({i}, {h})", "nn.ReLU()", f"nn.Linear({h}, {a(g, 'int', o)})"]
    kind = g.choice(("Sequential", "OrderedDict", "ModuleList", "ModuleDict", "Module"))
    if kind == "Sequential":
        g.emit(f"m = nn.Sequential({', '.join(layers)})")
        g.emit(g.choice(("pass", "m.append(nn.Identity())", "m = m[0:3]", f"m = m[{a(g, 'int', 0)}]",
                         "m = nn.Sequential(*m)", "m = m[::-1]", f"m = m[{a(g, 'int', -1)}:]")))
        called = "nn.Sequential"
    elif kind == "OrderedDict":
        g.emit("import collections")
        g.emit("m = nn.Sequential(collections.OrderedDict([" + ", ".join(
            f"('l{k}', {layer})" for k, layer in enumerate(layers)) + "]))")
        called = "nn.Sequential"
    elif kind == "ModuleList":
        g.emit(f"ml = nn.ModuleList([{', '.join(layers)}])")
        g.emit(g.choice(("pass", "ml.append(nn.Identity())", "ml.extend([nn.Identity()])",
                         f"ml.insert({a(g, 'int', 1)}, nn.Identity())", f"del ml[{a(g, 'int', 1)}]")))
        g.emit("m = nn.Sequential(*ml)")
        called = "nn.ModuleList"
    elif kind == "ModuleDict":
        g.emit("md = nn.ModuleDict({" + ", ".join(f"'l{k}': {layer}" for k, layer in enumerate(layers)) + "})")
        g.emit(g.choice(("pass", "md['extra'] = nn.Identity()", f"_expect(KeyError, lambda: md[{a(g, 'str', repr('l0'))}])", "list(md.items())",
                         "del md['l1']")))
        g.emit("m = nn.Sequential(*[md[k] for k in ('l0', 'l1', 'l2') if k in md])")
        called = "nn.ModuleDict"
    else:
        g.emit("class Net(nn.Module):\n"
               "    def __init__(self):\n"
               "        super().__init__()\n"
               f"        self.body = nn.Sequential({', '.join(layers)})\n"
               f"        self.scale = nn.Parameter(mf.ones({a(g, 'int', 1)}))\n"
               f"        self.register_buffer('calls', mf.zeros((), dtype=mf.int64), persistent={g.boolean()})\n"
               "    def forward(self, x):\n"
               "        return self.body(x) * self.scale")
        g.emit("m = Net()")
        if g.chance(0.3):
            g.emit(g.choice(("h = m.register_forward_hook(lambda mod, args, out: out * 2)",
                             "h = m.register_forward_pre_hook(lambda mod, args: None)",
                             "h = m.register_forward_hook(lambda mod, args, out: 'not a tensor')",
                             "m.load_state_dict(m.state_dict())", "m.body[0] = nn.Identity()")))
        called = "nn.Module"
    if g.chance(0.2):
        g.emit(g.choice(MODULE_ACTIONS))
    g.emit(f"r = m({g.targ(x)})")
    g.grad = True
    return called


# --- optimizers and lr schedulers -------------------------------------------------------------

OPTIMIZERS = {
    "SGD": lambda g: [("lr", "float", g.choice((0.1, 0.01, 0.0))), ("momentum", "float", g.choice((0.0, 0.9))),
                      ("dampening", "float", g.choice((0.0, 0.1))), ("weight_decay", "float", g.choice((0.0, 1e-2))),
                      ("nesterov", "bool", g.chance(0.3)), ("maximize", "bool", g.chance(0.2))],
    "Adam": lambda g: [("lr", "float", 1e-3), ("betas", "size", g.choice(("(0.9, 0.999)", "(0.0, 0.5)", "[0.8, 0.9]"))),
                       ("eps", "float", 1e-8), ("weight_decay", "float", g.choice((0.0, 0.1))),
                       ("amsgrad", "bool", g.chance(0.5)), ("maximize", "bool", g.chance(0.2)),
                       ("foreach", "bool", "None")],
    "AdamW": lambda g: [("lr", "float", 1e-3), ("betas", "size", "(0.9, 0.999)"), ("eps", "float", 1e-8),
                        ("weight_decay", "float", 1e-2), ("amsgrad", "bool", g.chance(0.5)),
                        ("maximize", "bool", g.chance(0.2))],
    "RMSprop": lambda g: [("lr", "float", 1e-2), ("alpha", "float", 0.99), ("eps", "float", 1e-8),
                          ("weight_decay", "float", 0.0), ("momentum", "float", g.choice((0.0, 0.9))),
                          ("centered", "bool", g.chance(0.5)), ("maximize", "bool", g.chance(0.2))],
    "Adagrad": lambda g: [("lr", "float", 1e-2), ("lr_decay", "float", 0.0), ("weight_decay", "float", 0.0),
                          ("initial_accumulator_value", "float", g.choice((0.0, 0.1))), ("eps", "float", 1e-10),
                          ("maximize", "bool", g.chance(0.2))],
}

SCHEDULERS = (
    lambda g: f"StepLR(opt, {a(g, 'int', g.r.randint(1, 3))}, gamma={a(g, 'float', 0.5)})",
    lambda g: f"MultiStepLR(opt, {size_arg(g, [1, 2, 4])}, gamma={a(g, 'float', 0.5)})",
    lambda g: f"ExponentialLR(opt, {a(g, 'float', 0.9)})",
    lambda g: f"CosineAnnealingLR(opt, {a(g, 'int', g.r.randint(1, 5))}, eta_min={a(g, 'float', 0.0)})",
    lambda g: f"LambdaLR(opt, {g.choice(('lambda e: 0.5 ** e', 'lambda e: 1.0', 'lambda e: None', 'lambda e: user_error()'))})",
    lambda g: f"LinearLR(opt, start_factor={a(g, 'float', 0.5)}, total_iters={a(g, 'int', 3)})",
    lambda g: f"SequentialLR(opt, [mf.optim.lr_scheduler.StepLR(opt, 1), mf.optim.lr_scheduler.ExponentialLR(opt, 0.9)],"
              f" {size_arg(g, [2])})",
    lambda g: f"OneCycleLR(opt, {a(g, 'float', 0.1)}, total_steps={a(g, 'int', 10)}, "
              f"anneal_strategy={a(g, 'str', repr(g.choice(('cos', 'linear'))))}, three_phase={g.boolean()})",
    lambda g: f"CosineAnnealingWarmRestarts(opt, {a(g, 'int', g.r.randint(1, 4))}, T_mult={a(g, 'int', 2)}, "
              f"eta_min={a(g, 'float', 0.0)})",
    lambda g: f"CyclicLR(opt, {a(g, 'float', 0.01)}, {a(g, 'float', 0.1)}, step_size_up={a(g, 'int', 2)}, "
              f"mode={a(g, 'str', repr(g.choice(('triangular', 'triangular2', 'exp_range'))))}, "
              f"cycle_momentum={g.boolean()})",
    lambda g: "ChainedScheduler([mf.optim.lr_scheduler.ExponentialLR(opt, 0.9), "
              f"mf.optim.lr_scheduler.StepLR(opt, {a(g, 'int', 2)})])",
)


@family("optim", 10.0, covers=["optim." + n for n in OPTIMIZERS] + ["optim.lr_scheduler", "nn.utils.clip_grad_norm_"])
def _optim(g):
    name = g.choice(tuple(OPTIMIZERS))
    params = []
    for _ in range(g.r.randint(1, 3)):
        dtype = g.dtype(FLOATS) if g.chance(0.92) else g.dtype(ALL)
        p = g.tensor(g.shape(0, 3), dtype, grad=dtype in FLOATS, layout=False, special=False, prefix="p")
        params.append(p.var)
        u = g.r.random()
        if u < 0.6:
            grad = g.tensor(p.shape, dtype if g.chance(0.9) else g.dtype(FLOATS), grad=False, prefix="g")
            g.emit(f"{p.var}.grad = {g.targ(grad)}")
        elif u < 0.85 and dtype in FLOATS:
            g.emit(f"({p.var}.float() * 2).sum().backward()")
    plist = "[" + ", ".join(params) + "]"
    if g.adv and g.chance(0.2):
        plist = g.choice((f"[{params[0]}, {params[0]}]", "[]", f"[{params[0]}.detach() * 2]", f"{params[0]}",
                          f"[{{'params': [{params[0]}]}}, {{'params': [{params[0]}]}}]", "[mf.ones(2, dtype=mf.int64)]",
                          "iter([])", f"[{{'params': {params[0]}, 'lr': -1.0}}]", "[None]"))
    elif g.chance(0.25):
        plist = "[" + ", ".join(f"{{'params': [{p}], 'lr': {a(g, 'float', 0.01)}}}" for p in params) + "]"
    opts = kwargs(g, OPTIMIZERS[name](g))
    g.emit(f"opt = mf.optim.{name}({', '.join([plist] + opts)})")
    sched = g.chance(0.25)
    if sched:
        g.emit(f"sched = mf.optim.lr_scheduler.{g.choice(SCHEDULERS)(g)}")
    for _ in range(g.r.randint(1, 3)):
        g.emit(g.choice(("opt.step()", "opt.step()", "opt.step(lambda: mf.ones(()))", "opt.step(lambda: None)")))
        if sched:
            g.emit("sched.step()")
    if g.chance(0.3):
        norm = a(g, "float", g.choice(("2.0", "1.0", "float('inf')", "0.5")))
        g.emit(f"mf.nn.utils.clip_grad_norm_({plist}, {a(g, 'float', 1.0)}, norm_type={norm})")
    g.emit(g.choice(("opt.zero_grad()", "opt.zero_grad(set_to_none=False)", "pass")))
    if g.chance(0.3):
        g.emit("opt.param_groups[0]['lr'] = " + a(g, "float", 0.5))
    if g.chance(0.3):
        g.emit("opt.add_param_group({'params': [mf.zeros(2, requires_grad=True)]})")
    sd = g.choice(("opt.load_state_dict(opt.state_dict())",
                   "opt.load_state_dict({'state': {}, 'param_groups': opt.state_dict()['param_groups']})",
                   "pass", "sd = opt.state_dict(); sd['param_groups'][0]['params'] = [99]; opt.load_state_dict(sd)"
                   if g.adv else "pass"))
    g.emit(sd)
    if sched and g.chance(0.5):
        g.emit("sched.load_state_dict(sched.state_dict()); sched.get_last_lr()")
    g.emit(f"r = ({plist}, opt.state_dict())")
    return "optim." + name


# --- data loading ------------------------------------------------------------------------


@family("utils.data.DataLoader", 8.0, covers=("utils.data.DataLoader", "utils.data.TensorDataset"))
def _dataloader(g):
    n = g.size(0, 20)
    tensors = [g.tensor((n,) + g.shape(0, 2, hi=4), g.dtype()) for _ in range(g.r.randint(1, 3))]
    if g.adv and g.chance(0.2):
        tensors.append(g.tensor((n + 1,), "float32"))
    args = [g.targ(t) for t in tensors]
    g.emit(f"ds = mf.utils.data.TensorDataset({', '.join(args)})")
    kind = g.r.random()
    if kind < 0.15:
        g.emit(f"ds = mf.utils.data.Subset(ds, {size_arg(g, [g.r.randrange(max(n, 1)) for _ in range(g.size(0, 6))])})")
    elif kind < 0.25:
        lengths = g.choice(([0.5, 0.5], [n // 2, n - n // 2], [1.0], [0.3, 0.3, 0.4]))
        g.emit(f"ds = mf.utils.data.random_split(ds, {size_arg(g, lengths)}, "
               f"generator=mf.Generator().manual_seed(1))[0]")
    elif kind < 0.3:
        g.emit("ds = ds + ds")
    items = [("batch_size", "int", g.choice((1, 2, 3, 4, 7, 16, "None"))), ("shuffle", "bool", g.chance(0.5)),
             ("drop_last", "bool", g.chance(0.5)), ("num_workers", "int", g.choice((0, 0, 1, 2, 3))),
             ("generator", "tensor", g.choice(("None", "mf.Generator().manual_seed(7)")))]
    kw = kwargs(g, items, p=0.6)
    if any(k.startswith("num_workers=") and not k.endswith("=0") for k in kw) and g.chance(0.3):
        kw.append(f"prefetch_factor={a(g, 'int', g.r.randint(1, 3))}")
    if g.chance(0.15):
        kw.append(g.choice(("collate_fn=mf.utils.data.default_collate", "collate_fn=lambda b: b",
                            "collate_fn=lambda b: user_error()" if g.adv else "collate_fn=list")))
    if g.chance(0.1):
        kw.append(f"batch_sampler=mf.utils.data.BatchSampler(mf.utils.data.SequentialSampler(ds), "
                  f"{a(g, 'int', 2)}, {g.boolean()})")
    if g.chance(0.1):
        kw.append(g.choice(("sampler=mf.utils.data.RandomSampler(ds)",
                            f"sampler=mf.utils.data.SubsetRandomSampler({size_arg(g, [0, 1])})")))
    g.emit(f"dl = mf.utils.data.DataLoader(ds, {', '.join(kw)})")
    limit = g.choice((50, 50, 1))  # 1: leave the loop early, while workers are busy
    g.emit(f"r = [b for _, b in zip(range({limit}), dl)]")
    if g.chance(0.3):
        g.emit("r.append(len(dl))")
    return "utils.data.DataLoader"


# --- checkpoints -----------------------------------------------------------------------------

CKPT = "os.path.join(TMP, 'ckpt.safetensors')"


def _tree(g, depth=0):
    """A random state tree (what mf.save stores), as source text."""
    u = g.r.random()
    if depth > 2 or u < 0.35:
        if g.chance(0.6):
            return g.tensor(g.shape(0, 3), g.dtype(), grad=g.chance(0.1)).var
        return g.choice(("None", "True", "3", "-2**63", "2**63-1", "1.5", "float('nan')", "'s'", "''", "'\\u00e9x'",
                         "[]", "{}", "()"))
    if u < 0.7:
        return "{" + ", ".join(f"{g.choice(repr_keys)}: {_tree(g, depth + 1)}" for _ in range(g.r.randint(0, 3))) + "}"
    items = [_tree(g, depth + 1) for _ in range(g.r.randint(0, 3))]
    if g.chance(0.3):
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return "[" + ", ".join(items) + "]"


repr_keys = ("'w'", "'layer.weight'", "'state'", "'0'", "'a.b.c'", "''", "'__meshflow_global_checkpoint__'",
             "'param_groups'", "'x' * 300")
BAD_TREES = ("{1, 2}", "object()", "{1: mf.ones(2)}", "{(1,): 2}", "[" * 70 + "1" + "]" * 70,
             "mf.ones(2, 3).t()", "mf.zeros((), dtype=mf.float32).expand(2**31)", "b'bytes'", "1j", "2**64",
             "{'a': mf.ones(2), 'b': mf.ones(2)[::2]}", "lambda: 0", "mf.float32",
             "mf.ones(4, placement=mf.placement('cpu', [0]), sbp=mf.sbp.split(0))")


@family("mf.save/mf.load", 6.0, covers=("mf.save", "mf.load", "io.save_file", "io.load_file"))
def _save_load(g):
    obj = _tree(g) if not g.adv or g.chance(0.6) else g.choice(BAD_TREES)
    path = CKPT if not g.adv or g.chance(0.8) else g.choice(("TMP", "''", "None", "os.path.join(TMP, 'no', 'dir')",
                                                              "'/proc/version'", "'\\x00'", "5"))
    if g.chance(0.2):
        names = {f"'t{k}'": g.tensor(g.shape(0, 3), g.dtype()).var for k in range(g.r.randint(0, 3))}
        meta = g.choice(("None", "{'format': 'pt'}", "{'k': 5}" if g.adv else "{}"))
        g.emit(f"mf.io.save_file({{{', '.join(f'{k}: {v}' for k, v in names.items())}}}, {path}, {meta})")
        g.emit(f"r = mf.io.{g.choice(('load_file', 'load_file_with_metadata'))}({path})")
        return "io.save_file"
    g.emit(f"mf.save({obj}, {path})")
    g.emit(f"r = mf.load({path})")
    return "mf.save"


@family("mf.load(corrupt)", 8.0, covers=("mf.load(corrupt)",))
def _load_corrupt(g):
    obj = _tree(g)
    g.emit(f"mf.save({obj}, {CKPT})")
    g.emit(f"b = bytearray(open({CKPT}, 'rb').read())")
    kind = g.choice(("flip", "flip", "truncate", "header_len", "header_json", "header_json", "append"))
    if kind == "flip":
        for _ in range(g.r.randint(1, 4)):
            g.emit(f"b[{g.r.randrange(2**20)} % len(b)] ^= {1 << g.r.randrange(8)}")
    elif kind == "truncate":
        g.emit(f"del b[{g.r.randrange(2**12)} % (len(b) + 1):]")
    elif kind == "header_len":
        value = g.choice(("0", "1", "2**63-1", "2**64-1", "len(b)", "len(b) - 8", "len(b) - 7", "7", "2**31",
                          "int.from_bytes(b[:8], 'little') + 1", "int.from_bytes(b[:8], 'little') - 1"))
        g.emit(f"b[:8] = (({value}) % 2**64).to_bytes(8, 'little')")
    elif kind == "header_json":
        g.emit("n = int.from_bytes(b[:8], 'little'); h = bytes(b[8:8 + n]).decode('utf-8', 'replace')")
        edit = g.choice((
            r"re.sub(r'\[(\d+)', lambda m: '[' + str(int(m.group(1)) * 2**40 + 1), h, count=1)",
            r"re.sub(r'\"data_offsets\":\[(\d+),(\d+)\]', r'\"data_offsets\":[\2,\1]', h, count=1)",
            r"re.sub(r'(\d+)\]', '18446744073709551615]', h, count=1)",
            r"re.sub(r'\"dtype\":\"\w+\"', '\"dtype\":\"F8_E4M3\"', h, count=1)",
            r"re.sub(r'\"dtype\":\"\w+\"', '\"dtype\":\"BOOL\"', h)",
            r"re.sub(r'\"shape\":\[[^\]]*\]', '\"shape\":[-1]', h, count=1)",
            r"re.sub(r'\"shape\":\[[^\]]*\]', '\"shape\":[4294967296,4294967296]', h, count=1)",
            r"re.sub(r'\"shape\":\[[^\]]*\]', '\"shape\":[]', h)",
            r"h.replace('{', '[', 1)",
            r"h[:len(h) // 2]",
            r"re.sub(r'\"__metadata__\":\{[^}]*\}', '\"__metadata__\":{\"k\":5}', h)",
            r"re.sub(r'\"__metadata__\":\{', '\"__metadata__\":{\"__meshflow_tree__\":\"[[[[\",', h)",
            "h.replace('\"', \"'\", 2)",
            r"re.sub(r'(\d+)', lambda m: str(int(m.group(1)) + 1), h, count=3)",
        ))
        g.emit(f"h = {edit}.encode()")
        g.emit("b[:8 + n] = len(h).to_bytes(8, 'little') + h")
    else:
        g.emit(f"b += bytes({g.choice(('1', '8', '4096'))})")
    g.emit(f"open({CKPT}, 'wb').write(bytes(b))")
    g.emit(f"r = mf.{g.choice(('load', 'load', 'io.load_file'))}({CKPT})")
    return "mf.load(corrupt)"


GLOBAL_SHAPES = ("[4]", "[2, 3]", "[2**62]", "[2**40, 2]", "[]", "[0]", "[-1]", "[True]", "[2.5]", "'4'", "None",
                 "[4, 2**63-1]")
GLOBAL_SHARDS = ("[[0, [0], [4]]]", "[[0, [0], [2]], [1, [2], [2]]]", "[[0, [0], [2]], [0, [1], [2]]]", "[]",
                 "[[0, [0, 0], [2, 3]]]", "[[0, [2**40], [4]]]", "[[0, [0], [1024]]]", "[[-1, [0], [4]]]",
                 "[['../x', [0], [4]]]", "[[0, [0], [2**62]]]", "[[0, [-2], [6]]]", "[[0]]", "{}", "'x'",
                 "[[0, [0], [4]]] * 5000", "[[0, [0], [4]], [0, [0], [4]]]", "[[0, [0], [2]]]")


@family("mf.load(global index)", 4.0, covers=("mf.load(global index)",))
def _load_global_index(g):
    """A global checkpoint written with the public mf.save whose index is
    crafted: huge shapes, shards that overlap or miss, offsets out of range."""
    shape, shards = g.choice(GLOBAL_SHAPES), g.choice(GLOBAL_SHARDS)
    dtype = g.choice(("'float32'", "'int64'", "'bogus'", "5"))
    index = f"{{'w': {{'shape': {shape}, 'dtype': {dtype}, 'shards': {shards}}}}}"
    text = g.choice((f"__import__('json').dumps({index})", "'{'", "'[1, 2]'", "'null'", "'{\"w\": 5}'", "5"))
    tree = g.choice(("{'w': {'__global__': 'w'}}", "{'w': {'__global__': 'v'}}", "{'w': {'__global__': [1]}}", "3"))
    g.emit(f"mf.io.save_file({{'w': mf.arange({g.choice(('4', '2', '1024', '0'))}, dtype=mf.float32)}}, "
           f"{CKPT} + '.shard0')")
    g.emit(f"mf.save({{'__meshflow_global_checkpoint__': {{'index': {text}, 'tree': {tree}}}}}, {CKPT})")
    g.emit(f"r = mf.load({CKPT})")
    return "mf.load(global index)"


DCP_DESTS = ("mf.zeros(4)", "mf.zeros(2)", "mf.zeros(2, 3)", "mf.zeros(4, dtype=mf.int64)", "mf.zeros(8)[::2]",
             "mf.zeros(())", "mf.zeros(1).expand(4)", "mf.zeros(1024)", "mf.zeros(0)", "5", "[mf.zeros(4)]",
             "{'x': mf.zeros(4)}", "mf.zeros(4, placement=mf.placement('cpu', [0]), sbp=mf.sbp.split(0))")


@family("dcp.load(crafted)", 3.0, covers=("distributed.checkpoint.load",))
def _dcp_load_crafted(g):
    """meshflow.distributed.checkpoint.load of a directory whose index, tree
    or shard file is crafted, into destinations of other shapes and kinds."""
    shape, shards = g.choice(GLOBAL_SHAPES[:6] + ("[2, 2]", "[1024]")), g.choice(GLOBAL_SHARDS)
    dtype = g.choice(("'float32'", "'float32'", "'int64'", "'bogus'"))
    index = f"{{'w': {{'shape': {shape}, 'dtype': {dtype}, 'shards': {shards}}}}}"
    tree = g.choice(("{'w': {'__global__': 'w'}}", "{'w': {'__global__': 'v'}}", "{'w': 3}", "{'w': mf.ones(4)}",
                     "{'v': {'__global__': 'w'}}", "[1]"))
    g.emit("d = os.path.join(TMP, 'dcp'); os.makedirs(d, exist_ok=True)")
    g.emit(f"mf.io.save_file({{'w': mf.arange({g.choice(('4', '2', '1024', '0'))}, "
           f"dtype={g.choice(('mf.float32', 'mf.float32', 'mf.int64'))})}}, "
           "os.path.join(d, 'checkpoint.safetensors.shard0'))")
    if g.adv and g.chance(0.3):
        g.emit("b = bytearray(open(os.path.join(d, 'checkpoint.safetensors.shard0'), 'rb').read())")
        g.emit(f"del b[{g.r.randrange(2**10)} % (len(b) + 1):]" if g.chance(0.5)
               else f"b[{g.r.randrange(2**12)} % len(b)] ^= {1 << g.r.randrange(8)}")
        g.emit("open(os.path.join(d, 'checkpoint.safetensors.shard0'), 'wb').write(bytes(b))")
    g.emit(f"mf.save({{'__meshflow_global_checkpoint__': {{'index': __import__('json').dumps({index}), "
           f"'tree': {tree}}}}}, os.path.join(d, 'checkpoint.safetensors'))")
    g.emit(f"sd = {{'w': {g.choice(DCP_DESTS)}}}")
    g.emit(f"mf.distributed.checkpoint.load(sd, checkpoint_id={g.choice(('d', 'd', 'TMP', '5', repr(''))) })")
    g.emit("r = sd['w']")
    return "distributed.checkpoint.load"


# Edits whose result pickle itself still reads, so what is tested is
# _rebuild_tensor's check (random flips make errors of pickle's own).
PICKLE_EDITS = ("b", "b.replace(b'float32', b'float64')", "b.replace(b'int64', b'int32')",
                "b.replace(b'float16', b'float32')", "b.replace(b'uint8', b'int16')")


@family("pickle", 3.0, covers=("pickle",))
def _pickle(g):
    x = g.tensor(g.shape(0, 3), g.dtype())
    g.emit(f"b = __import__('pickle').dumps({x.var})")
    if g.hit():
        g.emit(f"b = {g.choice(PICKLE_EDITS)}")
        g.emit("r = __import__('pickle').loads(b)")
    elif g.chance(0.3):
        data = g.choice(("b''", "b'abcd'", "bytes(8)", "bytes(3)", "b'\\x02' * 2"))
        dtype = g.choice(("'float32'", "'bool'", "'x'", "5"))
        shape = g.choice(("(2,)", "(2**62,)", "(-1,)", "()", "[2, 2**63-1]", "None"))
        g.emit(f"r = mf._C._rebuild_tensor({data}, {dtype}, {shape}, {g.choice(('False', 'True'))})")
    else:
        g.emit("r = __import__('pickle').loads(b)")
    return "pickle"


# --- global tensors --------------------------------------------------------------------------

PLACEMENT = "mf.placement('cpu', [0])"
BAD_PLACEMENTS = ("mf.placement('cpu', [1])", "mf.placement('cpu', [0, 0])", "mf.placement('cpu', [])",
                  "mf.placement('cpu', [[0]])", "mf.placement('cuda', [0])", "mf.placement('cpu', [-1])",
                  "mf.placement('cpu', [2**31])", "mf.placement('cpu', [[0], [1]])", "'cpu'", "None",
                  "mf.placement('cpu', [[[0]]])", "mf.placement('cpu', [0, 1])")


def sbp_text(g, ndim):
    if g.hit():
        return g.choice(("mf.sbp.split(" + g.choice(("-1", str(ndim), "2**63-1", "-2**63", "64", "None")) + ")",
                         "(mf.sbp.broadcast, mf.sbp.broadcast)", "()", "[mf.sbp.split(0)] * 9", "'B'", "None", "0",
                         "(mf.sbp.split(0), mf.sbp.split(0))"))
    options = ["mf.sbp.broadcast", "mf.sbp.partial_sum"] + [f"mf.sbp.split({d})" for d in range(ndim)]
    s = g.choice(options)
    return f"({s},)" if g.chance(0.3) else s


def globalize(g, var, meta):
    placement = PLACEMENT if not g.hit() else g.choice(BAD_PLACEMENTS)
    g.emit(f"{var} = {var}.to_global(placement={placement}, sbp={sbp_text(g, meta.ndim)})")


_GLOBAL_OPS = [s for s in OPS if s.form in ("fn", "method", "F")]


@family("global", 15.0, covers=("global", "Tensor.to_global", "Tensor.to_local", "mf.placement", "mf.sbp"))
def _global(g):
    u = g.r.random()
    if u < 0.2:  # factories with placement= and sbp=, then conversions
        fn = g.choice(("randn", "rand", "zeros", "ones", "empty"))
        shape = g.shape(0, 3)
        placement = PLACEMENT if not g.hit() else g.choice(BAD_PLACEMENTS)
        g.emit(f"x = mf.{fn}({size_arg(g, list(shape))}, placement={placement}, sbp={sbp_text(g, len(shape))})")
        g.emit(g.choice(("r = x.to_global(sbp=" + sbp_text(g, len(shape)) + ")",
                         "r = x.to_local()", "r = x + 1", "r = x.sum()", "r = (x.placement, x.sbp, x.shape)",
                         "r = x.to_global(placement=" + PLACEMENT + ", sbp=" + sbp_text(g, len(shape)) + ").to_local()",
                         "r = x.item() if x.numel() == 1 else x.tolist()", "r = x.numpy()", "r = x[0]",
                         "r = mf.tensor([1, 2], placement=" + PLACEMENT + ", sbp=mf.sbp.split(0))")))
        return "global.factory"
    # Any op, with (some of) its tensor inputs made global right after they are built.
    spec = g.choice(_GLOBAL_OPS)
    g.global_hook = lambda var, meta: globalize(g, var, meta) if g.chance(0.75) else None
    called = spec.emit(g)
    g.global_hook = None
    return "global:" + called


# --- indexing, operators, construction, conversions, init ----------------------------------


def _index_item(g, size):
    u = g.r.random()
    if u < 0.25:
        return str(g.r.randint(-size, size - 1)) if size else "0"
    if u < 0.55:
        parts = [g.choice(("", str(g.r.randint(-size - 1, size + 1)))) for _ in range(2)]
        step = g.choice(("", "", "2", "3", "1"))
        return ":".join(parts) + (":" + step if step else "")
    if u < 0.65:
        return "None"
    if u < 0.72:
        return "..."
    if u < 0.85:
        n = g.size(0, 4)
        return g.tensor((n,), "int64", ints=(-size if size else 0, max(size, 1))).var
    if u < 0.92:
        return g.tensor((size,), "bool").var
    return "[" + ", ".join(str(g.r.randint(-size, max(size - 1, 0))) for _ in range(g.size(1, 3))) + "]"


BAD_INDEX = ("2**63", "2**63-1", "-2**63", "2**31", "slice(0, 2**63)", "slice(None, None, 0)", "slice(None, None, -1)",
             "'a'", "1.5", "[[0], [0, 1]]", "(..., ...)", "{}", "mf.ones(2)", "mf.tensor([2**62])",
             "mf.tensor([-2**63])", "np.array([2**63-1])", "[True, 2]", "slice(2**62, None)", "mf.ones(1, 1, 1, 1, 1, 1, 1, 1, 1).bool()",
             "(None,) * 70", "(0,) * 70", "mf.zeros(0, dtype=mf.int64)", "np.zeros((2, 0), dtype=np.int64)")


@family("Tensor.__getitem__/__setitem__", 10.0, covers=("Tensor.__getitem__", "Tensor.__setitem__"))
def _indexing(g):
    x = g.tensor(g.shape(0, 4), g.dtype())
    k = g.r.randint(1, max(x.ndim, 1) + (1 if g.chance(0.2) else 0))
    items = [_index_item(g, x.shape[d] if d < x.ndim else 1) for d in range(k)]
    if g.hit():
        items[g.r.randrange(len(items))] = g.choice(BAD_INDEX)
    idx = ", ".join(items) + ("," if len(items) == 1 and g.chance(0.3) else "")
    if g.chance(0.35):
        value = g.choice((g.scalar(x.dtype), g.tensor((), x.dtype).var, g.tensor(x.shape[-1:], g.dtype()).var,
                          "float('nan')", "[1, 2]" if g.adv else "1"))
        g.emit(f"{x.var}[{idx}] = {value}")
        g.emit(f"r = {x.var}")
        return "Tensor.__setitem__"
    g.emit(f"r = {x.var}[{idx}]")
    return "Tensor.__getitem__"


UNARY_OPS = ("-{}", "~{}", "+{}", "abs({})", "not {}", "bool({})", "float({})", "int({})", "len({})", "list({})",
             "hash({})", "{} in {}", "reversed({})", "divmod({}, 2)")
BINOPS = ("+", "-", "*", "/", "//", "%", "**", "@", "&", "|", "^", "<", "<=", "==", "!=", ">", ">=", "<<", ">>")


@family("operators", 6.0, covers=("operators",))
def _operators(g):
    x = g.tensor(g.shape(), g.dtype())
    other = g.tensor(g.bshape(x.shape), x.dtype if g.chance(0.8) else g.dtype()).var if g.chance(0.7) else g.arg(
        "scalar", g.scalar(x.dtype))
    opr = g.choice(BINOPS)
    u = g.r.random()
    if u < 0.5:
        g.emit(f"r = {x.var} {opr} {other}")
    elif u < 0.65:
        g.emit(f"r = {g.scalar(x.dtype)} {opr} {x.var}")
    elif u < 0.85 and opr in ("+", "-", "*", "/", "//", "%", "**", "&", "|", "^"):
        g.emit(f"{x.var} {opr}= {other}")
        g.emit(f"r = {x.var}")
    else:
        g.emit("r = " + g.choice(UNARY_OPS).format(x.var, x.var))
    return "operators"


DATA = ("[[1, 2], [3]]", "[[[]]]", "[]", "[[], []]", "[1, [2]]", "[2**63]", "[2**63-1, -2**63]", "[2**64]",
        "[True, 1, 1.5]", "[float('nan'), float('inf')]", "[[1.0] * 3] * 2", "1j", "'abc'", "[None]", "None",
        "[mf.ones(2), mf.ones(2)]", "[mf.tensor(1), 2]", "[[mf.ones(())]]", "np.float16(1.5)", "[np.int8(3), 2]",
        "np.zeros((2, 0, 3))", "np.arange(12).reshape(3, 4)[:, ::2]", "np.arange(12).reshape(3, 4).T",
        "np.zeros((3, 3))[::-1]", "np.zeros(4, dtype=np.complex64)", "np.zeros(3, dtype=object)",
        "np.array(['a'])", "np.zeros((1,) * 40)", "np.zeros(3, dtype='>f4')", "np.zeros(3, dtype=np.uint64)",
        "np.broadcast_to(np.ones(3), (4, 3))", "np.zeros(5)[1:]", "b'abc'", "bytearray(4)", "range(5)",
        "(1, 2, 3)", "[[1, 2], (3, 4)]", "{'a': 1}", "[1] * 100000", "3", "2.5", "True",
        "np.ones((2, 3), dtype=np.float32)", "np.float64('nan')", "[" * 40 + "1" + "]" * 40)


@family("mf.tensor/from_numpy", 6.0, covers=("mf.tensor", "mf.as_tensor", "mf.from_numpy"))
def _construct(g):
    data = g.choice(DATA)
    fn = g.choice(("tensor", "tensor", "as_tensor", "from_numpy"))
    kw = [] if fn == "from_numpy" else kwargs(g, [("dtype", "dtype", dt(g.dtype()))])
    if fn == "tensor" and g.chance(0.3):
        kw.append(f"requires_grad={a(g, 'bool', g.boolean())}")
    g.emit(f"r = mf.{fn}({', '.join([data] + kw)})")
    return "mf." + fn


CONVERSIONS = ("item()", "tolist()", "numpy()", "numpy(force=True)", "size()", "size(-1)", "stride()", "stride(0)",
               "dim()", "numel()", "is_contiguous()", "storage_offset()", "element_size()", "data_ptr()",
               "__len__()", "__repr__()", "__str__()", "__format__('.3f')", "__format__('')", "__bool__()",
               "__float__()", "__int__()", "__index__()", "__iter__()", "__array__()", "__dlpack__()",
               "__dlpack_device__()", "__deepcopy__({})", "new_zeros((2, 3))", "new_ones([2])", "new_empty(())",
               "new_full((2,), 3)", "new_tensor([1, 2])", "requires_grad_()", "retain_grad()",
               "register_hook(lambda grad: grad * 2)", "grad_fn", "is_leaf", "grad", "data", "shape", "T",
               "nbytes", "itemsize", "output_nr", "is_global", "requires_grad", "__round__()", "__round__(2)",
               "__reduce_ex__(2)", "__setattr__('data', mf.zeros(3))")
BAD_CONVERSIONS = ("size(2**63-1)", "size(-2**63)", "stride(99)", "size('a')", "new_zeros(2**62)",
                   "new_full((2,), None)", "new_tensor([[1], [1, 2]])", "requires_grad_('x')",
                   "__format__('%%')", "numpy(force=None)", "to_local()", "__dlpack__(stream=1)",
                   "register_hook(None)", "new_empty((2**31, 2**31))", "__round__(2**63)", "__round__('a')",
                   "__setattr__('data', None)", "__setattr__('data', 3)")


@family("Tensor metadata/conversion", 5.0, covers=("Tensor.metadata",))
def _conversions(g):
    x = g.tensor(g.shape(0, 3), g.dtype())
    conv = g.choice(BAD_CONVERSIONS) if g.hit() else g.choice(CONVERSIONS)
    g.emit(f"r = {x.var}.{conv}")
    if conv.startswith("__iter__"):
        g.emit("r = list(r)")
    if conv.startswith("__dlpack__") and g.chance(0.5):
        g.emit(f"r = mf.from_dlpack({g.choice((x.var, 'r', f'mf.to_dlpack({x.var})'))})")
    if conv.startswith("register_hook") and x.grad:
        g.emit(f"{x.var}.sum().backward()")
    return "Tensor." + conv.split("(")[0]


INITS = (("uniform_", [("a", "float", -1.0), ("b", "float", 1.0)]), ("normal_", [("mean", "float", 0.0), ("std", "float", 1.0)]),
         ("constant_", [("val", "float", 0.5)]), ("ones_", []), ("zeros_", []),
         ("trunc_normal_", [("mean", "float", 0.0), ("std", "float", 1.0), ("a", "float", -2.0), ("b", "float", 2.0)]),
         ("xavier_uniform_", [("gain", "float", 1.0)]), ("xavier_normal_", [("gain", "float", 1.0)]),
         ("kaiming_uniform_", [("a", "float", 0.0), ("mode", "str", "'fan_in'"), ("nonlinearity", "str", "'relu'")]),
         ("kaiming_normal_", [("a", "float", 0.0), ("mode", "str", "'fan_out'"), ("nonlinearity", "str", "'leaky_relu'")]),
         ("orthogonal_", [("gain", "float", 1.0)]))


@family("nn.init", 3.0, covers=["nn.init." + n for n, _ in INITS] + ["nn.init.calculate_gain"])
def _init(g):
    if g.chance(0.15):
        g.emit(f"r = nn.init.calculate_gain({a(g, 'str', repr(g.choice(('relu', 'tanh', 'leaky_relu', 'selu', 'linear', 'conv2d', 'sigmoid'))))}, "
               f"{a(g, 'float', g.choice(('None', '0.2')))})")
        return "nn.init.calculate_gain"
    name, items = g.choice(INITS)
    x = g.tensor(g.shape(0, 4), g.dtype(FLOATS) if g.chance(0.9) else g.dtype(), grad=False)
    g.emit(f"r = nn.init.{name}({', '.join([g.targ(x)] + kwargs(g, items))})")
    return "nn.init." + name


@family("distributions(gamma)", 3.0, covers=("distributions.Gamma", "distributions.Chi2", "distributions.Beta",
                                            "distributions.Dirichlet"))
def _gamma_distributions(g):
    """A distribution drawn through the gamma sampler, with parameters of any sign,
    then one of its methods."""
    dtype = g.dtype(FLOATS) if g.chance(0.9) else g.dtype()
    x = g.tensor(g.shape(0, 3), dtype, grad=g.chance(0.5))
    y = g.tensor(g.bshape(x.shape), dtype)
    name = g.choice(("Gamma", "Chi2", "Beta", "Dirichlet"))
    params = {"Gamma": [g.targ(x), g.choice((g.targ(y), a(g, "float", 2.0)))], "Chi2": [g.targ(x)],
              "Beta": [g.targ(x), g.choice((g.targ(y), a(g, "float", 0.5)))], "Dirichlet": [g.targ(x)]}[name]
    params += kwargs(g, [("validate_args", "bool", g.chance(0.5))])
    g.emit(f"d = mf.distributions.{name}({', '.join(params)})")
    shape = size_arg(g, [g.size(0, 3) for _ in range(g.r.randint(0, 2))])
    g.emit(g.choice((f"r = d.rsample({shape})", f"r = d.sample({shape})", "r = d.log_prob(d.sample())",
                     "r = d.entropy()", "r = (d.mean, d.variance, d.mode)", "r = mf.distributions.kl_divergence(d, d)",
                     f"r = d.expand({size_arg(g, [2] + list(x.shape[:-1] if name == 'Dirichlet' else x.shape))})",
                     f"r = d.rsample({shape}).sum().backward()")))
    return "distributions." + name


@family("autograd", 4.0, covers=("Tensor.backward", "autograd.grad"))
def _autograd(g):
    """A small graph through a random op, then backward with the awkward options."""
    x = g.tensor(g.shape(0, 3), g.dtype(FLOATS), grad=True)
    g.emit(f"y = ({x.var} * 2).{g.choice(('exp', 'sin', 'relu', 'sigmoid', 'abs'))}()")
    form = g.choice(("y.sum().backward()", "y.backward(mf.ones_like(y))", "y.sum().backward(retain_graph=True); y.sum().backward()",
                     f"r = mf.autograd.grad(y.sum(), [{x.var}], create_graph=True)",
                     f"r = mf.autograd.grad([y.sum()], [{x.var}], allow_unused=True)",
                     f"(gx,) = mf.autograd.grad(y.sum(), [{x.var}], create_graph=True); gx.sum().backward()",
                     "with mf.no_grad(): z = y * 2\nz.sum().backward()",
                     f"y.backward({g.choice(('mf.ones(1)', 'mf.ones(()).expand(2**31)', 'None', '5'))})"
                     if g.adv else "y.sum().backward()",
                     f"h = {x.var}.register_hook(lambda gr: gr * 0); y.sum().backward(); h.remove()"))
    g.emit(form)
    g.emit(f"r = {x.var}.grad")
    return "autograd"


# --- memory tools: ZeRO and accumulation in graphs, fully_shard ---------------------------------

ZERO_STAGES = ("1", "2", "3", "3", "0", "4", "'2'", "True")
ACCUMULATION = ("1", "2", "4", "3", "0", "-1", "2.0")


@family("Graph(enable_zero)", 2.0, covers=("nn.Graph.config.enable_zero",
                                          "nn.Graph.config.set_gradient_accumulation_steps"))
def _graph_zero(g):
    """A one-rank global model in an nn.Graph under enable_zero and gradient
    accumulation, with awkward stages, sizes and batch shapes."""
    stage = g.choice(ZERO_STAGES) if g.adv else g.choice(ZERO_STAGES[:4])
    min_size = g.choice(("0", "16", "1024", "-1" if g.adv else "8"))
    steps = g.choice(ACCUMULATION) if g.adv else g.choice(ACCUMULATION[:3])
    rows = g.choice((4, 8, 2, 1, 3 if g.adv else 8))
    g.emit("mesh = mf.placement('cpu', [0])")
    width = g.choice(("4", "5", "1"))
    g.emit(f"net = mf.nn.Sequential(mf.nn.Linear(3, {width}), mf.nn.Tanh(), mf.nn.Linear({width}, 2))")
    g.emit("net = net.to_global(placement=mesh, sbp=mf.sbp.broadcast)" if not g.adv or g.chance(0.8) else "pass")
    g.emit(f"opt = mf.optim.{g.choice(('AdamW', 'SGD', 'Adam'))}(net.parameters(), lr=0.1)")
    g.emit("class G(mf.nn.Graph):\n"
           "    def __init__(self):\n"
           "        super().__init__()\n"
           "        self.net = net\n"
           "        self.add_optimizer(opt)\n"
           f"        self.config.enable_zero(True, stage={stage}, shard_min_size={min_size})\n"
           f"        self.config.set_gradient_accumulation_steps({steps})\n"
           "    def build(self, x):\n"
           "        loss = self.net(x).pow(2).mean()\n"
           "        loss.backward()\n"
           "        return loss")
    g.emit(f"x = mf.randn({rows}, 3).to_global(placement=mesh, sbp=mf.sbp.split(0))")
    if g.chance(0.3):
        g.emit("net[0].weight.requires_grad_(False)")
    g.emit("r = G()(x)")
    return "nn.Graph.config.enable_zero"


FSDP_MESHES = ("None", "mf.placement('cpu', [0])", "mf.distributed.device_mesh.init_device_mesh('cpu', (1,))",
               "mf.placement('cpu', [[0]])", "'cpu'", "5", "mf.placement('cpu', [1])")


@family("fully_shard", 2.0, covers=("distributed.fsdp.fully_shard",))
def _fully_shard(g):
    """fully_shard on submodules and roots with awkward arguments, then
    forwards (some that raise) and backwards."""
    g.emit("import meshflow.distributed.device_mesh")
    g.emit("from meshflow.distributed.fsdp import fully_shard")
    g.emit(f"net = mf.nn.Sequential(mf.nn.Linear(3, 4), mf.nn.{g.choice(('Tanh()', 'ReLU()', 'LayerNorm(4)'))}, "
           "mf.nn.Linear(4, 2))")
    mesh = g.choice(FSDP_MESHES) if g.adv else g.choice(FSDP_MESHES[:3])
    reshard = g.choice(("True", "False", "1" if g.adv else "True"))
    if g.chance(0.6):
        g.emit(f"fully_shard(net[{g.choice(('0', '2'))}], mesh={mesh}, reshard_after_forward={reshard})")
    target = "net" if not g.adv or g.chance(0.7) else g.choice(("net[1]", "mf.nn.Linear(2, 2)", "net.double()",
                                                                "5", "mf.nn.parallel.DistributedDataParallel(net)"))
    g.emit(f"fully_shard({target}, mesh={mesh}, reshard_after_forward={reshard})")
    if target == "net" and g.chance(0.3):
        g.emit(f"net.set_requires_gradient_sync({g.choice(('False', 'True'))})")
    shape = g.choice(("(2, 3)", "(5, 3)", "(3,)", "(2, 4)" if g.adv else "(1, 3)", "(0, 3)"))
    g.emit(f"out = net(mf.randn{shape})")
    g.emit("out.sum().backward()")
    g.emit("r = net[0].weight.grad")
    return "distributed.fsdp.fully_shard"
