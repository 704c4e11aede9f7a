"""Per-function argument specs: every op of docs/ops.md's table as data.

A Spec lists an op's parameters as small parameter generators (a fresh tensor,
a tensor broadcastable with the first one, a dim of input 0, an int in a
range, a size list, a dtype, ...). Each generator returns source text for a
valid-ish value and, in an adversarial call, sometimes a bad one of its kind
(Gen.arg). Parameters that depend on each other (gather's index and dim,
conv2d's weight and groups) share a per-call Ctx: a parameter stores what it
drew in ctx.v and a later one reads it. Ops whose inputs must agree on more
than broadcasting (matmul, conv, losses) draw them together in an `inputs`
function instead.

The names are those of docs/ops.md ("add", "nn.functional.relu",
"Tensor.add_"); method=True also covers "Tensor.<name>", aliases cover other
public names of the same function ("clip", "concat", "conv2d").
"""
from generators import ALL, BOOL, FLOATS, INTS, NUMERIC, dt, factor_shape, numel, shape_text


class Ctx:
    """What the parameters of one call have drawn so far."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.t = []  # TMeta of each tensor input, in order
        self.v = {}  # named values shared between parameters


def _list(values, tuple_=False):
    if tuple_:
        return "(" + ", ".join(map(str, values)) + ("," if len(values) == 1 else "") + ")"
    return "[" + ", ".join(map(str, values)) + "]"


def size_arg(g, valid, kind="size"):
    """A size list: valid, or in an adversarial position one huge/negative/ill-typed
    element swapped in (half the time) or a canned bad list."""
    text = _list(valid, tuple_=g.chance(0.5))
    if not g.hit():
        return text
    if valid and g.chance(0.5):
        bad = list(map(str, valid))
        bad[g.r.randrange(len(bad))] = g.bad("int")
        return _list(bad)
    return g.bad(kind)


def varargs(g, valid):
    """Sizes for methods taking *sizes (x.view(2, 3)) or one sequence (x.view((2, 3)))."""
    if g.chance(0.5) and valid:
        vals = list(map(str, valid))
        if g.hit():
            vals[g.r.randrange(len(vals))] = g.bad("int")
        return ", ".join(vals)
    return size_arg(g, valid)


# --- parameter generators: (g, ctx) -> source text -------------------------------------------


def X(pool=None, nd=(0, 4), shape=None, ints=None, grad=None):
    """A fresh tensor input (input 0 unless others came first)."""

    def p(g, c):
        sh = shape(g, c) if callable(shape) else shape if shape is not None else g.shape(*nd)
        m = g.tensor(sh, c.dtype if pool is None else g.dtype(pool), ints=ints, grad=grad)
        c.t.append(m)
        return g.targ(m)

    return p


def Y(of=0, same_dtype=False, shape=None, pool=None):
    """A tensor that broadcasts with input `of` (its dtype most of the time)."""

    def p(g, c):
        base = c.t[of]
        sh = shape(g, c) if shape else g.bshape(base.shape)
        dtype = base.dtype if same_dtype or g.chance(0.85) else g.dtype(pool or ALL)
        m = g.tensor(sh, dtype)
        c.t.append(m)
        return g.targ(m, protect=False)

    return p


def Other(of=0, scalar_p=0.3, same_dtype=False):
    """A broadcastable tensor or a Python number."""
    tensor = Y(of, same_dtype)

    def p(g, c):
        if g.chance(scalar_p):
            return g.arg("scalar", g.scalar(c.t[of].dtype))
        return tensor(g, c)

    return p


def T(i):
    """Input i, drawn earlier by the spec's inputs function."""
    return lambda g, c: g.targ(c.t[i])


def OptT(i):
    """Input i or None (optional weight/bias)."""
    return lambda g, c: "None" if g.chance(0.3) else g.targ(c.t[i])


def Scalar(of=0):
    """A Python number for input `of`'s dtype (of=None: the call's dtype)."""
    return lambda g, c: g.arg("scalar", g.scalar(c.t[of].dtype if c.t and of is not None else c.dtype))


def Dim(of=0, key="dim", extra=0):
    """A valid dim of input `of` (extra=1: one past the end is valid too, as for unsqueeze)."""

    def p(g, c):
        nd = c.t[of].ndim + extra
        d = g.dim(nd)
        c.v[key] = d % max(c.t[of].ndim, 1) if c.t[of].ndim else 0  # normalised: indexes the shape
        return g.arg("dim", str(d))

    return p


def x_and_dim(min_nd=0, max_nd=4):
    """inputs= for ops whose earlier parameters depend on a later dim (topk's k, split's
    sizes): draws input 0 and the dim first; V("rawdim", "dim") emits the dim."""

    def inputs(g, c):
        x = g.tensor(g.shape(min_nd, max_nd), c.dtype)
        c.t.append(x)
        d = g.dim(x.ndim)
        c.v["rawdim"], c.v["dim"] = d, d % x.ndim if x.ndim else 0

    return inputs


def Dims(of=0):
    return lambda g, c: g.arg("size", g.dims(c.t[of].ndim))


def Int(lo, hi, key=None):
    def p(g, c):
        v = g.r.randint(lo, hi)
        if key:
            c.v[key] = v
        return g.arg("int", str(v))

    return p


def V(key, kind="int"):
    """A value an inputs function or earlier parameter stored."""
    return lambda g, c: g.arg(kind, repr(c.v[key]) if not isinstance(c.v[key], str) else c.v[key])


def Flt(lo, hi):
    return lambda g, c: g.arg("float", g.flt(lo, hi))


def Bool():
    return lambda g, c: g.arg("bool", g.boolean())


def Str(*choices):
    return lambda g, c: g.arg("str", repr(g.choice(choices)))


def DType(pool=ALL):
    return lambda g, c: g.arg("dtype", dt(g.dtype(pool)))


def Lit(*texts):
    """A fixed text (no adversarial replacement): forms that must stay well-typed."""
    return lambda g, c: g.choice(texts)


def Size(fn):
    """A size list computed from the context: fn(g, c) -> list of ints."""
    return lambda g, c: size_arg(g, fn(g, c))


def SizeArgs(fn):
    return lambda g, c: varargs(g, fn(g, c))


def Pair(lo, hi):
    """An int or an (a, b) pair, as pooling and conv take."""

    def p(g, c):
        if g.chance(0.5):
            return g.arg("int", str(g.r.randint(lo, hi)))
        return size_arg(g, [g.r.randint(lo, hi), g.r.randint(lo, hi)])

    return p


def Sizes(lo, hi, n):
    """An int or an n-tuple, as the n-d convolutions take."""

    def p(g, c):
        if g.chance(0.5):
            return g.arg("int", str(g.r.randint(lo, hi)))
        return size_arg(g, [g.r.randint(lo, hi) for _ in range(n)])

    return p


def Index(of=0, dim_key="dim", shape=None, key=None):
    """An int64 index tensor with entries valid for input `of` along ctx.v[dim_key]."""

    def p(g, c):
        base = c.t[of]
        size = base.shape[c.v.get(dim_key, 0)] if base.ndim else 1
        sh = shape(g, c) if shape else (g.size(0, 6),) if g.chance(0.85) else ()
        lo = -size if g.chance(0.1) else 0
        m = g.tensor(sh, "int64" if g.chance(0.9) else "int32", ints=(lo, max(size, 1)))
        c.t.append(m)
        if key:
            c.v[key] = m
        return g.targ(m)

    return p


def Mask(of=0):
    """A bool tensor broadcastable with input `of`."""

    def p(g, c):
        m = g.tensor(g.bshape(c.t[of].shape), "bool" if g.chance(0.95) else "uint8")
        c.t.append(m)
        return g.targ(m)

    return p


# --- shape helpers for view-like ops ----------------------------------------------------------


def reshaped(infer=True):
    return lambda g, c: factor_shape(g.r, c.t[0].numel, infer=infer)


def expanded(g, c):
    out = [g.choice((1, 3, -1)) if s == 1 else g.choice((s, s, -1)) for s in c.t[0].shape]
    lead = [g.size(0, 3) for _ in range(g.choice((0, 0, 1, 2)))]
    return lead + out


def perm(g, c):
    p = list(range(c.t[0].ndim))
    g.r.shuffle(p)
    return [d - len(p) if g.chance(0.2) else d for d in p]


