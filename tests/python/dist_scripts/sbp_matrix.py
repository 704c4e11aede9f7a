"""Run under mpirun: every SBP signature of every op equals one process.

The op calls that the samples of tests/python/opinfo.py make (forward and
backward, in float64) are recorded on one process, then each call is replayed
on global tensors with each of its op's SBP signatures forced: on a 1-D mesh of
all ranks, and with `--mesh 2x2` on a 2x2 mesh (each signature on each axis).
The global result, converted to broadcast, must equal the recorded call's result
on whole tensors, and so must the gradients of its floating inputs.

    mpirun -np 4 python sbp_matrix.py [--mesh 2x2]
"""
import argparse
import os
import sys
import zlib

import numpy as np

import meshflow as mf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from opinfo import OPS  # noqa: E402
from test_ops import Builder, flatten, variants  # noqa: E402

# Random values or no values: the same call gives another result.
NOT_REPLAYABLE = {"dropout", "uniform", "normal", "random_int", "bernoulli", "bernoulli_scalar", "randperm", "empty"}
CALLS_PER_OP = 3
RTOL = ATOL = 1e-9

parser = argparse.ArgumentParser()
parser.add_argument("--mesh", default="1d", choices=["1d", "2x2"])
args = parser.parse_args()
rank, world = mf.env.get_rank(), mf.env.get_world_size()
if args.mesh == "2x2":
    assert world == 4, "--mesh 2x2 needs 4 ranks"
    mesh = mf.placement("cpu", [[0, 1], [2, 3]])
else:
    mesh = mf.placement("cpu", list(range(world)))
axes = len(mesh.hierarchy)
B = tuple([mf.sbp.broadcast] * axes)


def record_calls():
    """op name -> recorded calls (distinct input shapes, dtypes and attrs)."""
    by_op = {}
    for info in OPS:
        if info.check != "values":
            continue
        dtype = "float64" if "float64" in info.dtypes else info.dtypes[0]
        rng = np.random.default_rng(zlib.crc32(info.name.encode()))
        fn = variants(info)[0][1](mf)
        for sample in info.samples(rng, dtype)[:4]:
            build = Builder(mf, None, ("float64",))
            sample_args, sample_kwargs = build(sample.args), build(sample.kwargs)

            def run():
                out = fn(*sample_args, **sample_kwargs)
                outs = [o for o in flatten(out) if isinstance(o, mf.Tensor) and o.requires_grad]
                if outs and build.leaves:
                    sum(o.sum() for o in outs).backward()

            for call in mf._C._record_calls(run):
                if call.op in NOT_REPLAYABLE or not any(t is not None for t in call.inputs):
                    continue
                key = (call.attrs, call.inplace,
                       tuple(None if t is None else (tuple(t.shape), str(t.dtype)) for t in call.inputs))
                calls = by_op.setdefault(call.op, {})
                if key not in calls and len(calls) < CALLS_PER_OP:
                    calls[key] = call
    return {op: list(calls.values()) for op, calls in sorted(by_op.items())}


def clone_inputs(call, grad):
    """Fresh copies of the call's inputs; floating ones are leaves when grad."""
    out = []
    for t in call.inputs:
        if t is None:
            out.append(None)
            continue
        c = t.clone()
        if grad and c.is_floating_point():
            c.requires_grad_()
        out.append(c)
    return out


def whole(t):
    return (t.to_global(sbp=B).to_local() if t.is_global else t).detach().numpy()


def check_equal(actual, expected, what):
    if actual.dtype.kind == "f":
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def cotangents(call, outputs):
    rng = np.random.default_rng(zlib.crc32((call.op + call.attrs).encode()))
    return [mf.tensor(rng.standard_normal(tuple(o.shape))).to(o.dtype) if o is not None else None for o in outputs]


def backward(outputs, cots, leaves):
    terms = [(o * c).sum() for o, c in zip(outputs, cots) if o is not None and o.requires_grad]
    if not terms:
        return None
    sum(terms).backward()
    return [leaf.grad if leaf is not None and leaf.requires_grad else None for leaf in leaves]


