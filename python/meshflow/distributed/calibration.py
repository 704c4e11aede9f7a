"""The measurements behind the auto-parallel cost model (meshflow.distributed.auto):
sustained compute rates, the fractions of the GEMM rate that convolutions and
attention reach, the collectives' times and their check against the model,
the latency a collective adds inside a step, and a measured training step.
auto.calibrate() runs them and caches the result."""
import statistics
import time

import meshflow as _mf
from meshflow._C import _auto_parallel as _ap

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def _sustained(fn, seconds=0.15):
    """Seconds per call of fn, run back to back for `seconds` by every rank
    of the job at once (Note [Sustained rates]): the mean over the ranks."""
    dist = _mf.distributed
    fn()
    if dist.is_initialized():
        dist.barrier()
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            break
    per_call = elapsed / calls
    if dist.is_initialized() and dist.get_world_size() > 1:
        total = _mf.tensor([per_call], dtype=_mf.float64)
        dist.all_reduce(total)
        per_call = float(total.item()) / dist.get_world_size()
    return per_call


# Note [Sustained rates]
# A training step computes for its whole length, on every rank at once; the
# rates the cost model gives it are measured the same way: each kernel runs
# back to back for a fixed time on every rank of the job together, and the
# mean time per call over the ranks is kept. Ranks that share a node's
# cores (more ranks x threads than cores) then measure their share, with
# the switching and the shared caches it costs (4 ranks on 2 cores: each
# GEMM rate 37-62 GFLOP/s, against 100 for one short timing alone), and a
# long run sees the clock and caches a step sees (one rank alone: 6% below
# the best of five short timings).
def _measure_compute():
    """GEMM rates per dtype and their fall-off for skinny products,
    elementwise bandwidth and the per-op overhead of this process (its
    thread count), sustained by every rank at once."""
    out = {}
    n = 384
    for key, dtype in (("gemm_flops", _mf.float32), ("gemm_flops_f64", _mf.float64),
                       ("gemm_flops_16", _mf.bfloat16)):
        a = _mf.randn(n, n).to(dtype)
        b = _mf.randn(n, n).to(dtype)
        out[key] = 2.0 * n ** 3 / _sustained(lambda: _mf.matmul(a, b))
    # A skinny product (8 rows against a 2048 x 2048 weight) for the
    # intensity at which GEMMs run at half rate (CostModel.gemm_half_intensity).
    m, k = 8, 2048
    a, b = _mf.randn(m, k), _mf.randn(k, k)
    rate = 2.0 * m * k * k / _sustained(lambda: _mf.matmul(a, b))
    intensity = 2.0 * m * k * k / ((2 * m * k + k * k) * 4)
    out["gemm_half_intensity"] = intensity * (out["gemm_flops"] / rate - 1) if rate < out["gemm_flops"] else 0.0
    _measure_kind_efficiencies(out)
    x = _mf.randn(1 << 22)
    y = _mf.randn(1 << 22)
    out["memory_bandwidth"] = 3 * x.numel() * 4 / _sustained(lambda: x + y)
    # A copy of a transposed view (Note [Transposed operands in the cost model]).
    w = _mf.randn(768, 1024)
    out["transpose_bandwidth"] = 2 * w.numel() * 4 / _sustained(lambda: w.t().contiguous())
    s = _mf.randn(1)
    reps = 200

    def small():
        for _ in range(reps):
            s + s
    out["op_overhead"] = _sustained(small) / reps
    return out