def repeats(g, c):
    return [g.choice((1, 2, 3, 0)) for _ in range(c.t[0].ndim + g.choice((0, 0, 1)))] or [2]


def dims_list(g, c):
    nd = c.t[0].ndim
    return g.r.sample(range(nd), g.r.randint(0, nd)) if nd else []


def sum_to(g, c):
    shape = c.t[0].shape
    return [1 if g.chance(0.4) else s for s in shape[g.r.randrange(len(shape) + 1):]] if shape else []


# --- specs ------------------------------------------------------------------------------


class Spec:
    """One public function: how to call it and with what.

    args: positional parameter generators; the first `nreq` always appear, the
    rest are dropped from the end at random. kwargs: keyword parameters, each
    passed half of the time. inputs(g, c): draws coupled tensor inputs into
    c.t before the parameters run. form: "fn" (mf.<name>), "F"
    (F.<name>), "linalg" (mf.linalg.<name>), "method" (<input 0>.<name>),
    "prop" (<input 0>.<name>)."""

    def __init__(self, name, args=(), kwargs=None, dtypes=ALL, method=False, aliases=(), nreq=None, inputs=None,
                 weight=1.0):
        self.name = name
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.dtypes = dtypes
        self.method = method
        self.aliases = tuple(aliases)
        self.nreq = len(self.args) if nreq is None else nreq
        self.inputs = inputs
        self.weight = weight
        self.short = name.split(".")[-1]
        if name.startswith("Tensor."):
            self.form = "prop" if self.short in ("T", "mT") else "method"
        elif name.startswith("nn.functional."):
            self.form = "F"
        elif name.startswith("linalg."):
            self.form = "linalg"
        else:
            self.form = "fn"

    def covered(self):
        names = [self.name, *self.aliases]
        if self.method:
            names.append("Tensor." + self.short)
        return names

    def emit(self, g):
        """Appends the call's statements to g.lines; returns the called name."""
        dtype = g.dtype(self.dtypes)
        if (g.adv and g.chance(0.25)) or g.chance(0.03):  # a dtype the op may not support
            dtype = g.dtype(ALL)
        c = Ctx(dtype)
        if self.inputs:
            self.inputs(g, c)
        forms = [(self.form, self.short)] + [("fn" if "." not in a else "F", a.split(".")[-1]) for a in self.aliases]
        if self.method:
            forms.append(("method", self.short))
        form, short = g.choice(forms)
        n = g.r.randint(self.nreq, len(self.args)) if len(self.args) > self.nreq else len(self.args)
        texts = []
        for k, p in enumerate(self.args[:n]):
            g.protect = form in ("method", "prop") and k == 0  # x.op(...) needs x to be a tensor
            texts.append(p(g, c))
            g.protect = False
        kw = [f"{k}={p(g, c)}" for k, p in self.kwargs.items() if g.chance(0.5)]
        if g.adv and g.chance(0.04):
            extra = g.choice(("bogus=1", "out=None", "dim=0", "dtype=mf.float64"))
            if not any(k.split("=")[0] == extra.split("=")[0] for k in kw):  # a repeat is a SyntaxError
                kw.append(extra)
        if g.adv and g.chance(0.04):
            texts.append(g.bad("int"))
        if form in ("method", "prop"):
            owner, rest = texts[0], texts[1:]
            called = "Tensor." + short
            call = f"{owner}.{short}" if form == "prop" else f"{owner}.{short}({', '.join(rest + kw)})"
        else:
            prefix = {"fn": "mf.", "F": "F.", "linalg": "mf.linalg."}[form]
            called = prefix + short
            call = f"{prefix}{short}({', '.join(texts + kw)})"
        g.emit(f"r = {call}")
        return called


OPS = []


def op(name, args=(), kwargs=None, **kw):
    OPS.append(Spec(name, args, kwargs, **kw))


# Elementwise, unary. The domain of log/sqrt is not enforced: NaN results are fine.
for _n in ("abs", "neg", "square", "floor", "ceil", "round", "trunc", "relu"):
    op(_n, [X()], dtypes=NUMERIC, method=True)
for _n in ("sign", "exp", "expm1", "sin", "cos", "tanh", "sigmoid", "erf", "lgamma", "digamma", "log", "log1p", "sqrt", "rsqrt",
           "reciprocal", "logical_not", "isnan", "isinf", "isfinite", "clone", "contiguous"):
    op(_n, [X()], dtypes=ALL, method=True)
op("bitwise_not", [X()], dtypes=BOOL + INTS, method=True)
for _n in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2",
           "erfc", "erfinv", "sinc", "deg2rad", "rad2deg", "arcsin", "arccos", "arctan", "arcsinh", "arccosh",
           "arctanh", "absolute", "negative", "fix", "frac"):
    op(_n, [X()], dtypes=ALL, method=True)
for _n in ("multiply", "subtract", "divide", "true_divide", "greater", "greater_equal", "less", "less_equal",
           "not_equal", "arctan2"):
    op(_n, [X(), Other()], dtypes=ALL, method=True)
_IN_PLACE = ("exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "square", "reciprocal", "sin", "cos", "tanh", "sigmoid",
             "erf", "lgamma", "digamma", "sign", "floor", "ceil", "round", "trunc", "tan", "asin", "acos", "atan",
             "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2", "erfc", "erfinv", "sinc", "frac",
             "deg2rad", "rad2deg", "absolute", "negative", "fix", "arcsin", "arccos", "arctan", "arcsinh", "arccosh",
             "arctanh")
for _n in _IN_PLACE:
    op("Tensor." + _n + "_", [X()], dtypes=ALL)
    if _n not in ("absolute", "lgamma", "digamma", "sign", "erfinv", "negative"):
        op(_n + "_", [X()], dtypes=ALL)
for _n in ("multiply_", "divide_", "subtract_", "true_divide_"):
    op("Tensor." + _n, [X(), Other()], dtypes=ALL)
op("relu_", [X()], dtypes=NUMERIC)
op("gelu", [X()], {"approximate": Str("tanh", "none")}, dtypes=FLOATS)
op("silu", [X()], dtypes=FLOATS)
op("leaky_relu", [X(), Flt(-1, 1)], dtypes=FLOATS, nreq=1)
op("elu", [X(), Flt(0, 2)], dtypes=FLOATS, nreq=1)
op("softplus", [X(), Flt(0.1, 3), Flt(-5, 25)], dtypes=FLOATS, nreq=1)

# Elementwise, binary.
for _n in ("add", "sub"):
    op(_n, [X(), Other()], {"alpha": Scalar()}, dtypes=ALL if _n == "add" else NUMERIC, method=True)
op("rsub", [X(), Other()], {"alpha": Scalar()}, dtypes=NUMERIC)
for _n in ("mul", "div", "eq", "ne", "lt", "le", "gt", "ge"):
    op(_n, [X(), Other()], dtypes=ALL, method=True)
op("div", [X(), Other()], {"rounding_mode": Str("floor", "trunc")}, dtypes=NUMERIC, method=True)
for _n in ("floor_divide", "remainder", "pow"):
    op(_n, [X(), Other()], dtypes=NUMERIC, method=True)
op("pow", [Lit("2.0", "0.5", "2", "-1.5", "0"), X()], dtypes=FLOATS)
for _n in ("minimum", "maximum", "atan2", "logical_and", "logical_or", "logical_xor"):
    op(_n, [X(), Y()], dtypes=ALL, method=True)
for _n in ("isclose", "allclose"):
    op(_n, [X(), Y()], {"rtol": Lit("1e-5", "0.0", "0.5", "-1.0"), "atol": Lit("1e-8", "0.0", "1.0", "-0.5"),
                        "equal_nan": Lit("True", "False")}, dtypes=ALL, method=True)
op("equal", [X(), Y()], dtypes=ALL, method=True)
op("xlogy", [X(), Other()], dtypes=ALL, method=True)
op("polygamma", [Int(-2, 4), X()], dtypes=ALL)
op("multinomial", [X(), Int(-1, 6)], {"replacement": Lit("True", "False")}, dtypes=ALL, method=True)
op("normal", [X(), Other()], dtypes=ALL)
op("_standard_gamma", [X()], dtypes=("float32", "float64"))
op("_standard_gamma_grad", [X(), Y()], dtypes=("float32", "float64"))
for _n in ("clamp_min", "clamp_max"):
    op(_n, [X(), Scalar()], dtypes=NUMERIC, method=True)
