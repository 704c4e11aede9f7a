"""Graph fusion rules against unfused (eager) execution on random graphs.

Each case draws a random graph of elementwise and normalisation ops
(broadcast operands, branches that rejoin, softmax / log_softmax /
layer_norm over the last dim, where) over inputs big enough to fuse, runs it
as an `mf.nn.Graph` train step (a parameter takes part, so backward runs
through the fused groups too) and as the same eager step, and requires the
same bits: Note [Elementwise fusion] promises the separate kernels' results.
"""
import numpy as np
import pytest

import meshflow as mf
import meshflow.nn.functional as F

ROWS, COLS = 64, 512  # 32768 elements: above the fusion threshold

UNARY = {
    "relu": F.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "tanh": mf.tanh,
    "sigmoid": mf.sigmoid,
    "neg": mf.neg,
    "abs": mf.abs,
    "exp_of_tanh": lambda t: mf.exp(mf.tanh(t)),
    "sqrt_abs": lambda t: mf.sqrt(mf.abs(t) + 0.5),
    "log1p_abs": lambda t: mf.log1p(mf.abs(t)),
    "scale": lambda t: t * 0.75,
    "shift": lambda t: t + 0.25,
    "square": lambda t: t * t,
}
BINARY = {
    "add": mf.add,
    "sub": mf.sub,
    "mul": mf.mul,
    "maximum": mf.maximum,
    "where": lambda a, b: mf.where(a > b, a, b * 0.5),
}
ROW_OPS = {  # over the last dim
    "softmax": lambda t: F.softmax(t, dim=-1),
    "log_softmax": lambda t: F.log_softmax(t, dim=-1),
    "layer_norm": lambda t: F.layer_norm(t, (COLS,)),
}


def draw_program(rng, steps):
    """A list of (kind, name, argument indices) over a value pool that starts
    with the inputs x (ROWS, COLS), w (COLS,) (the parameter), b (1, COLS)
    and a 0-d scalar s."""
    program, pool = [], 4
    for _ in range(steps):
        recent = lambda: int(max(0, pool - 1 - rng.geometric(0.5) + 1))  # noqa: E731  (favours new values)
        r = rng.random()
        if r < 0.45:
            program.append(("unary", rng.choice(sorted(UNARY)), [recent()]))
        elif r < 0.85:
            program.append(("binary", rng.choice(sorted(BINARY)), [recent(), int(rng.integers(0, pool))]))
        else:
            program.append(("row", rng.choice(sorted(ROW_OPS)), [recent()]))
        pool += 1
    return program


def run_program(program, x, w, b, s):
    pool = [x, w, b, s]
    for kind, name, args in program:
        vals = [pool[i] for i in args]
        if kind == "unary":
            out = UNARY[name](vals[0])
        elif kind == "binary":
            out = BINARY[name](vals[0], vals[1])
        else:
            v = vals[0]
            if v.dim() < 2:  # a row op needs the full shape: broadcast first
                v = v + pool[0] * 0.0
            out = ROW_OPS[name](v)
        pool.append(out)
    # every value (and the parameter w) reaches the loss, so that every
    # branch gets a gradient
    total = pool[0] * 0.0 + pool[1]
    for v in pool[4:]:
        total = total + v
    return (total * total).mean()


class Step(mf.nn.Graph):
    def __init__(self, module, optimizer, program):
        super().__init__()
        self.module = module
        self.program = program
        self.add_optimizer(optimizer)
        self.config.enable_exact_mode(True)

    def build(self, x, b, s):
        loss = run_program(self.program, x, self.module.w, b, s)
        loss.backward()
        return loss


def make_module(w):
    m = mf.nn.Module()
    m.w = mf.nn.Parameter(w.clone())
    return m


@pytest.mark.parametrize("seed", range(40))
def test_random_fusions_give_eager_bits(seed):
    rng = np.random.default_rng(seed)
    program = draw_program(rng, steps=int(rng.integers(4, 12)))
    x = mf.tensor(rng.standard_normal((ROWS, COLS)), dtype=mf.float32)
    w = mf.tensor(rng.standard_normal(COLS), dtype=mf.float32)
    b = mf.tensor(rng.standard_normal((1, COLS)), dtype=mf.float32)
    s = mf.tensor(0.3, dtype=mf.float32)

    eager = make_module(w)
    opt_e = mf.optim.SGD(eager.parameters(), lr=0.1)
    traced = make_module(w)
    graph = Step(traced, mf.optim.SGD(traced.parameters(), lr=0.1), program)
    for step in range(2):
        opt_e.zero_grad()
        loss_e = run_program(program, x, eager.w, b, s)
        loss_e.backward()
        opt_e.step()
        loss_g = graph(x, b, s)
        np.testing.assert_array_equal(loss_g.numpy(), loss_e.detach().numpy(), err_msg=f"{program} step {step}")
        np.testing.assert_array_equal(traced.w.detach().numpy(), eager.w.detach().numpy(), err_msg=str(program))


def test_the_random_graphs_do_fuse():
    """The property above is only worth having if the graphs fuse."""
    fused = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        program = draw_program(rng, steps=int(rng.integers(4, 12)))
        x = mf.randn(ROWS, COLS)
        traced = make_module(mf.randn(COLS))
        graph = Step(traced, mf.optim.SGD(traced.parameters(), lr=0.1), program)
        graph(x, mf.randn(1, COLS), mf.tensor(0.3))
        fused += "fused_elementwise" in str(graph)
    assert fused >= 30, fused
