"""Value, shape, dtype and tensor generators for the public-API fuzzer.

Everything here produces Python *source text*, never values: a generated call
is a few statements that build its inputs from scratch, so the text of one
call (plus fuzz.PRELUDE) is a standalone reproducer. Gen also decides which
arguments of an adversarial call get a bad value (huge, negative, NaN, wrong
type) while the rest stay valid, so that the bad value is what the callee
has to refuse rather than an unrelated early shape check.
"""
import math

BOOL = ("bool",)
INTS = ("uint8", "int8", "int16", "int32", "int64")
FLOATS = ("float16", "bfloat16", "float32", "float64")
NUMERIC = INTS + FLOATS
ALL = BOOL + NUMERIC

# Keep valid tensors small: calls must be fast (the target is hundreds of calls
# per second) and must never come near the child's address-space limit.
MAX_NUMEL = 10_000

INT_RANGE = {"bool": (0, 2), "uint8": (0, 10), "int8": (-5, 6), "int16": (-5, 6), "int32": (-5, 6), "int64": (-5, 6)}
INT_EXTREMES = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-2**15, 2**15 - 1), "int32": (-2**31, 2**31 - 1),
                "int64": (-2**63, 2**63 - 1)}
FLOAT_SPECIALS = ("float('nan')", "float('inf')", "-float('inf')", "-0.0", "0.0", "1e30", "-1e-30", "65504.0",
                  "3.0e38", "1e-8", "2.5", "-1.0")

# The sizes the issue names, and their neighbours: overflow of numel * itemsize,
# of int32 index math and of int64 itself, plus sign errors.
HUGE_INTS = ("2**31", "2**31-1", "2**62", "2**63-1", "-1", "-2**63", "0", "2**32", "-2**31", "2**63", "2**64", "-2",
             "2**62+1000", "2**40")
BAD_GENERIC = ("None", "'abc'", "1.5", "[[1, 2], [3]]", "[[[]]]", "mf.ones(2)", "mf.tensor(3)", "object()", "1j",
               "b'x'", "{}", "float('nan')", "True", "()", "[None]", "mf.float32", "[1, 'a']", "...")
BAD_INT = HUGE_INTS + ("mf.tensor(2)", "mf.tensor([2])", "2.0", "2.5", "True", "float('inf')", "'2'", "None")
BAD_SIZE = ("[2**31]", "[2**31-1, 2]", "[2**62]", "[2**63-1]", "[-1]", "[-2**63]", "[0, 2**63-1]", "[2**32, 2**31]",
            "[-2, 3]", "[2**31, 2**31, 2**31]", "[[2, 3]]", "[2, [3]]", "[2.5, 3]", "'23'", "[]", "[1] * 65",
            "[0] * 100", "mf.tensor([2, 3])", "(mf.tensor(2), 3)", "[None]", "[2**21, 2**21, 2**21]",
            "[3, 2**62]", "[2**63]", "[-1, -1]", "(2**31-1, 2**31-1)", "[1, 0, -1]", "2**62", "-1", "None")
BAD_FLOAT = ("float('nan')", "float('inf')", "-float('inf')", "-1.0", "1e308", "-1e308", "0.0", "2**63", "1e-320",
             "'0.5'", "mf.tensor(0.5)", "None", "-0.0", "2**64", "10.0", "[0.5]")
BAD_BOOL = ("None", "'yes'", "2", "0.5", "mf.tensor(True)", "[]", "mf.tensor([True, False])", "-1")
BAD_DTYPE = ("'float32'", "5", "float", "int", "bool", "mf.Tensor", "None", "mf.ones(2)", "'meshflow.int64'")
BAD_STR = ("'bogus'", "''", "None", "1", "'x' * 1000", "'same'", "'valid'", "'\\x00'", "b'mean'", "['mean']",
           "'MEAN'", "'none '")
BAD_SCALAR = ("float('nan')", "float('inf')", "-float('inf')", "2**63-1", "2**63", "-2**63", "2**64", "1e308", "True",
              "1j", "None", "'2'", "mf.ones(2)", "[1, 2]", "-2**63-1", "1e-320", "mf.tensor(2**62)")