for _n in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"):
    op(_n, [X(), Other()], dtypes=BOOL + INTS, method=True)
def _where_inputs(g, c):
    c.t.append(g.tensor(g.shape(), c.dtype))
    c.t.append(g.tensor(g.bshape(c.t[0].shape), "bool" if g.chance(0.95) else g.dtype()))


op("where", [T(1), T(0), Other(of=0)], dtypes=ALL, inputs=_where_inputs)
op("where", [X(pool=BOOL), Scalar(of=None), X()], dtypes=ALL)
op("Tensor.where", [X(), Mask(), Other()], dtypes=ALL)
op("masked_fill", [X(), Mask(), Scalar()], dtypes=ALL, method=True)
op("masked_fill", [X(), Mask(), X(nd=(0, 0))], dtypes=ALL, method=True)
op("Tensor.masked_fill_", [X(), Mask(), Scalar()], dtypes=ALL)
op("clamp", [X(), Scalar(), Scalar()], dtypes=NUMERIC, method=True, aliases=("clip",), nreq=1)
op("clamp", [X()], {"min": Scalar(), "max": Scalar()}, dtypes=NUMERIC, method=True, aliases=("clip",))
op("clamp", [X(), Y(), Y()], dtypes=NUMERIC, method=True, nreq=2)
op("Tensor.clip", [X(), Scalar(), Scalar()], dtypes=NUMERIC)
op("Tensor.clamp_", [X(), Scalar(), Scalar()], {"max": Scalar()}, dtypes=NUMERIC, nreq=1)
op("lerp", [X(), Y(same_dtype=True), Flt(-1, 2)], dtypes=FLOATS, method=True)
op("lerp", [X(), Y(same_dtype=True), Y()], dtypes=FLOATS, method=True)
for _n in ("addcmul", "addcdiv"):
    op(_n, [X(), Y(), Y()], {"value": Scalar()}, dtypes=NUMERIC if _n == "addcmul" else FLOATS, method=True)

# In-place methods.
for _n in ("add_", "sub_"):
    op("Tensor." + _n, [X(), Other()], {"alpha": Scalar()}, dtypes=NUMERIC)
for _n in ("mul_", "div_"):
    op("Tensor." + _n, [X(), Other()], dtypes=NUMERIC if _n == "mul_" else FLOATS)
for _n in ("neg_", "relu_", "zero_", "abs_"):
    op("Tensor." + _n, [X()], dtypes=NUMERIC if _n != "zero_" else ALL)
op("abs_", [X()], dtypes=NUMERIC)
op("Tensor.fill_", [X(), Scalar()], dtypes=ALL)
op("Tensor.copy_", [X(), Y()], {"non_blocking": Bool()}, dtypes=ALL)
op("Tensor.uniform_", [X(), Flt(-3, 0), Flt(0, 3)], dtypes=FLOATS, nreq=1)
op("Tensor.bernoulli_", [X(), Flt(-1, 2)], dtypes=ALL, nreq=1)
op("Tensor.polygamma", [X(), Int(-2, 4)], dtypes=ALL)
op("Tensor.normal_", [X(), Flt(-3, 3), Flt(0, 3)], dtypes=FLOATS, nreq=1)


def _index_put_inputs(g, c):
    x = g.tensor(g.shape(1, 4), c.dtype)
    c.t.append(x)
    if g.chance(0.3):  # a bool mask over the leading dims
        k = g.r.randint(1, x.ndim)
        idx = [g.tensor(x.shape[:k], "bool")]
        rest = x.shape[k:]
        lead = (g.r.randint(0, numel(x.shape[:k])),)
    else:
        k = g.r.randint(1, x.ndim)
        ishape = g.shape(0, 2, hi=4)
        idx = [g.tensor(ishape, "int64", ints=(-x.shape[d] if g.chance(0.1) else 0, max(x.shape[d], 1)))
               for d in range(k)]
        rest, lead = x.shape[k:], ishape
    c.v["indices"] = idx
    vshape = g.choice(((), tuple(lead) + tuple(rest), tuple(rest)))
    c.t.append(g.tensor(vshape, c.dtype if g.chance(0.9) else g.dtype()))


def _indices(g, c):
    texts = [g.targ(m) for m in c.v["indices"]]
    return size_arg(g, texts) if g.chance(0.9) else g.bad("tensors")


for _n in ("Tensor.index_put_", "Tensor.index_put"):
    op(_n, [T(0), _indices, T(1), Bool()], {}, dtypes=NUMERIC, nreq=3, inputs=_index_put_inputs)

op("broadcast_shapes", [Size(lambda g, c: list(g.shape(0, 3))), Size(lambda g, c: list(g.shape(0, 3))),
                        Lit("(3, 1)", "()", "2", "(0,)")], dtypes=("int64",), nreq=1)
op("result_type", [X(), Other()], dtypes=ALL)
op("promote_types", [DType(), DType()], dtypes=ALL)

# Casts and other conversions.
for _n in ("float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte", "bool", "cpu", "detach",
           "detach_"):
    op("Tensor." + _n, [X()], dtypes=ALL)
op("Tensor.to", [X(), DType()], {"copy": Bool(), "non_blocking": Bool()}, dtypes=ALL, nreq=2)
op("Tensor.to", [X()], {"dtype": DType(), "device": Lit("'cpu'", "mf.device('cpu')", "None")}, dtypes=ALL)
op("Tensor.to", [X(), Y()], dtypes=ALL)
op("Tensor.to", [X(), Str("cpu", "cuda", "cpu:0", "meta", "")], dtypes=ALL)
op("Tensor.type_as", [X(), Y()], dtypes=ALL)

# Creation.
_SIZES = lambda g, c: list(g.shape(0, 4))  # noqa: E731
_CREATE_KW = {"dtype": DType(), "requires_grad": Bool(), "device": Lit("'cpu'", "None")}
for _n in ("zeros", "ones", "empty"):
    op(_n, [SizeArgs(_SIZES)], _CREATE_KW, dtypes=ALL)
op("full", [Size(_SIZES), Scalar()], _CREATE_KW, dtypes=ALL)
for _n in ("zeros_like", "ones_like", "empty_like"):
    op(_n, [X()], {"dtype": DType(), "requires_grad": Bool()}, dtypes=ALL)
op("full_like", [X(), Scalar()], {"dtype": DType(), "requires_grad": Bool()}, dtypes=ALL)
for _n in ("rand_like", "randn_like"):
    op(_n, [X()], {"dtype": DType(FLOATS), "requires_grad": Bool()}, dtypes=FLOATS)
op("arange", [Int(-20, 100)], {"dtype": DType(NUMERIC)}, dtypes=("int64",))
op("arange", [Flt(-20, 20), Flt(-20, 40), Lit("1", "2", "-1", "0.25", "0.5", "3")], {"dtype": DType(NUMERIC)},
   dtypes=("float32",), nreq=2)
op("linspace", [Flt(-5, 5), Flt(-5, 5), Int(0, 50)], {"dtype": DType(FLOATS)}, dtypes=("float32",))
op("logspace", [Flt(-5, 5), Flt(-5, 5), Int(0, 50)], {"base": Flt(-3, 10), "dtype": DType(FLOATS)},
   dtypes=("float32",))
op("eye", [Int(0, 6), Int(0, 6)], {"dtype": DType()}, dtypes=ALL, nreq=1)
op("eye", [Int(0, 6)], {"m": Int(0, 6), "dtype": DType()}, dtypes=ALL)
op("scalar_tensor", [Scalar()], {"dtype": DType(), "requires_grad": Bool()}, dtypes=ALL)
for _n in ("rand", "randn"):
    op(_n, [SizeArgs(_SIZES)], {"dtype": DType(FLOATS), "requires_grad": Bool()}, dtypes=FLOATS)
op("randint", [Int(1, 20), Size(_SIZES)], {"dtype": DType(NUMERIC)}, dtypes=("int64",))
op("randint", [Int(-10, 0), Int(1, 20), Size(_SIZES)], {"dtype": DType(NUMERIC)}, dtypes=("int64",))
op("randperm", [Int(0, 100)], {"dtype": DType(("int64", "int32", "float32", "int16")),
                               "generator": Lit("mf.Generator().manual_seed(3)", "None")}, dtypes=("int64",))
op("bernoulli", [X(), Flt(0, 1)], dtypes=FLOATS, method=True, nreq=1)

