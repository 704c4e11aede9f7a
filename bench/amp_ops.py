"""bfloat16 against float32 for the ops autocast runs in low precision.

    PYTHONPATH=python /usr/bin/python3 bench/amp_ops.py [--rounds 7]

Each case runs the same op on float32 and on bfloat16 tensors (forward, and
forward + backward to inputs and weights), 2 threads, alternating the two
dtypes sample by sample; the best sample of each counts. The speedup is
float32 time / bfloat16 time.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import meshflow as mf  # noqa: E402

F = mf.nn.functional


def matmul_case(n):
    def make(dtype):
        a, b = mf.randn(n, n).to(dtype), mf.randn(n, n).to(dtype)
        return lambda: mf.matmul(a, b)
    return f"matmul {n}x{n}x{n}", make


def linear_case(rows, din, dout):
    def make(dtype):
        x = mf.randn(rows, din).to(dtype).requires_grad_()
        w = mf.randn(dout, din).to(dtype).requires_grad_()
        g = mf.randn(rows, dout).to(dtype)
        return lambda: mf.autograd.grad([F.linear(x, w)], [x, w], [g])
    return f"linear ({rows}, {din}) -> {dout}, fwd+bwd", make


def conv_case(n, c, hw, backward):
    def make(dtype):
        x = mf.randn(n, c, hw, hw).to(dtype).requires_grad_()
        w = mf.randn(c, c, 3, 3).to(dtype).requires_grad_()
        if not backward:
            return lambda: F.conv2d(x, w, padding=1)
        g = mf.randn(n, c, hw, hw).to(dtype)
        return lambda: mf.autograd.grad([F.conv2d(x, w, padding=1)], [x, w], [g])
    return f"conv2d N={n} C={c} {hw}x{hw} 3x3, {'fwd+bwd' if backward else 'fwd'}", make


def norm_case(op, rows, n):
    """softmax / log_softmax over the last dim, or layer_norm: ops that
    compute in float32 on bfloat16 data (Note [Vectorised bfloat16
    conversion])."""
    def make(dtype):
        x = mf.randn(rows, n).to(dtype).requires_grad_()
        g = mf.randn(rows, n).to(dtype)
        if op == "layer_norm":
            w = mf.randn(n).to(dtype).requires_grad_()
            b = mf.randn(n).to(dtype).requires_grad_()
            return lambda: mf.autograd.grad([F.layer_norm(x, (n,), w, b)], [x, w, b], [g])
        fn = F.softmax if op == "softmax" else F.log_softmax
        return lambda: mf.autograd.grad([fn(x, dim=-1)], [x], [g])
    return f"{op} ({rows}, {n}), fwd+bwd", make


def cast_case(n):
    def make(dtype):
        x = mf.randn(n, n)
        return lambda: x.to(mf.bfloat16).to(mf.float32) if dtype == mf.bfloat16 else x.clone().clone()
    return f"cast float32 -> bfloat16 -> float32 ({n}, {n}) (float32 column: two clones)", make


def best_pair(make, rounds):
    fns = {d: make(d) for d in (mf.float32, mf.bfloat16)}
    best = {d: float("inf") for d in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for d, fn in fns.items():
            begin = time.perf_counter()
            fn()
            best[d] = min(best[d], time.perf_counter() - begin)
    return best[mf.float32] * 1000, best[mf.bfloat16] * 1000


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    mf.set_num_threads(2)
    mf.manual_seed(0)
    cases = [matmul_case(1024), matmul_case(2048), linear_case(1024, 256, 1024), linear_case(1024, 1024, 256),
             conv_case(32, 64, 32, False), conv_case(32, 64, 32, True), conv_case(32, 256, 8, True),
             conv_case(32, 512, 4, True), norm_case("softmax", 2048, 1024), norm_case("log_softmax", 2048, 1024),
             norm_case("layer_norm", 2048, 1024), norm_case("softmax", 8192, 64), cast_case(2048)]
    print("| case | float32 ms | bfloat16 ms | speedup |")
    print("|---|---:|---:|---:|")
    for name, make in cases:
        f32, bf16 = best_pair(make, args.rounds)
        print(f"| {name} | {f32:.2f} | {bf16:.2f} | {f32 / bf16:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