def reference(call):
    """Outputs and input gradients of the call on whole tensors, or None for
    the gradients when its backward is not defined for these inputs."""
    grad = call.differentiable and not call.inplace
    leaves = clone_inputs(call, grad)
    outputs = call.run(leaves)
    values = [None if o is None else o.detach().numpy().copy() for o in outputs]
    grads = None
    if grad:
        try:
            got = backward(outputs, cotangents(call, outputs), leaves)
            grads = None if got is None else [None if g is None else g.numpy() for g in got]
        except RuntimeError:
            grads = None
    return values, grads


def to_global_inputs(call, sig_inputs, grad):
    out = []
    for j, t in enumerate(call.inputs):
        if t is None:
            out.append(None)
            continue
        g = mf._C._global_from_full(t.clone(), mesh, tuple(s[j] for s in sig_inputs))
        if grad and g.is_floating_point():
            g.requires_grad_()
        out.append(g)
    return out


def signature_choices(call):
    """Per mesh axis: (index, input sbps, output sbps) for each signature, and
    the index tuples to run (each signature on each axis at least once)."""
    per_axis = [call.signatures(parts) for parts in mesh.hierarchy]
    if axes == 1:
        return per_axis, [(i,) for i in range(len(per_axis[0]))]
    n0, n1 = len(per_axis[0]), len(per_axis[1])
    return per_axis, sorted({(i, (i + k) % n1) for i in range(n0) for k in (0, 1)} |
                            {((j + 1) % n0, j) for j in range(n1)})


def leaves_empty_part(call, per_axis, index, expected):
    """Whether the signatures split some dim into more parts than it has
    elements (the interpreter never chooses that)."""
    shapes = [None if t is None else tuple(t.shape) for t in call.inputs] + \
             [None if e is None else e.shape for e in expected]
    for k, shape in enumerate(shapes):
        if shape is None:
            continue
        parts = {}
        for a in range(axes):
            sig_in, sig_out = per_axis[a][index[a]]
            sbps = list(sig_in) + list(sig_out)  # no outputs: shapes that depend on the data
            s = sbps[k] if k < len(sbps) else mf.sbp.broadcast
            if s.axis is not None:
                parts[s.axis] = parts.get(s.axis, 1) * mesh.hierarchy[a]
        if any(shape[d] < n for d, n in parts.items()):
            return True
    return False


def run_signature(call, per_axis, index, expected, expected_grads):
    sig_inputs = [per_axis[a][index[a]][0] for a in range(axes)]
    what = f"{call.op}({call.attrs}) inputs {[None if t is None else tuple(t.shape) for t in call.inputs]} " \
           f"signature {[per_axis[a][index[a]] for a in range(axes)]}"
    grad = expected_grads is not None
    inputs = to_global_inputs(call, sig_inputs, grad)
    outputs = call.run(inputs, force=list(index))
    assert len(outputs) == len(expected), what
    for k, (o, e) in enumerate(zip(outputs, expected)):
        assert (o is None) == (e is None), f"{what}: output {k}"
        if o is not None:
            assert o.is_global and tuple(o.shape) == e.shape, f"{what}: output {k} shape {tuple(o.shape)}"
            check_equal(whole(o), e, f"{what}: output {k}")
    if grad:
        grads = backward(outputs, cotangents(call, outputs), inputs)
        for k, (g, e) in enumerate(zip(grads, expected_grads)):
            if e is None:
                continue
            assert g is not None, f"{what}: no gradient for input {k}"
            check_equal(whole(g), e, f"{what}: gradient of input {k}")


calls = record_calls()
assert len(calls) >= 80, f"only {len(calls)} ops recorded"
tested = signatures = 0
for op, op_calls in calls.items():
    for call in op_calls:
        expected, expected_grads = reference(call)
        per_axis, indices = signature_choices(call)
        for index in indices:
            if leaves_empty_part(call, per_axis, index, expected):
                continue
            try:
                run_signature(call, per_axis, index, expected, expected_grads)
            except Exception as err:
                sigs = [per_axis[a][index[a]] for a in range(axes)]
                shapes = [None if t is None else tuple(t.shape) for t in call.inputs]
                raise AssertionError(f"{call.op}({call.attrs}) inputs {shapes} signature {sigs}: "
                                     f"{type(err).__name__}: {err}") from err
            tested += 1
        signatures += sum(len(s) for s in per_axis)
print(f"rank {rank}/{world} mesh {mesh.hierarchy}: {len(calls)} ops, {sum(map(len, calls.values()))} calls, "
      f"{tested} signature runs: signatures OK", flush=True)