# Reductions.
_RED = {"keepdim": Bool()}
op("sum", [X(), Dims(), Bool()], {"dtype": DType()}, dtypes=ALL, method=True, nreq=1)
op("mean", [X(), Dims(), Bool()], {"dtype": DType(FLOATS)}, dtypes=FLOATS, method=True, nreq=1)
op("prod", [X(), Dim(), Bool()], {"dtype": DType()}, dtypes=ALL, method=True, nreq=1)
for _n in ("amax", "amin"):
    op(_n, [X(), Dims(), Bool()], dtypes=ALL, method=True, nreq=1)
for _n in ("argmax", "argmin"):
    op(_n, [X(), Dim(), Bool()], dtypes=NUMERIC, method=True, nreq=1)
for _n in ("all", "any"):
    op(_n, [X(), Dim(), Bool()], dtypes=ALL, method=True, nreq=1)
for _n in ("max", "min"):
    op(_n, [X(), Dim(), Bool()], dtypes=ALL, method=True, nreq=1)
    op(_n, [X(), Y()], dtypes=ALL, method=True)
for _n in ("var", "std"):
    op(_n, [X(), Dims(), Bool(), Bool()], {"correction": Int(0, 3)}, dtypes=FLOATS, method=True, nreq=1)
    op(_n, [X(), Bool()], dtypes=FLOATS, method=True)
op("norm", [X(), Lit("2", "1", "'fro'", "float('inf')", "-float('inf')", "0", "3.5", "'nuc'", "-1"), Dims(), Bool()],
   {"dtype": DType(FLOATS)}, dtypes=FLOATS, method=True, nreq=1)
op("logsumexp", [X(), Dims(), Bool()], dtypes=FLOATS, method=True, nreq=2)
op("cumsum", [X(), Dim()], {"dtype": DType()}, dtypes=ALL, method=True)
op("cumprod", [X(), Dim()], {"dtype": DType()}, dtypes=ALL, method=True)
op("median", [X()], dtypes=ALL, method=True)
op("median", [X(), Dim()], {"keepdim": Bool()}, dtypes=ALL, method=True)
op("unique", [X()], {"return_inverse": Bool(), "return_counts": Bool(), "dim": Lit("None", "0")}, dtypes=ALL,
   method=True)
op("Tensor.sum_to_size", [X(), SizeArgs(sum_to)], dtypes=NUMERIC)

# Sorting.
op("sort", [X(), Dim(), Bool()], {"stable": Bool()}, dtypes=ALL, method=True, nreq=1)
op("argsort", [X(), Dim(), Bool()], dtypes=ALL, method=True, nreq=1)


def _k(g, c):
    x = c.t[0]
    size = x.shape[c.v["dim"]] if x.ndim else 1
    return g.arg("int", str(g.r.randint(0, size)))


op("topk", [T(0), _k, V("rawdim", "dim"), Bool(), Bool()], {"largest": Bool(), "sorted": Bool()}, dtypes=NUMERIC,
   method=True, nreq=2, inputs=x_and_dim())

# Views and shape ops.
op("view", [X(), Size(reshaped())], dtypes=ALL)
op("Tensor.view", [X(), SizeArgs(reshaped())], dtypes=ALL)
op("Tensor.view", [X(), DType()], dtypes=ALL)
op("reshape", [X(), Size(reshaped())], dtypes=ALL)
op("Tensor.reshape", [X(), SizeArgs(reshaped())], dtypes=ALL)
for _n in ("Tensor.view_as", "Tensor.reshape_as"):
    op(_n, [X(), Y(shape=lambda g, c: factor_shape(g.r, c.t[0].numel, infer=False))], dtypes=ALL)
op("permute", [X(), Size(perm)], dtypes=ALL)
op("Tensor.permute", [X(), SizeArgs(perm)], dtypes=ALL)
op("transpose", [X(), Dim(key="d0"), Dim(key="d1")], dtypes=ALL, method=True)
op("t", [X(nd=(0, 2))], dtypes=ALL, method=True)
op("Tensor.T", [X(nd=(0, 3))], dtypes=ALL)
op("Tensor.mT", [X(nd=(1, 4))], dtypes=ALL)


def _narrow_args(g, c):
    x = c.t[0]
    size = x.shape[c.v["dim"]] if x.ndim else 0
    start = g.r.randint(-size, size) if size else 0
    length = g.r.randint(0, size - (start % size if size else 0))
    return f"{g.arg('int', str(start))}, {g.arg('int', str(length))}"


op("narrow", [X(), Dim(), _narrow_args], dtypes=ALL, method=True)


def _select_index(g, c):
    x = c.t[0]
    size = x.shape[c.v["dim"]] if x.ndim else 1
    return g.arg("int", str(g.r.randint(-size, max(size - 1, 0))))


op("select", [X(), Dim(), _select_index], dtypes=ALL, method=True)
op("expand", [X(), Size(expanded)], dtypes=ALL)
op("Tensor.expand", [X(), SizeArgs(expanded)], dtypes=ALL)
op("broadcast_to", [X(), Size(expanded)], dtypes=ALL, method=True)
def _expanded_concrete(g, c):
    x, e = c.t[0], expanded(g, c)
    lead = len(e) - x.ndim
    return [x.shape[i - lead] if s == -1 else s for i, s in enumerate(e)]


op("expand_as", [X(), Y(shape=_expanded_concrete)], dtypes=ALL, method=True)
op("squeeze", [X(), Dim()], dtypes=ALL, method=True, nreq=1)
op("unsqueeze", [X(), Dim(extra=1)], dtypes=ALL, method=True)
op("flatten", [X(), Dim(key="s"), Dim(key="e")], dtypes=ALL, method=True, nreq=1)


def _unflatten_sizes(g, c):
    x = c.t[0]
    size = x.shape[c.v["dim"]] if x.ndim else 1
    return size_arg(g, factor_shape(g.r, size, max_nd=3))


op("unflatten", [X(), Dim(), _unflatten_sizes], dtypes=ALL, method=True)


def _as_strided(g, c):
    n = c.t[0].numel
    nd = g.r.randint(0, 3)
    size = [g.size(0, 4) for _ in range(nd)]
    stride = [g.r.randint(0, 3) for _ in range(nd)]
    span = sum((s - 1) * st for s, st in zip(size, stride) if s > 0)
    offset = g.r.randint(0, max(n - 1 - span, 0)) if n and span < n else 0
    if n == 0 or span >= n:
        size = [0] + size[1:] if size else [0]
    texts = [size_arg(g, size), size_arg(g, stride)]
    if g.chance(0.5):
        texts.append(g.arg("int", str(offset)))
    return ", ".join(texts)


op("as_strided", [X(nd=(1, 3)), _as_strided], dtypes=ALL, method=True)
op("diagonal", [X(nd=(2, 4)), Int(-3, 3), Dim(key="d1"), Dim(key="d2")], dtypes=ALL, method=True, nreq=1)


def _cat_inputs(g, c):
    shape = list(g.shape(1, 4, max_numel=2000))
    d = g.r.randrange(len(shape))
    c.v["dim"] = d - len(shape) if g.chance(0.3) else d
    for _ in range(g.r.randint(1, 4)):
        s = list(shape)
        s[d] = g.size(0, 4)
        c.t.append(g.tensor(s, c.dtype if g.chance(0.85) else g.dtype()))
    if g.chance(0.1):  # a legacy 1-d empty tensor (PyTorch skips those in cat)
        c.t.append(g.tensor((0,), c.dtype))


def _tensor_list(g, c):
    if g.hit():
        return g.bad("tensors")
    texts = [g.targ(m) for m in c.t]
    return _list(texts, tuple_=g.chance(0.3))


op("cat", [_tensor_list, V("dim", "dim")], dtypes=ALL, aliases=("concat",), nreq=1, inputs=_cat_inputs)


def _stack_inputs(g, c):
    shape = g.shape(0, 3, max_numel=2000)
    c.v["dim"] = g.dim(len(shape) + 1)
    for _ in range(g.r.randint(1, 4)):
        c.t.append(g.tensor(shape, c.dtype))


op("stack", [_tensor_list, V("dim", "dim")], dtypes=ALL, nreq=1, inputs=_stack_inputs)