BAD_TENSORS = ("[]", "[None]", "[mf.ones(2), 3]", "(mf.ones(2), [mf.ones(2)])", "mf.ones(2, 3)",
               "[mf.ones(2, dtype=mf.int8), mf.ones(3, 3)]", "None", "[[mf.ones(2)]]", "[mf.ones(())] * 1000",
               "[mf.zeros(()).expand(2**31)]", "iter([mf.ones(2)])", "{}", "'ab'")

BAD_BY_KIND = {"int": BAD_INT, "dim": BAD_INT, "size": BAD_SIZE, "float": BAD_FLOAT, "bool": BAD_BOOL,
               "dtype": BAD_DTYPE, "str": BAD_STR, "scalar": BAD_SCALAR, "tensors": BAD_TENSORS}


def dt(name):
    return "mf." + name


class TMeta:
    """What the generator knows about a tensor it emitted: its variable, shape and dtype."""

    __slots__ = ("var", "shape", "dtype", "grad")

    def __init__(self, var, shape, dtype, grad=False):
        self.var, self.shape, self.dtype, self.grad = var, tuple(shape), dtype, grad

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def numel(self):
        return math.prod(self.shape)


def numel(shape):
    return math.prod(shape)


def shape_text(shape):
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


class Gen:
    """Per-call generation state. rng is the call's own random.Random; adv says
    whether this is an adversarial call. Each argument that goes through arg()
    counts as one position; position `force` and a few others at random get a
    bad value, so an adversarial call nearly always has at least one."""

    def __init__(self, rng, adv):
        self.r = rng
        self.adv = adv
        self.force = rng.randrange(4)
        self.pos = 0
        self.lines = []
        self.nvar = 0
        self.grad = False  # some input requires grad: the call may run backward
        self.protect = False
        self.global_hook = None  # families.globalize while a call's inputs are made global

    # --- bookkeeping ---------------------------------------------------------------
    def var(self, prefix="a"):
        self.nvar += 1
        return f"{prefix}{self.nvar - 1}"

    def emit(self, line):
        self.lines.append(line)

    def chance(self, p):
        return self.r.random() < p

    def choice(self, seq):
        return seq[self.r.randrange(len(seq))]

    def hit(self):
        """Whether the next argument position gets a bad value."""
        pos, self.pos = self.pos, self.pos + 1
        if not self.adv or self.protect:
            return False
        return pos == self.force or self.r.random() < 0.12

    def arg(self, kind, valid):
        """valid (text), or in an adversarial position a bad value of that kind."""
        return self.bad(kind) if self.hit() else valid

    def bad(self, kind):
        if kind in BAD_BY_KIND and self.r.random() < 0.7:
            return self.choice(BAD_BY_KIND[kind])
        if kind == "tensor":
            return self.bad_tensor()
        return self.choice(BAD_GENERIC + HUGE_INTS[:6])

    # --- plain values ---------------------------------------------------------------
    def dtype(self, pool=ALL):
        return self.choice(pool)

    def size(self, lo=0, hi=5):
        """One dimension's size: mostly small, sometimes 0 or 1."""
        u = self.r.random()
        if u < 0.05 and lo <= 0:
            return 0
        if u < 0.25:
            return max(lo, 1)
        if u < 0.92:
            return self.r.randint(max(lo, 2), max(lo, 2, hi))
        return self.r.randint(max(lo, 6), max(lo, 6, hi * 3))

    def shape(self, min_nd=0, max_nd=4, lo=0, hi=5, max_numel=MAX_NUMEL):
        u = self.r.random()
        nd = 0 if u < 0.1 else 1 if u < 0.35 else 2 if u < 0.65 else 3 if u < 0.85 else 4 if u < 0.95 else 5
        nd = min(max(nd, min_nd), max_nd)
        shape = [self.size(lo, hi) for _ in range(nd)]
        if nd and self.chance(0.05):  # large-ish: one long dim
            shape[self.r.randrange(nd)] = self.r.randint(32, 512)
        while numel(shape) > max_numel:
            i = max(range(nd), key=lambda k: shape[k])
            shape[i] = max(shape[i] // 2, lo, 1)
        return tuple(shape)

    def bshape(self, shape):
        """A shape that broadcasts with shape (most of the time the same one)."""
        u = self.r.random()
        if not shape or u < 0.5:
            return tuple(shape)
        if u < 0.7:
            return tuple(shape[self.r.randrange(len(shape) + 1):])
        if u < 0.9:
            return tuple(1 if self.chance(0.5) else s for s in shape)
        return (self.r.choice((1, 2)),) + tuple(shape) if numel(shape) * 2 <= MAX_NUMEL else tuple(shape)

    def dim(self, ndim):
        n = max(ndim, 1)
        return self.r.randint(-n, n - 1)

    def dims(self, ndim):
        """A distinct subset of dims, as a tuple text or a single int."""
        if ndim == 0:
            return self.choice(("()", "0", "[]"))
        k = self.r.randint(1, ndim)
        picked = self.r.sample(range(ndim), k)
        picked = [d - ndim if self.chance(0.3) else d for d in picked]
        return str(picked[0]) if k == 1 and self.chance(0.5) else "(" + ", ".join(map(str, picked)) + ",)"

    def scalar(self, dtype):
        u = self.r.random()
        if dtype == "bool":
            return self.choice(("True", "False", "1", "0.5")) if u < 0.3 else "True"
        if dtype in INTS:
            return self.choice(("2", "-1", "0", "3", "1.5", "True")) if u < 0.9 else "-3"
        return self.choice(("1.5", "-0.5", "2", "0.0", "float('nan')", "float('inf')", "1e-3", "True"))

    def flt(self, lo, hi):
        return repr(round(self.r.uniform(lo, hi), 3))

    def boolean(self):
        return self.choice(("True", "False"))

    # --- tensors -----------------------------------------------------------------
    def tensor(self, shape=None, dtype=None, pool=ALL, ints=None, grad=None, layout=True, special=True, prefix="a"):
        """Emits `aK = <expression>` for a tensor of exactly this shape and dtype
        (a non-contiguous view of a bigger or permuted base some of the time) and
        returns its TMeta. ints=(lo, hi) overrides the value range of integer
        tensors (index tensors)."""
        shape = self.shape() if shape is None else tuple(shape)
        dtype = dtype or self.dtype(pool)
        if grad is None:
            grad = dtype in FLOATS and self.chance(0.2)
        grad = grad and dtype in FLOATS
        suffix, base = "", shape
        if layout and shape and self.chance(0.4):
            base, suffix = self.layout(shape)
            if self.chance(0.15):
                base, suffix2 = self.layout(base)
                suffix = suffix2 + suffix
        expr = self.create(base, dtype, ints, grad, special)
        v = self.var(prefix)
        self.emit(f"{v} = {expr}{suffix}")
        self.grad = self.grad or grad
        meta = TMeta(v, shape, dtype, grad)
        if self.global_hook:
            self.global_hook(v, meta)
        return meta

    def layout(self, shape):
        """(base shape, suffix): base<suffix> has this shape but other strides."""
        nd = len(shape)
        kinds = ["step", "expand"] + (["transpose"] if nd >= 2 else []) + (["permute"] if nd >= 3 else [])
        kind = self.choice(kinds)
        if kind == "transpose":
            i, j = self.r.sample(range(nd), 2)
            base = list(shape)
            base[i], base[j] = base[j], base[i]
            return tuple(base), f".transpose({i}, {j})"
        if kind == "permute":
            perm = list(range(nd))
            self.r.shuffle(perm)
            base = [0] * nd
            for k, p in enumerate(perm):
                base[p] = shape[k]
            return tuple(base), f".permute({', '.join(map(str, perm))})"
        if kind == "expand":
            cand = [k for k, s in enumerate(shape) if s != 1]
            if cand and numel(shape) > 0:
                ones = set(self.r.sample(cand, self.r.randint(1, len(cand))))
                base = tuple(1 if k in ones else s for k, s in enumerate(shape))
                return base, f".expand{shape_text(shape)}" if nd > 1 else f".expand({shape[0]})"
        d = self.r.randrange(nd)
        step, start = self.r.choice((2, 3)), self.r.choice((0, 0, 1))
        base = list(shape)
        base[d] = start + ((shape[d] - 1) * step + 1 + self.r.randrange(step) if shape[d] else 0)
        index = ", ".join([":"] * d + [f"{start}::{step}"])
        return tuple(base), f"[{index}]"

    def create(self, shape, dtype, ints=None, grad=False, special=True):
        n = numel(shape)
        rg = ", requires_grad=True" if grad else ""
        if special and 0 < n <= 64 and self.chance(0.12):
            values = [self.special_value(dtype) for _ in range(n)]
            body = self.nested(values, shape)
            return f"mf.tensor({body}, dtype={dt(dtype)}{rg})"
        st = shape_text(shape)
        if dtype in FLOATS:
            if self.chance(0.2):
                return f"mf.rand({st}, dtype={dt(dtype)}{rg})"
            return f"mf.randn({st}, dtype={dt(dtype)}{rg})"
        lo, hi = ints or INT_RANGE[dtype]
        if dtype == "bool":
            lo, hi = 0, 2
        elif dtype == "uint8":
            lo = max(lo, 0)
        return f"mf.randint({lo}, {max(hi, lo + 1)}, {st}, dtype={dt(dtype)})"

    def special_value(self, dtype):
        if dtype == "bool":
            return self.choice(("True", "False"))
        if dtype in INTS:
            lo, hi = INT_EXTREMES[dtype]
            return str(self.choice((lo, hi, 0, 1, -1 if lo < 0 else 2, lo + 1, hi - 1)))
        return self.choice(FLOAT_SPECIALS)

    @staticmethod
    def nested(values, shape):
        if not shape:
            return values[0]
        if len(shape) == 1:
            return "[" + ", ".join(values) + "]"
        step = numel(shape[1:])
        return "[" + ", ".join(Gen.nested(values[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + "]"

    def bad_tensor(self, like=None):
        """A tensor-position value that is wrong: wrong dtype or shape, a huge
        expanded view, a global tensor among local ones, or not a tensor."""
        u = self.r.random()
        if u < 0.25 and like is not None:
            return self.tensor(like.shape, self.dtype(tuple(d for d in ALL if d != like.dtype)), layout=False).var
        if u < 0.45:
            return self.tensor(self.shape(), layout=False).var
        if u < 0.6:
            big = self.choice(("2**31", "2**31, 2", "2**62", "2**63-1", "2**32, 2**31", "3, 2**62", "2**31-1"))
            return f"mf.zeros((), dtype={dt(self.dtype(ALL))}).expand({big})"
        if u < 0.7:
            return f"mf.ones(2, 3, placement=mf.placement('cpu', [0]), sbp=mf.sbp.broadcast)"
        if u < 0.8:
            return self.choice(("mf.ones(0)", "mf.ones(())", "mf.ones(1, 1, 1, 1, 1, 1, 1, 1)", "mf.ones(2**16)"))
        return self.choice(("None", "[1.0, 2.0]", "3", "2.5", "'x'", "[[1], [2, 3]]", "True", "mf.float32"))

    def targ(self, meta, protect=False):
        """A tensor argument: meta's variable, or in an adversarial position a bad one."""
        if not protect and self.hit():
            return self.bad_tensor(meta)
        return meta.var


def factor_shape(r, n, max_nd=4, infer=True):
    """A random shape whose elements multiply to n (with one -1 some of the time)."""
    if n == 0:
        shape = [r.choice((0, 2, 3))] + [r.choice((1, 2, 0)) for _ in range(r.randint(0, 2))]
        if 0 not in shape:
            shape[0] = 0
        return shape
    shape, rest = [], n
    while rest > 1 and len(shape) < max_nd - 1:
        divisors = [d for d in range(2, min(rest, 64) + 1) if rest % d == 0] or [rest]
        d = r.choice(divisors)
        shape.append(d)
        rest //= d
    shape.append(rest)
    if r.random() < 0.3:
        shape.insert(r.randrange(len(shape) + 1), 1)
    r.shuffle(shape)
    if infer and r.random() < 0.3:
        shape[r.randrange(len(shape))] = -1
    return shape