# Note [Op kinds in the cost model]
# A convolution or an attention call (OpDef::flops_kind) runs its FLOPs at
# its own fraction of the GEMM rate: here the CPU's fused attention runs at
# 0.5-0.65 of what a GEMM of the same intensity (FLOPs per byte) would, on
# heads from 64 x 32 to 512 x 128, and a 2-layer GPT's step priced at the
# GEMM rate was predicted 14-21% low on one rank. Each kind is timed on
# calls of middling shapes, sustained like the GEMMs, and its efficiency is
# the rate its time implies over that GEMM rate, so that the model prices
# those calls at their measured times.
def _measure_kind_efficiencies(out):
    F = _mf.nn.functional

    def efficiency(flops, nbytes, fn):
        intensity = flops / nbytes
        half = out["gemm_half_intensity"]
        gemm_rate = out["gemm_flops"] * (intensity / (intensity + half) if half > 0 else 1.0)
        return flops / _sustained(fn) / gemm_rate

    x, w = _mf.randn(8, 64, 32, 32), _mf.randn(64, 64, 3, 3)
    flops = 2.0 * x.numel() * w[0].numel()  # 3x3, padding 1: the output has x's shape
    out["conv_efficiency"] = efficiency(flops, (2 * x.numel() + w.numel()) * 4,
                                        lambda: F.conv2d(x, w, padding=1))
    # Heads of 128 x 64 and of 64 x 32: the mean of their fractions.
    fractions = []
    for heads, length, dim in ((16, 128, 64), (64, 64, 32)):
        q, k, v = (_mf.randn(1, heads, length, dim) for _ in range(3))
        flops = 2.0 * 2 * heads * length * length * dim  # two products over the length x length weights
        nbytes = (4 * q.numel() + heads * length) * 4  # q, k, v, the output and its log-sum-exp
        fractions.append(efficiency(flops, nbytes, lambda: F.scaled_dot_product_attention(q, k, v)))
    out["attention_efficiency"] = sum(fractions) / len(fractions)