def _split_arg(g, c):
    x = c.t[0]
    size = x.shape[c.v["dim"]] if x.ndim else 0
    if g.chance(0.5):
        return g.arg("int", str(g.r.randint(1, max(size, 1))))
    sections, left = [], size
    while left > 0:
        s = g.r.randint(0, left)
        sections.append(s)
        left -= s
    return size_arg(g, sections or [0])


op("split", [T(0), _split_arg, V("rawdim", "dim")], dtypes=ALL, method=True, nreq=2, inputs=x_and_dim(1))
op("chunk", [X(nd=(1, 4)), Int(1, 6), Dim()], dtypes=ALL, method=True, nreq=2)
op("unbind", [X(nd=(1, 4)), Dim()], dtypes=ALL, method=True, nreq=1)
op("index_select", [X(), Dim(), Index()], dtypes=ALL, method=True)


def _take_index(g, c):
    n = max(1, numel(c.t[0].shape))
    m = g.tensor((g.size(0, 6),) if g.chance(0.8) else (2, 2), "int64" if g.chance(0.9) else "int32",
                 ints=(-n if g.chance(0.2) else 0, n + (3 if g.adv else 0)))
    c.t.append(m)
    return g.targ(m)


op("take", [X(), _take_index], dtypes=ALL, method=True)


def _same_nd_index_shape(g, c):
    x = c.t[0]
    return tuple(g.r.randint(0, s) if i != c.v["dim"] else g.r.randint(0, 4) for i, s in enumerate(x.shape))


op("gather", [X(), Dim(), Index(shape=_same_nd_index_shape)], dtypes=ALL, method=True)


def _src_like_index(g, c):
    m = g.tensor(c.t[-1].shape, c.t[0].dtype)
    c.t.append(m)
    return g.targ(m)


op("scatter", [X(), Dim(), Index(shape=_same_nd_index_shape), _src_like_index], dtypes=ALL, method=True)
op("scatter", [X(), Dim(), Index(shape=_same_nd_index_shape), Scalar()], dtypes=ALL, method=True)
op("scatter_add", [X(), Dim(), Index(shape=_same_nd_index_shape), _src_like_index], dtypes=NUMERIC, method=True)
_REDUCE = Lit("'sum'", "'prod'", "'mean'", "'amax'", "'amin'", "'max'")
op("scatter_reduce", [X(), Dim(), Index(shape=_same_nd_index_shape), _src_like_index, _REDUCE],
   {"include_self": Bool()}, dtypes=ALL, method=True)
op("Tensor.scatter_reduce_", [X(), Dim(), Index(shape=_same_nd_index_shape), _src_like_index, _REDUCE],
   {"include_self": Bool()}, dtypes=ALL)


def _index_add_source(g, c):
    x, idx = c.t[0], c.t[-1]
    shape = list(x.shape)
    if shape:
        shape[c.v["dim"]] = idx.numel
    m = g.tensor(shape, x.dtype)
    c.t.append(m)
    return g.targ(m)


op("index_add", [X(), Dim(), Index(), _index_add_source], {"alpha": Scalar()}, dtypes=NUMERIC, method=True)
op("masked_select", [X(), Mask()], dtypes=ALL, method=True)
op("nonzero", [X()], {"as_tuple": Bool()}, dtypes=ALL, method=True)
op("Tensor.scatter_", [X(), Dim(), Index(shape=_same_nd_index_shape), _src_like_index], dtypes=ALL)
op("Tensor.scatter_", [X(), Dim(), Index(shape=_same_nd_index_shape), Scalar()], dtypes=ALL)
op("Tensor.scatter_add_", [X(), Dim(), Index(shape=_same_nd_index_shape), _src_like_index], dtypes=NUMERIC)
op("Tensor.index_add_", [X(), Dim(), Index(), _index_add_source], {"alpha": Scalar()}, dtypes=NUMERIC)
op("index_fill", [X(), Dim(), Index(), Scalar()], dtypes=ALL, method=True)
op("Tensor.index_fill_", [X(), Dim(), Index(), Scalar()], dtypes=ALL)
op("diag", [X(), Int(-3, 3)], dtypes=ALL, method=True)
op("argwhere", [X()], dtypes=ALL, method=True)
op("broadcast_tensors", [X(), Y()], dtypes=ALL)
op("einsum", [Lit("'ij,jk->ik'", "'ii'", "'...i,...i->...'", "'i,j'", "'ab->ba'", "'ij->k'", "'i.j'", "'a1'",
                  "'ij,jk,kl'", "''"), X(), Y()], dtypes=ALL)
for _n in ("tril", "triu"):
    op(_n, [X(nd=(2, 4)), Int(-4, 4)], dtypes=ALL, method=True, nreq=1)
op("repeat", [X(), Size(repeats)], dtypes=ALL)
op("Tensor.repeat", [X(), SizeArgs(repeats)], dtypes=ALL)
op("repeat_interleave", [X(), Int(0, 3), Dim()], dtypes=ALL, method=True, nreq=2)
op("flip", [X(), Size(dims_list)], dtypes=ALL)
op("Tensor.flip", [X(), SizeArgs(dims_list)], dtypes=ALL)


def _roll(g, c):
    nd = c.t[0].ndim
    if g.chance(0.4) or nd == 0:
        return g.arg("int", str(g.r.randint(-7, 7)))
    dims = g.r.sample(range(nd), g.r.randint(1, nd))
    shifts = [g.r.randint(-7, 7) for _ in dims]
    return f"{size_arg(g, shifts)}, {size_arg(g, dims)}"


op("roll", [X(), _roll], dtypes=ALL, method=True)


# Linear algebra: shapes that agree.
def _mm_inputs(kind):
    def inputs(g, c):
        m, k, n, b = g.size(0, 8), g.size(0, 8), g.size(0, 8), g.size(0, 3)
        if g.chance(0.05):
            m, k, n = g.r.choice(((64, 128, 64), (128, 64, 32), (1, 256, 1)))
        shapes = {"mm": [(m, k), (k, n)], "bmm": [(b, m, k), (b, k, n)], "mv": [(m, k), (k,)], "dot": [(k,), (k,)],
                  "outer": [(m,), (n,)], "addmm": [g.bshape((m, n)), (m, k), (k, n)],
                  "baddbmm": [g.bshape((b, m, n)), (b, m, k), (b, k, n)],
                  "matmul": g.choice([[(m, k), (k, n)], [(k,), (k,)], [(m, k), (k,)], [(k,), (b, k, n)],
                                      [(b, 1, m, k), (3, k, n)], [(b, m, k), (k, n)]])}[kind]
        for s in shapes:
            c.t.append(g.tensor(s, c.dtype))

    return inputs


for _n in ("matmul", "mm", "bmm", "mv", "dot", "outer"):
    op(_n, [T(0), T(1)], dtypes=FLOATS, method=True, inputs=_mm_inputs(_n))
for _n in ("addmm", "baddbmm"):
    op(_n, [T(0), T(1), T(2)], {"beta": Scalar(), "alpha": Scalar()}, dtypes=FLOATS, method=True,
       inputs=_mm_inputs(_n))


def _linear_inputs(g, c):
    i, o = g.size(0, 8), g.size(0, 8)
    c.t.append(g.tensor(g.shape(0, 2, hi=4) + (i,), c.dtype))
    c.t.append(g.tensor((o, i) if g.chance(0.9) else (i,), c.dtype))
    c.t.append(g.tensor((o,) if g.chance(0.9) else (), c.dtype))


op("nn.functional.linear", [T(0), T(1), OptT(2)], dtypes=FLOATS, nreq=2, inputs=_linear_inputs)


# torch.linalg: batches of matrices, square or not, some symmetric
# positive-definite (cholesky, eigh); singular ones raise LinAlgError.
def _matrices(square=True, rhs=False, spd=0.0):
    def inputs(g, c):
        lead = g.shape(0, 2, hi=3)
        m = g.size(0, 6)
        n = m if square and not (g.adv and g.chance(0.1)) else g.size(0, 6)
        a = g.tensor(lead + (m, n), c.dtype)
        c.t.append(a)
        if m == n and g.chance(spd):  # A A^T + n I
            g.emit(f"{a.var} = {a.var} @ {a.var}.transpose(-2, -1) + {n} * mf.eye({n}, dtype={a.var}.dtype)")
        if rhs:
            k = g.size(0, 4)
            b = g.choice([(m, k), (n,), lead + (m,), lead + (m, k), g.bshape(lead) + (m, k), (k, n)])
            c.t.append(g.tensor(b, c.dtype if g.chance(0.9) else g.dtype()))

    return inputs


_LAPACK = ("float32", "float64")  # the decompositions' dtypes (adversarial calls still try others)
_ORDS = ("2", "1", "0", "-1", "3.5", "0.5", "float('inf')", "-float('inf')", "float('nan')", "'fro'", "'nuc'")
op("linalg.vector_norm", [X(), Lit(*_ORDS[:9]), Dims(), Bool()], {"dtype": DType(FLOATS)}, dtypes=ALL, nreq=1)
op("linalg.matrix_norm", [X(nd=(1, 4)), Lit(*_ORDS, "-2", "'abc'"), Lit("(-2, -1)", "(0, 1)", "(1, 0)", "(0,)",
                                                                         "(0, 0)", "(-1, 0)", "(0, 5)"), Bool()],
   {"dtype": DType(FLOATS)}, dtypes=FLOATS, nreq=1)
op("linalg.norm", [X(), Lit("None", *_ORDS), Lit("None", "0", "(0, 1)", "(-1,)", "(0, 1, 2)", "()"), Bool()],
   {"dtype": DType(FLOATS)}, dtypes=FLOATS, nreq=1)
for _n in ("det", "slogdet"):
    op("linalg." + _n, [T(0)], dtypes=_LAPACK, method=True, aliases=(_n,), inputs=_matrices())
op("logdet", [T(0)], dtypes=_LAPACK, method=True, inputs=_matrices(spd=0.5))
op("linalg.inv", [T(0)], dtypes=_LAPACK, aliases=("inverse",), inputs=_matrices())
op("Tensor.inverse", [T(0)], dtypes=_LAPACK, inputs=_matrices())
op("linalg.solve", [T(0), T(1)], {"left": Bool()}, dtypes=_LAPACK, inputs=_matrices(rhs=True))
op("linalg.cholesky", [T(0)], {"upper": Bool()}, dtypes=_LAPACK, method=True, aliases=("cholesky",),
   inputs=_matrices(spd=0.7))
op("linalg.qr", [T(0), Str("reduced", "complete", "r")], dtypes=_LAPACK, inputs=_matrices(square=False))
op("linalg.svd", [T(0), Bool()], {"driver": Lit("None", "None", "None", "'gesvd'")}, dtypes=_LAPACK, nreq=1,
   inputs=_matrices(square=False))
op("linalg.svdvals", [T(0)], dtypes=_LAPACK, inputs=_matrices(square=False))
for _n in ("eigh", "eigvalsh"):
    op("linalg." + _n, [T(0), Str("L", "U", "u", "X")], dtypes=_LAPACK, nreq=1, inputs=_matrices(spd=0.5))

# nn.functional: activations.
op("nn.functional.relu", [X(), Bool()], dtypes=NUMERIC, nreq=1)
op("nn.functional.relu_", [X()], dtypes=NUMERIC)
op("nn.functional.gelu", [X(), Str("none", "tanh")], dtypes=FLOATS, nreq=1)
op("nn.functional.silu", [X(), Bool()], dtypes=FLOATS, nreq=1)
op("nn.functional.leaky_relu", [X(), Flt(-1, 1), Bool()], dtypes=FLOATS, nreq=1)
op("nn.functional.elu", [X(), Flt(0, 2), Bool()], dtypes=FLOATS, nreq=1)
op("nn.functional.softplus", [X(), Flt(0.1, 3), Flt(-5, 25)], dtypes=FLOATS, nreq=1)
op("nn.functional.mish", [X()], {"inplace": Bool()}, dtypes=FLOATS)
op("nn.functional.conv1d", [X(), Y()], {"stride": Int(0, 3), "padding": Lit("0", "1", "'same'", "'valid'", "(1,)", "(1, 1)"),
                                        "dilation": Int(0, 2), "groups": Int(0, 3)}, dtypes=FLOATS)
for _n in ("max_pool1d", "avg_pool1d"):
    op("nn.functional." + _n, [X(), Int(-1, 4)], {"stride": Lit("None", "1", "2", "0"), "padding": Int(-1, 2),
                                                   "ceil_mode": Bool()}, dtypes=FLOATS)
op("nn.functional.adaptive_avg_pool1d", [X(), Int(-1, 5)], dtypes=FLOATS)
op("nn.functional.pixel_shuffle", [X(), Int(-1, 3)], dtypes=ALL)
op("nn.functional.pixel_unshuffle", [X(), Int(-1, 3)], dtypes=ALL)
op("conv1d", [X(), Y()], {"stride": Int(0, 3), "padding": Lit("0", "'same'", "(1,)")}, dtypes=FLOATS)
for _n in ("max_pool1d", "avg_pool1d", "adaptive_avg_pool1d"):
    op(_n, [X(), Int(-1, 4)], dtypes=FLOATS)
for _n in ("pixel_shuffle", "pixel_unshuffle"):
    op(_n, [X(), Int(-1, 3)], dtypes=ALL)
op("nn.functional.hardtanh", [X(), Flt(-3, 0), Flt(-1, 3), Bool()], dtypes=NUMERIC, nreq=1)
op("nn.functional.relu6", [X(), Bool()], dtypes=NUMERIC, nreq=1)
op("nn.functional.normalize", [X()], {"p": Flt(-1, 3), "dim": Dim(), "eps": Flt(-1, 1)}, dtypes=FLOATS)
op("nn.functional.glu", [X()], {"dim": Dim()}, dtypes=FLOATS)
op("nn.functional.sigmoid", [X()], dtypes=FLOATS)
op("nn.functional.tanh", [X()], dtypes=FLOATS)
for _n in ("softmax", "log_softmax"):
    op("nn.functional." + _n, [X(), Dim()], {"dtype": DType(FLOATS)}, dtypes=FLOATS, aliases=(_n,), nreq=1)
    op("Tensor." + _n, [X(), Dim()], {"dtype": DType(FLOATS)}, dtypes=FLOATS)


# nn.functional: normalisation.
def _layer_norm_inputs(g, c):
    x = g.tensor(g.shape(1, 4), c.dtype)
    c.t.append(x)
    k = g.r.randint(1, x.ndim)
    ns = x.shape[x.ndim - k:]
    c.v["ns"] = ns
    c.t.append(g.tensor(ns, c.dtype))
    c.t.append(g.tensor(ns, c.dtype))


op("nn.functional.layer_norm", [T(0), lambda g, c: size_arg(g, list(c.v["ns"])), OptT(1), OptT(2), Flt(1e-6, 1e-2)],
   dtypes=FLOATS, aliases=("layer_norm",), nreq=2, inputs=_layer_norm_inputs)


def _group_norm_inputs(g, c):
    groups = g.r.randint(1, 3)
    ch = groups * g.r.randint(1, 3)
    x = g.tensor((g.size(1, 3), ch) + g.shape(0, 2, hi=4), c.dtype)
    c.t.append(x)
    c.v["groups"] = groups
    c.t.append(g.tensor((ch,), c.dtype))
    c.t.append(g.tensor((ch,), c.dtype))


op("nn.functional.group_norm", [T(0), V("groups"), OptT(1), OptT(2), Flt(1e-6, 1e-2)], dtypes=FLOATS,
   aliases=("group_norm",), nreq=2, inputs=_group_norm_inputs)


def _batch_norm_inputs(g, c):
    ch = g.r.randint(1, 4)
    x = g.tensor((g.size(1, 4), ch) + g.shape(0, 2, hi=4), c.dtype)
    c.t.append(x)
    for _ in range(4):  # running mean, running var, weight, bias
        c.t.append(g.tensor((ch,), c.dtype, grad=False))


op("nn.functional.batch_norm", [T(0), OptT(1), OptT(2), OptT(3), OptT(4), Bool(), Flt(0, 1), Flt(1e-6, 1e-2)],
   dtypes=FLOATS, nreq=3, inputs=_batch_norm_inputs)


def _embedding_inputs(g, c):
    n, d = g.size(1, 10), g.size(0, 5)
    c.t.append(g.tensor(g.shape(0, 2), "int64", ints=(0, n)))
    c.t.append(g.tensor((n, d), c.dtype))
    c.v["pad"] = g.r.randint(-n, n - 1)


op("nn.functional.embedding", [T(0), T(1), V("pad")], {"max_norm": Lit("None", "1.0"), "sparse": Bool(),
                                                        "scale_grad_by_freq": Bool()},
   dtypes=FLOATS, nreq=2, inputs=_embedding_inputs)