def collective_time(kind, group, nbytes, reps=7):
    """Measured seconds of one collective on a float32 tensor of `nbytes`
    (the whole tensor, as the cost model counts) over `group` (None: the
    world): the slowest rank's best of `reps` samples, each the mean of a
    run of calls."""
    dist = _mf.distributed
    ranks = dist.get_world_size(group)
    numel = max(ranks, int(nbytes) // 4 // ranks * ranks)
    whole = _mf.zeros(numel)
    part = _mf.zeros(numel // ranks)
    if kind == "all_reduce":
        fn = lambda: dist.all_reduce(whole, group=group)  # noqa: E731
    elif kind == "all_gather":
        fn = lambda: dist.all_gather_into_tensor(whole, part, group=group)  # noqa: E731
    elif kind == "reduce_scatter":
        fn = lambda: dist.reduce_scatter_tensor(part, whole, group=group)  # noqa: E731
    elif kind == "all_to_all":
        out = _mf.zeros(numel)
        fn = lambda: dist.all_to_all_single(out, whole, group=group)  # noqa: E731
    else:
        raise ValueError(f"collective_time: kind must be one of {COLLECTIVES}, got {kind!r}")
    # Each sample times a run of calls (more for short ones), so that one
    # descheduled rank (ranks may share cores) weighs less.
    calls = max(1, min(16, (8 << 20) // max(int(nbytes), 1)))
    if nbytes <= 4 << 20:
        reps *= 2  # cheap: more samples where a spell weighs most
    samples = []
    for i in range(reps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if i:
            samples.append((time.perf_counter() - t0) / calls)
    best = min(samples)
    slowest = _mf.tensor([best], dtype=_mf.float64)
    dist.all_reduce(slowest, op="max")
    return float(slowest.item())


# 1.5 x and 2.125 x powers of two, 6 KiB to 96 MiB (about sqrt(2) apart
# past 96 KiB): exact powers of two are often slower (buffers that alias in
# the caches), so they are no typical point, and the collectives' times
# bend where MPI switches algorithms, which a grid this fine follows. Past
# the last point the model extrapolates a line.
_CALIBRATION_BYTES = tuple(sorted([3 << k for k in (11, 13, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25)]
                                  + [17 << k for k in range(13, 23)]))


def measure_collectives(sizes, group=None, rounds=2):
    """{kind: [[bytes, seconds], ...]} for each collective and size over
    `group` (None: the world): the best of `rounds` passes over all of
    them, so that a slow spell of the machine (ranks may share cores)
    spoils one pass rather than one point."""
    table = {kind: [[b, float("inf")] for b in sizes] for kind in COLLECTIVES}
    for _ in range(rounds):
        for kind in COLLECTIVES:
            for point in table[kind]:
                point[1] = min(point[1], collective_time(kind, group, point[0]))
    return table


_CHECK_BYTES = (1 << 20, 5 << 19, 10 << 20, 40 << 20, 64 << 20)  # 1, 2.5, 10, 40 and 64 MiB


def validate_collectives(sizes=_CHECK_BYTES, group=None, rounds=3, recheck=0.25):
    """The collective model against measured times over `group` (None: the
    world) at `sizes` (bytes), as rows {"kind", "ranks", "bytes",
    "predicted", "measured", "error"} (seconds; error relative to the
    measured time).

    The calibration sizes and `sizes` are measured in the same passes
    (measure_collectives), so that both see the machine in one state; the
    model is fitted on the calibration sizes alone, as calibrate() fits
    it, and predicts the others. Ranks may share cores, and a slow spell
    can spoil a whole pass: a point missed by more than `recheck` is
    measured again, with the calibration sizes around it, in `rounds` more
    passes, at most twice (each point keeps its best time)."""
    dist = _mf.distributed
    ranks = dist.get_world_size(group)
    if ranks < 2:
        raise ValueError(f"validate_collectives: needs a group of 2 or more ranks, got {ranks}")
    sizes = sorted({int(b) for b in sizes})
    if not sizes or sizes[0] <= 0:
        raise ValueError(f"validate_collectives: sizes must be positive byte counts, got {sizes}")
    calibration = list(_CALIBRATION_BYTES)
    for kind in COLLECTIVES:  # the first large collectives of a process run slower
        collective_time(kind, group, 1 << 24, reps=1)
    table = measure_collectives(sorted(set(calibration) | set(sizes)), group, rounds)
    best = {kind: dict((b, t) for b, t in points) for kind, points in table.items()}

    def rows():
        model = _ap.CostModel()
        for kind in COLLECTIVES:
            model.set_collective(kind, ranks, [[b, best[kind][b]] for b in calibration])
        out = []
        for kind in COLLECTIVES:
            for b in sizes:
                predicted, measured = model.collective(kind, ranks, b), best[kind][b]
                out.append({"kind": kind, "ranks": ranks, "bytes": b, "predicted": predicted, "measured": measured,
                            "error": abs(predicted - measured) / measured})
        return out

    result = rows()
    # Every rank decides alike: the times are the slowest rank's.
    for _ in range(2):
        missed = [r for r in result if r["error"] > recheck]
        if not missed:
            break
        for row in missed:
            around = [c for c in calibration if c < row["bytes"]][-1:] + [c for c in calibration if c > row["bytes"]][:1]
            for _ in range(rounds):
                for b in [row["bytes"]] + around:
                    best[row["kind"]][b] = min(best[row["kind"]][b], collective_time(row["kind"], group, b))
        result = rows()
    return result


def _timed_calls(fn, calls):
    """Mean seconds per call of `calls` calls of fn, run by every rank from
    a barrier: the slowest rank's (the same on every rank)."""
    dist = _mf.distributed
    fn()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    mean = _mf.tensor([(time.perf_counter() - t0) / calls], dtype=_mf.float64)
    dist.all_reduce(mean, op="max")
    return float(mean.item())


# Note [Sync latency]
# A collective measured alone (collective_time) finds every rank waiting
# in it. Inside a step the ranks reach it from their compute at different
# times, and where ranks share cores (more ranks x threads than cores) a
# rank that arrives waits for the others to be scheduled: 4 ranks on 2
# cores spend 0.1-0.5 ms more per collective than alone, 2 ranks on 2 cores
# about 0.05 ms, and a 2-layer GPT step makes 45 of them. The cost model
# adds this latency (CostModel.sync_latency) to each collective it counts,
# measured as a step meets it: every rank runs bursts of GEMMs (0.5, 1 and
# 2 ms) each followed by a small all_reduce, and the time of the pair less
# the burst's and the all_reduce's, each the slowest rank's mean over a
# run of calls, is the latency; the median of 5 runs per burst length,
# none below zero. With a core per rank and thread it comes out near zero.
def _measure_sync_latency(reps=5, calls=30):
    dist = _mf.distributed
    a, b = _mf.randn(128, 128), _mf.randn(128, 128)
    small = _mf.zeros(64)
    one = _sustained(lambda: _mf.matmul(a, b), 0.05)
    samples = []
    for burst_seconds in (0.5e-3, 1e-3, 2e-3):
        # the same burst on every rank: the longest count any rank asks for
        count = _mf.tensor([max(1, round(burst_seconds / one))], dtype=_mf.float64)
        dist.all_reduce(count, op="max")
        k = int(count.item())

        def burst():
            for _ in range(k):
                _mf.matmul(a, b)

        def collective():
            dist.all_reduce(small)

        def both():
            burst()
            collective()

        for _ in range(reps):
            samples.append(_timed_calls(both, calls) - _timed_calls(burst, calls) - _timed_calls(collective, calls))
    return max(0.0, statistics.median(samples))


def measure_step(graph, *inputs, steps=10, warmup=3):
    """Measured seconds of one call graph(*inputs) (a training step): the
    median of `steps` calls after `warmup` ones, each timed from a barrier
    of the job to its outputs' values (read on the host), and the slowest
    rank's median under the launcher, so every rank gets the same number.
    This is what cost_report(graph)["step_time"] and the simulator
    predict."""
    def count(v, least):
        return isinstance(v, int) and not isinstance(v, bool) and v >= least
    if not count(steps, 1) or not count(warmup, 0):
        raise ValueError(f"measure_step: expected steps >= 1 and warmup >= 0, got steps={steps!r}, warmup={warmup!r}")
    dist = _mf.distributed
    distributed = dist.is_initialized() and dist.get_world_size() > 1

    def wait(out):
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, _mf.Tensor):
                (t.to_local() if t.is_global else t).numpy()

    times = []
    for i in range(warmup + steps):
        if distributed:
            dist.barrier()
        t0 = time.perf_counter()
        wait(graph(*inputs))
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    if distributed:
        slowest = _mf.tensor([median], dtype=_mf.float64)
        dist.all_reduce(slowest, op="max")
        median = float(slowest.item())
    return median


def _measure_collectives():
    """Measured times per collective and message size (6 KiB to 96 MiB;
    the model interpolates between them) over the world and, for a
    world of 4 or more that splits in halves, over each half (a 2-D mesh's
    axis groups, communicating at once)."""
    dist = _mf.distributed
    world = dist.get_world_size()
    rank = dist.get_rank()
    groups = [(world, None)]
    if world >= 4 and world % 2 == 0:
        halves = [dist.new_group(list(range(0, world // 2))), dist.new_group(list(range(world // 2, world)))]
        pairs = [dist.new_group([r, r + world // 2]) for r in range(world // 2)]
        groups.append((world // 2, halves[0] if rank < world // 2 else halves[1]))
        if world // 2 != 2:
            groups.append((2, pairs[rank % (world // 2)]))
    # The first large collectives of a process run slower (buffers, pages):
    # measure warm.
    for kind in COLLECTIVES:
        collective_time(kind, None, 1 << 24, reps=1)
    fits = {}
    for ranks, group in groups:
        for kind, points in measure_collectives(_CALIBRATION_BYTES, group).items():
            fits.setdefault(kind, {})[str(ranks)] = points
    return fits