def _embedding_bag_inputs(g, c):
    n, d, bags = g.size(1, 10), g.size(0, 5), g.size(0, 4)
    length = g.size(0, 8)
    c.t.append(g.tensor((length,) if g.chance(0.7) else (bags, g.size(0, 3)), "int64", ints=(0, n)))
    c.t.append(g.tensor((n, d), c.dtype))
    starts = sorted(g.r.randint(0, length) for _ in range(bags))
    c.v["offsets"] = f"mf.tensor({[0] + starts[1:] if starts else []}, dtype=mf.int64)" if g.chance(0.8) else "None"
    c.v["pad"] = g.r.randint(-n, n - 1)


def _bilinear_inputs(g, c):
    batch, i, j, o = g.shape(0, 2, hi=3), g.size(0, 4), g.size(0, 4), g.size(0, 3)
    c.t.append(g.tensor(batch + (i,), c.dtype))
    c.t.append(g.tensor(batch + (j,), c.dtype))
    c.t.append(g.tensor((o, i, j), c.dtype))
    c.t.append(g.tensor((o,), c.dtype))


for _n in ("hardsigmoid", "hardswish", "selu"):
    op("nn.functional." + _n, [X()], {"inplace": Bool()}, dtypes=ALL)
op("nn.functional.celu", [X()], {"alpha": Flt(-1, 2), "inplace": Bool()}, dtypes=ALL)
op("nn.functional.threshold", [X(), Flt(-1, 1), Flt(-2, 2)], {"inplace": Bool()}, dtypes=ALL)
for _n in ("softsign", "tanhshrink", "logsigmoid"):
    op("nn.functional." + _n, [X()], dtypes=ALL)
for _n in ("softshrink", "hardshrink"):
    op("nn.functional." + _n, [X(), Flt(-0.5, 2)], dtypes=ALL)
op("nn.functional.softmin", [X()], {"dim": Dim(), "dtype": DType()}, dtypes=ALL)

op("nn.functional.bilinear", [T(0), T(1), T(2), OptT(3)], dtypes=FLOATS, nreq=3, inputs=_bilinear_inputs)

op("nn.functional.embedding_bag", [T(0), T(1), V("offsets")],
   {"mode": Lit("'mean'", "'sum'", "'max'", "'min'"), "include_last_offset": Bool(), "padding_idx": V("pad"),
    "max_norm": Lit("None", "1.0")}, dtypes=FLOATS, nreq=2, inputs=_embedding_bag_inputs)
op("nn.functional.dropout", [X(), Flt(0, 1), Bool(), Bool()], dtypes=FLOATS, nreq=1)
for _n in ("dropout1d", "dropout2d", "dropout3d"):
    op("nn.functional." + _n, [X(), Flt(-0.5, 1.5), Bool(), Bool()], dtypes=FLOATS, nreq=1)
op("nn.functional.prelu", [X(), Y()], dtypes=ALL)
op("nn.functional.instance_norm", [X()], {"use_input_stats": Bool(), "momentum": Flt(0, 1), "eps": Flt(-1e-3, 1e-2)},
   dtypes=FLOATS)
op("nn.functional.dropout", [X()], {"p": Lit("0.0", "1.0", "0.5"), "training": Bool(), "inplace": Bool()},
   dtypes=FLOATS)


# nn.functional: losses.
def _class_inputs(g, c, probs=False):
    classes = g.size(1, 6)
    batch = g.size(0, 5)
    extra = g.shape(0, 2, hi=3) if g.chance(0.3) else ()
    shape = (batch, classes) + extra if g.chance(0.9) else (classes,)
    c.t.append(g.tensor(shape, c.dtype))
    tshape = (shape[0],) + extra if len(shape) > 1 else ()
    if probs and g.chance(0.3):
        c.t.append(g.tensor(shape, c.dtype))
    else:
        c.t.append(g.tensor(tshape, "int64", ints=(-100 if g.chance(0.1) else 0, classes)))
    c.t.append(g.tensor((classes,), c.dtype, grad=False))


_REDUCTION = Str("mean", "sum", "none")
op("nn.functional.cross_entropy", [T(0), T(1), OptT(2)],
   {"ignore_index": Int(-100, 3), "reduction": _REDUCTION, "label_smoothing": Flt(0, 1),
    "size_average": Lit("None", "True"), "reduce": Lit("None", "False")},
   dtypes=FLOATS, nreq=2, inputs=lambda g, c: _class_inputs(g, c, probs=True))
op("nn.functional.nll_loss", [T(0), T(1), OptT(2)], {"ignore_index": Int(-100, 3), "reduction": _REDUCTION},
   dtypes=FLOATS, nreq=2, inputs=_class_inputs)
op("nn.functional.mse_loss", [X(), Y()], {"reduction": _REDUCTION}, dtypes=FLOATS)
op("nn.functional.l1_loss", [X(), Y()], {"reduction": _REDUCTION}, dtypes=FLOATS)
op("nn.functional.smooth_l1_loss", [X(), Y()], {"reduction": _REDUCTION, "beta": Flt(-1, 3)}, dtypes=FLOATS)
op("nn.functional.huber_loss", [X(), Y()], {"reduction": _REDUCTION, "delta": Flt(-1, 3)}, dtypes=FLOATS)
op("nn.functional.cosine_similarity", [X(), Y()], {"dim": Dim(), "eps": Flt(-1, 1)}, dtypes=FLOATS)
op("nn.functional.binary_cross_entropy", [X(), Y()], {"reduction": _REDUCTION}, dtypes=FLOATS)
op("nn.functional.kl_div", [X(), Y()], {"reduction": Str("mean", "sum", "none", "batchmean", "avg"),
                                        "log_target": Lit("True", "False")}, dtypes=FLOATS)


def _bce_inputs(g, c):
    x = g.tensor(g.shape(0, 3), c.dtype)
    c.t.append(x)
    c.t.append(g.tensor(x.shape, c.dtype))
    c.t.append(g.tensor(g.bshape(x.shape), c.dtype, grad=False))
    c.t.append(g.tensor(x.shape[-1:], c.dtype, grad=False))


op("nn.functional.binary_cross_entropy_with_logits", [T(0), T(1), OptT(2)],
   {"reduction": _REDUCTION, "pos_weight": OptT(3)}, dtypes=FLOATS, nreq=2, inputs=_bce_inputs)


def _attention_inputs(g, c):
    lead = g.shape(0, 2, hi=3)
    lq, lk, e, ev = g.size(0, 5), g.size(0, 5), g.size(1, 6), g.size(0, 6)
    for s in ((lq, e), (lk, e), (lk, ev)):
        c.t.append(g.tensor(lead + s, c.dtype))
    c.t.append(g.tensor(g.bshape((lq, lk)), g.choice(("bool", c.dtype))))


op("nn.functional.scaled_dot_product_attention", [T(0), T(1), T(2), OptT(3), Flt(0, 1), Bool()],
   {"scale": Lit("None", "0.5", "0.0", "-1.0", "float('nan')")}, dtypes=FLOATS, nreq=3, inputs=_attention_inputs)


# nn.functional: convolution, pooling, padding.
def _conv_inputs(g, c):
    groups = g.choice((1, 1, 1, 2, 3))
    cin, cout = groups * g.size(1, 3), groups * g.size(1, 3)
    kh, kw = g.r.randint(1, 3), g.r.randint(1, 3)
    shape = (cin, kh + g.r.randint(0, 6), kw + g.r.randint(0, 6))
    if g.chance(0.85):
        shape = (g.size(0, 3),) + shape
    c.t.append(g.tensor(shape, c.dtype))
    c.t.append(g.tensor((cout, cin // groups, kh, kw), c.dtype))
    c.t.append(g.tensor((cout,), c.dtype))
    c.v["groups"] = groups


def _padding(g, c):
    if g.chance(0.2):
        return g.arg("str", repr(g.choice(("same", "valid"))))
    return Pair(0, 2)(g, c)


op("nn.functional.conv2d", [T(0), T(1), OptT(2), Pair(1, 3), _padding, Pair(1, 2), V("groups")], dtypes=FLOATS,
   aliases=("conv2d",), nreq=2, inputs=_conv_inputs)


def _conv3d_inputs(g, c):
    groups = g.choice((1, 1, 2))
    cin, cout = groups * g.size(1, 2), groups * g.size(1, 2)
    kernel = [g.r.randint(1, 2) for _ in range(3)]
    shape = (cin,) + tuple(k + g.r.randint(0, 3) for k in kernel)
    if g.chance(0.85):
        shape = (g.size(0, 2),) + shape
    c.t.append(g.tensor(shape, c.dtype))
    c.t.append(g.tensor((cout, cin // groups) + tuple(kernel), c.dtype))
    c.t.append(g.tensor((cout,), c.dtype))
    c.v["groups"] = groups


def _conv_transpose_inputs(dims):
    def inputs(g, c):
        groups = g.choice((1, 1, 2, 3))
        cin, cout = groups * g.size(1, 2), groups * g.size(1, 2)
        shape = (cin,) + tuple(g.r.randint(1, 4) for _ in range(dims))
        if g.chance(0.85):
            shape = (g.size(0, 2),) + shape
        c.t.append(g.tensor(shape, c.dtype))
        c.t.append(g.tensor((cin, cout // groups) + tuple(g.r.randint(1, 3) for _ in range(dims)), c.dtype))
        c.t.append(g.tensor((cout,), c.dtype))
        c.v["groups"] = groups

    return inputs


op("nn.functional.conv3d", [T(0), T(1), OptT(2), Sizes(1, 2, 3), _padding, Sizes(1, 2, 3), V("groups")],
   dtypes=FLOATS, aliases=("conv3d",), nreq=2, inputs=_conv3d_inputs)
for _dims in (1, 2, 3):
    op(f"nn.functional.conv_transpose{_dims}d", [T(0), T(1), OptT(2), Sizes(1, 3, _dims), Sizes(0, 2, _dims),
                                                  Sizes(0, 2, _dims), V("groups"), Sizes(1, 2, _dims)],
       dtypes=FLOATS, aliases=(f"conv_transpose{_dims}d",), nreq=2, inputs=_conv_transpose_inputs(_dims))


def _adaptive_size(g, c):
    if g.chance(0.3):
        return g.choice(("(None, 2)", "(2, None)", "[None, None]", "(3,)"))
    return Pair(0, 5)(g, c)


def _pool_input(g, c):
    shape = (g.size(1, 3), g.r.randint(1, 9), g.r.randint(1, 9))
    if g.chance(0.85):
        shape = (g.size(0, 3),) + shape
    c.t.append(g.tensor(shape, c.dtype))


_POOL = [T(0), Pair(1, 3), Pair(1, 3), Pair(0, 1)]
op("nn.functional.max_pool2d", _POOL + [Pair(1, 2), Bool(), Bool()], {"ceil_mode": Bool(), "return_indices": Bool()},
   dtypes=FLOATS, aliases=("max_pool2d",), nreq=2, inputs=_pool_input)
op("nn.functional.max_pool2d_with_indices", _POOL + [Pair(1, 2), Bool()], dtypes=FLOATS, nreq=2, inputs=_pool_input)
op("nn.functional.avg_pool2d", _POOL + [Bool(), Bool()], {"divisor_override": Lit("None", "2", "0")}, dtypes=FLOATS,
   nreq=2, inputs=_pool_input)
op("nn.functional.adaptive_avg_pool2d", [T(0), Pair(1, 5)], dtypes=FLOATS, inputs=_pool_input)
op("nn.functional.adaptive_avg_pool2d", [T(0), Lit("(None, 2)", "(2, None)", "[1, 1]")], dtypes=FLOATS,
   inputs=_pool_input)

for _n in ("adaptive_max_pool2d", "adaptive_max_pool2d_with_indices"):
    op("nn.functional." + _n, [T(0), _adaptive_size, Bool()], dtypes=FLOATS, nreq=2, inputs=_pool_input)
for _n in ("adaptive_max_pool1d", "adaptive_max_pool1d_with_indices"):
    op("nn.functional." + _n, [X(), Int(-1, 5), Bool()], dtypes=FLOATS, nreq=2)
op("adaptive_max_pool1d", [X(), Int(-1, 5)], dtypes=FLOATS)


def _pool3d_input(g, c):
    shape = (g.size(1, 3),) + tuple(g.r.randint(1, 6) for _ in range(3))
    if g.chance(0.85):
        shape = (g.size(0, 2),) + shape
    c.t.append(g.tensor(shape, c.dtype))


_POOL3D = [T(0), Sizes(1, 3, 3), Sizes(1, 3, 3), Sizes(0, 1, 3)]
op("nn.functional.max_pool3d", _POOL3D + [Sizes(1, 2, 3), Bool(), Bool()],
   {"ceil_mode": Bool(), "return_indices": Bool()}, dtypes=FLOATS, nreq=2, inputs=_pool3d_input)
op("max_pool3d", _POOL3D + [Sizes(1, 2, 3), Bool()], dtypes=FLOATS, nreq=2, inputs=_pool3d_input)
op("nn.functional.max_pool3d_with_indices", _POOL3D + [Sizes(1, 2, 3), Bool()], dtypes=FLOATS, nreq=2,
   inputs=_pool3d_input)
op("nn.functional.avg_pool3d", _POOL3D + [Bool(), Bool()], {"divisor_override": Lit("None", "2")}, dtypes=FLOATS,
   nreq=2, inputs=_pool3d_input)
op("nn.functional.adaptive_avg_pool3d", [T(0), Sizes(0, 5, 3)], dtypes=FLOATS, inputs=_pool3d_input)
op("nn.functional.adaptive_avg_pool3d", [T(0), Lit("(None, 2, 1)", "(2, None, None)", "(1, 2)")], dtypes=FLOATS,
   inputs=_pool3d_input)


def _pad_list(g, c):
    nd = c.t[0].ndim
    k = g.r.randint(0, max(nd, 1))
    pads = [g.r.randint(-1, 3) for _ in range(2 * k)]
    return size_arg(g, pads)


op("nn.functional.pad", [X(nd=(1, 4)), _pad_list, Str("constant", "reflect", "replicate", "circular"),
                         Flt(-2, 2)], dtypes=ALL, nreq=2)
op("nn.functional.one_hot", [X(pool=("int64",), ints=(0, 5)), Int(-1, 8)], dtypes=("int64",), nreq=1)


def _resample_input(g, c):
    """(N, C, spatial...) with 1-3 spatial dims, now and then another rank."""
    nd = g.choice((3, 3, 4, 4, 5, 2, 6)) if g.chance(0.95) else g.r.randint(0, 2)
    shape = [g.size(0, 3), g.size(1, 3)] + [g.r.randint(1, 6) for _ in range(nd - 2)]
    c.t.append(g.tensor(tuple(shape[:nd]), c.dtype))


def _resample_size(g, c):
    """An int or one size per spatial dim, or None (then scale_factor is drawn)."""
    c.v["sized"] = g.chance(0.5)
    if not c.v["sized"]:
        return "None"
    if g.chance(0.4):
        return g.arg("int", str(g.r.randint(0, 9)))
    return size_arg(g, [g.r.randint(1, 9) for _ in range(max(c.t[0].ndim - 2, 1))])


def _resample_scale(g, c):
    if c.v.get("sized", False) and not g.chance(0.05):
        return "None"
    if g.chance(0.6):
        return g.arg("float", g.choice(("2", "0.5", "1.5", "1.7", "0.3", "3.0", "1.05", "2.1")))
    return g.arg("size", "(" + ", ".join(g.flt(0.2, 3.0) for _ in range(max(c.t[0].ndim - 2, 1))) + ",)")


_RESAMPLE_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")
op("nn.functional.interpolate", [T(0), _resample_size, _resample_scale, Str(*_RESAMPLE_MODES),
                                 Lit("None", "True", "False"), Lit("None", "True", "False"),
                                 Lit("False", "False", "True")], dtypes=FLOATS, nreq=3, inputs=_resample_input)
op("nn.functional.upsample", [T(0), _resample_size, _resample_scale, Str(*_RESAMPLE_MODES),
                              Lit("None", "True", "False")], dtypes=FLOATS, nreq=3, inputs=_resample_input)
for _n in ("upsample_nearest", "upsample_bilinear"):
    op("nn.functional." + _n, [T(0), _resample_size, _resample_scale], dtypes=FLOATS, inputs=_resample_input)


def by_name():
    table = {}
    for spec in OPS:
        for name in spec.covered():
            table.setdefault(name, []).append(spec)
    return table
