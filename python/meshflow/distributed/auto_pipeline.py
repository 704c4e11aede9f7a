"""Stage search for pipeline parallelism: how many stages, where to cut a
model whose layers run one after another, which schedule and how many
micro-batches, from the same cost model as the SBP search.

    plan = mf.distributed.auto.plan_pipeline(model, loss_fn, (x, y), world_size=4)
    pipe = pp.pipeline(model, split_points=plan["split_points"])
    stage = pipe.build_stage(rank // plan["data_parallel"])  # ranks of a stage in a row
    ...

Note [Stage search]: as Alpa does, the model's layers (the children of an
nn.Sequential, in order) are cut into contiguous ranges. Each stage gets
world_size / S ranks as a data-parallel (or SBP-searched) mesh of its own.
For every range, stage count S and micro-batch count M, the range is
traced once on a micro-batch and costed by `simulate()` on its mesh: the
calls of the forward and backward pass give the stage's time per
micro-batch t (plus the messages of its output and its gradient to the
next stage, costed as a 2-rank all-reduce of the same bytes), the
optimizer's updates give its time per step u, and the plan's memory gives
the parameters and state p and the activations a of one micro-batch. A
pipeline of S stages then takes about
    sum_s t_s + (M - 1) max_s t_s + max_s u_s
per step (1F1B and GPipe alike), and stage s keeps p_s + k a_s bytes,
with k = min(S - s, M) micro-batches in flight under 1F1B and M under
GPipe. For each candidate bound T on max_s t_s, a dynamic program over the
cut points finds the cheapest sum_s t_s whose stages are all within T and
within the memory limit; the best (S, M, schedule, T) wins. Exact for the
model above; the model ignores overlap of messages with compute.

The zero-bubble schedule (backward split into its input-gradient part I,
which the previous stage waits for, and its weight-gradient part W, run in
the bubbles) has no closed form: each range's calls are split into F, I
and W (Note [Pipeline parts of calls] in src/distributed/auto_parallel/
log.cpp; the output's message goes with F, its gradient's with I), and each
cut the dynamic program gives for a bound is run through the schedule
simulator (pipelining.make_schedule(...).simulate), whose peak of in-flight
micro-batches per stage gives the memory.

The interleaved 1F1B schedule (asked for with schedules=(...,
"interleaved_1f1b")) cuts the layers into 2S ranges, range k on the ranks
of group k % S, and runs each cut the dynamic program gives through the
same simulator: a rank keeps its two ranges' parameters and simulated
in-flight activations and runs their updates. Graph mode's searched
stages (Note [Searched stages in graph mode] in auto.py) do not offer it.
"""
import copy
import math
import time

import meshflow as _mf

__all__ = ["plan_pipeline", "best_partition"]

SCHEDULES = ("1f1b", "gpipe", "zero_bubble")
# Searched when asked for (schedules=...): two stages per rank.
INTERLEAVED = "interleaved_1f1b"
STAGES_PER_RANK = 2


def _partitions(num_layers, num_stages, stage_time, stage_memory=None, memory_limit=0.0):
    """For each bound T on the slowest stage (every distinct range time),
    the cut of layers 0..num_layers-1 into num_stages contiguous, non-empty
    ranges with the least sum of stage times, each within T and (when a
    limit is given) stage_memory(s, i, j) <= memory_limit: yields
    (T, sum of times, [(i, j), ...]) for the bounds some cut meets."""
    if num_stages < 1 or num_stages > num_layers:
        return
    times = {(i, j): stage_time(i, j) for i in range(num_layers) for j in range(i + 1, num_layers + 1)}

    def fits(s, i, j):
        return not memory_limit or stage_memory is None or stage_memory(s, i, j) <= memory_limit

    for bound in sorted(set(times.values())):
        # f[s][j]: the least sum of stage times covering layers [0, j) with s stages, each within bound.
        f = [[math.inf] * (num_layers + 1) for _ in range(num_stages + 1)]
        cut = [[None] * (num_layers + 1) for _ in range(num_stages + 1)]
        f[0][0] = 0.0
        for s in range(1, num_stages + 1):
            for j in range(s, num_layers + 1):
                for i in range(s - 1, j):
                    t = times[(i, j)]
                    if f[s - 1][i] == math.inf or t > bound or not fits(s - 1, i, j):
                        continue
                    if f[s - 1][i] + t < f[s][j]:
                        f[s][j], cut[s][j] = f[s - 1][i] + t, i
        if f[num_stages][num_layers] == math.inf:
            continue
        ranges, j = [], num_layers
        for s in range(num_stages, 0, -1):
            i = cut[s][j]
            ranges.append((i, j))
            j = i
        yield bound, f[num_stages][num_layers], ranges[::-1]


def best_partition(num_layers, num_stages, stage_time, stage_memory=None, memory_limit=0.0, microbatches=1):
    """The cut of layers 0..num_layers-1 into num_stages contiguous,
    non-empty ranges that minimises sum_s t_s + (microbatches - 1) max_s t_s,
    where t_s = stage_time(i, j) for the range [i, j), subject to
    stage_memory(s, i, j) <= memory_limit (when a limit is given).
    Returns (cost, [(i, j), ...]) or (inf, None) when no cut fits."""
    best = (math.inf, None)
    for bound, total, ranges in _partitions(num_layers, num_stages, stage_time, stage_memory, memory_limit):
        cost = total + (microbatches - 1) * bound
        if cost < best[0]:
            best = (cost, ranges)
    return best


def _children(model):
    named = list(model.named_children()) if hasattr(model, "named_children") else []
    if not named:
        raise ValueError("plan_pipeline: the model must have children that run one after another (an "
                         f"nn.Sequential or a module built that way), got {type(model).__name__} without children")
    return named


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _boundaries(layers, x):
    """The activation entering each layer and the model's output, for one micro-batch."""
    acts = [x]
    with _mf.no_grad():
        for _, layer in layers:
            acts.append(layer(acts[-1]))
    return acts


class _InputGradient(_mf.nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.probe = _mf.nn.Parameter(_mf.zeros(*shape))

    def forward(self, x):
        return x + self.probe


class _StageCosts:
    """The cost-model figures of each layer range on one stage mesh, cached."""

    def __init__(self, layers, loss_fn, acts, targets, ranks, cost_model, simulate, step_fn=None,
                 data_parallel=False):
        self.layers, self.loss_fn, self.acts, self.targets = layers, loss_fn, acts, targets
        self.step_fn, self.data_parallel = step_fn, data_parallel
        self.ranks, self.model, self.simulate = ranks, cost_model, simulate
        self.cache = {}

    def __call__(self, i, j):
        key = (i, j)
        if key not in self.cache:
            self.cache[key] = self._cost(i, j)
        return self.cache[key]

    def _cost(self, i, j):
        parts = [copy.deepcopy(layer) for _, layer in self.layers[i:j]]
        x = self.acts[i].detach().clone()
        if i > 0 or not any(True for p in parts for _ in p.parameters()):
            # A stage past the first computes its input's gradient (what the previous stage
            # waits for), and the traced step's inputs take no gradient: a zero parameter
            # added to the input makes the backward reach it.
            parts.insert(0, _InputGradient(x.shape[1:]))
        sub = _mf.nn.Sequential(*parts)
        last = j == len(self.layers)
        backward = True
        if last and self.step_fn is not None:
            # The caller's whole step (forward, loss and backward) with this stage as the model.
            inputs, stage_loss, backward = (x, *self.targets), self.step_fn, False
        elif last:
            loss_fn = self.loss_fn
            inputs = (x, *self.targets)

            def stage_loss(m, x, *targets):
                return loss_fn(m(x), *targets)
        else:
            # Backward from the next stage: a fixed upstream gradient costs as the real one.
            upstream = _mf.ones_like(self.acts[j])
            inputs = (x, upstream)

            def stage_loss(m, x, g):
                return (m(x) * g).sum()
        optimizer = _mf.optim.SGD(sub.parameters(), lr=0.0)
        probe = ("model.0.probe",) if isinstance(parts[0], _InputGradient) else ()
        report = self.simulate(sub, optimizer, stage_loss, inputs, (self.ranks,), cost_model=self.model,
                               _backward=backward, _input_parameters=probe, _data_parallel=self.data_parallel)
        # The calls' costs sum to the plan's step. Gradient boxing is in the calls of the
        # backward, so it is counted per micro-batch (an over-estimate: it happens once per step).
        per_step = sum(c["compute"] + c["boxing"] for c in report["calls"] if c["op"].endswith("_update"))
        per_microbatch = report["step_time"] - per_step
        # The parts a zero-bubble schedule runs apart (Note [Pipeline parts of calls]): forward F,
        # the input gradient I and the weight gradients W; the gradients' boxing into their
        # parameters' layouts, outside the calls, goes with W.
        part = {"forward": 0.0, "backward_input": 0.0, "backward_weight": 0.0}
        for c in report["calls"]:
            if c["part"] in part:
                part[c["part"]] += c["compute"] + c["boxing"]
        part["backward_weight"] += per_microbatch - sum(part.values())
        if not last:
            out_bytes = self.acts[j].numel() * self.acts[j].element_size() / self.ranks
            message = self.model.collective("all_reduce", 2, out_bytes) + self.model.sync_latency
            per_microbatch += 2 * message
            part["forward"] += message
            part["backward_input"] += message
        return {"time": per_microbatch, "update": per_step, "parameters": report["parameter_memory"],
                "activations": max(0.0, report["memory"] - report["parameter_memory"]),
                "forward": part["forward"], "backward_input": part["backward_input"],
                "backward_weight": part["backward_weight"]}


def _simulated_cuts(num_layers, schedule, costs, stage_memory, memory_limit):
    """Each distinct cut into schedule.num_stages ranges that the dynamic
    program gives for a bound (stage_memory(s, i, j) within the limit),
    run through the schedule simulator with its ranges' F, I and W times:
    yields (ranges, their costs, the simulation)."""
    seen = set()
    for _, _, ranges in _partitions(num_layers, schedule.num_stages, lambda i, j: costs(i, j)["time"], stage_memory,
                                    memory_limit):
        if tuple(ranges) in seen:
            continue
        seen.add(tuple(ranges))
        c = [costs(i, j) for i, j in ranges]
        yield ranges, c, schedule.simulate(forward=[x["forward"] for x in c],
                                           backward_input=[x["backward_input"] for x in c],
                                           backward_weight=[x["backward_weight"] for x in c])


def _zero_bubble(num_layers, stages, m, costs, memory_1f1b, memory_limit):
    """The zero-bubble schedule's best cut: each cut the dynamic program
    gives for a bound (those that fit under 1F1B's in-flight counts, which
    zero-bubble schedules keep too) run through the schedule simulator with
    its stages' F, I and W times. Returns (simulated step, ranges,
    memory(s, i, j) from the simulated peak of in-flight micro-batches), or
    (inf, None, None)."""
    from meshflow.distributed import pipelining as pp
    if stages < 2:
        return math.inf, None, None
    schedule = pp.make_schedule("zero_bubble", stages, m)
    best = (math.inf, None, None)
    for ranges, _, result in _simulated_cuts(num_layers, schedule, costs, memory_1f1b, memory_limit):
        peaks = list(result.peak_activations)

        def memory(s, i, j, peaks=peaks):
            return costs(i, j)["parameters"] + peaks[s] * costs(i, j)["activations"]

        if memory_limit and any(memory(s, i, j) > memory_limit for s, (i, j) in enumerate(ranges)):
            continue
        if result.step_time < best[0]:
            best = (result.step_time, ranges, memory)
    return best


def _interleaved(num_layers, stages, m, costs, memory_limit):
    """The interleaved 1F1B schedule's best cut: the layers in
    stages * STAGES_PER_RANK contiguous ranges, range k on rank k % stages
    (Note [Stage search]). Each cut the dynamic program gives for a bound
    runs through the schedule simulator with its ranges' F, I and W times;
    a rank holds its ranges' parameters and their simulated in-flight
    activations, and updates its ranges' parameters. Returns (simulated
    step plus the slowest rank's updates, ranges, memory per range, memory
    per rank), or (inf, None, None, None)."""
    from meshflow.distributed import pipelining as pp
    virtual = stages * STAGES_PER_RANK
    none = (math.inf, None, None, None)
    if stages < 2 or virtual > num_layers or m % stages:
        return none  # the schedule runs micro-batches in rounds of `stages`
    schedule = pp.make_schedule(INTERLEAVED, stages, m, STAGES_PER_RANK)
    owner = list(schedule.stage_rank)
    best = none
    # A range's own parameters bound its rank's memory from below: the
    # dynamic program keeps only cuts that may fit.
    for ranges, c, result in _simulated_cuts(num_layers, schedule, costs, lambda s, i, j: costs(i, j)["parameters"],
                                             memory_limit):
        per_range = [x["parameters"] + peak * x["activations"] for x, peak in zip(c, result.peak_activations)]
        per_rank = [sum(mem for k, mem in enumerate(per_range) if owner[k] == r) for r in range(stages)]
        if memory_limit and max(per_rank) > memory_limit:
            continue
        updates = max(sum(x["update"] for k, x in enumerate(c) if owner[k] == r) for r in range(stages))
        if result.step_time + updates < best[0]:
            best = (result.step_time + updates, ranges, per_range, per_rank)
    return best


def plan_pipeline(model, loss_fn, inputs, world_size, *, cost_model=None, memory_limit=0, microbatches=None,
                  schedules=SCHEDULES, num_stages=None, _step_fn=None, _data_parallel=False):
    """Searches the pipeline plan of a training step (Note [Stage search]).

    model: an nn.Sequential (or a module whose children run one after
    another); loss_fn(output, *targets) -> a 0-d loss; inputs: (x, *targets),
    the whole batch; world_size: the ranks to plan for; memory_limit: bytes
    per rank (0: none); microbatches: the counts to try (default: divisors of
    the batch up to 32); schedules: among "1f1b", "gpipe" and
    "zero_bubble" (the default), and "interleaved_1f1b" (two stages per
    rank, stage k on the ranks of group k % S); num_stages: the count S of
    rank groups to use (default: every divisor of world_size up to the
    number of layers). Returns a dict: "num_stages" (stages, S x
    "stages_per_rank"), "data_parallel" (ranks
    per stage), "split_points" (the names of the children that begin stages
    2.., for pipelining.pipeline), "ranges", "schedule", "n_microbatches",
    "stage_times" (seconds per micro-batch), "step_time" (predicted seconds),
    "memory_per_stage" (bytes per rank), "memory_per_rank" (a rank's
    stages together), "stage_costs" (the figures of every
    layer range [i, j) at the chosen stage and micro-batch counts: "time" and
    "update" in seconds, "parameters" and "activations" in bytes per rank),
    "search_seconds" and "candidates" (the best plan of every stage count,
    micro-batch count and schedule)."""
    from meshflow.distributed import auto as _auto
    from meshflow.distributed.simulate import simulate

    start = time.perf_counter()
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"plan_pipeline: world_size must be a positive int, got {world_size!r}")
    for s in schedules:
        if s not in SCHEDULES + (INTERLEAVED,):
            raise ValueError(f"plan_pipeline: schedules must be among {SCHEDULES + (INTERLEAVED,)}, got {s!r}")
    if not isinstance(inputs, (tuple, list)) or not inputs or not isinstance(inputs[0], _mf.Tensor):
        raise ValueError("plan_pipeline: inputs must be (x, *targets) with x a tensor (the whole batch)")
    if not memory_limit >= 0:
        raise ValueError(f"plan_pipeline: memory_limit must be >= 0 bytes (0: none), got {memory_limit!r}")
    layers = _children(model)
    x, targets = inputs[0], tuple(inputs[1:])
    if x.dim() == 0 or x.shape[0] == 0:
        raise ValueError(f"plan_pipeline: x must have a batch dimension of at least one row, got shape {tuple(x.shape)}")
    batch = x.shape[0]
    counts = sorted(set(microbatches)) if microbatches is not None else [m for m in _divisors(batch) if m <= 32]
    if not counts or any((not isinstance(m, int)) or m < 1 or batch % m for m in counts):
        raise ValueError(f"plan_pipeline: micro-batch counts must divide the batch of {batch}, got {counts}")
    stage_counts = [s for s in _divisors(world_size) if s <= len(layers)]
    if num_stages is not None:
        if num_stages not in _divisors(world_size) or num_stages > len(layers):
            raise ValueError(f"plan_pipeline: num_stages must divide world_size ({world_size}) and be at most the "
                             f"number of layers ({len(layers)}), got {num_stages!r}")
        stage_counts = [num_stages]
    model_ = cost_model if cost_model is not None else _auto.cost_model()

    candidates, best = [], None
    for stages in stage_counts:
        ranks = world_size // stages
        for m in counts:
            size = batch // m
            if size % ranks:
                continue  # each stage splits its micro-batch over its ranks
            mb = [t[:size] if isinstance(t, _mf.Tensor) and t.dim() and t.shape[0] == batch else t
                  for t in (x, *targets)]
            acts = _boundaries(layers, mb[0])
            costs = _StageCosts(layers, loss_fn, acts, mb[1:], ranks, model_, simulate, _step_fn, _data_parallel)
            for schedule in schedules:
                def memory(s, i, j, schedule=schedule, m=m, stages=stages):
                    c = costs(i, j)
                    in_flight = m if schedule == "gpipe" else min(stages - s, m)
                    return c["parameters"] + in_flight * c["activations"]

                per_rank = None
                if schedule == INTERLEAVED:
                    step, ranges, per_range, per_rank = _interleaved(len(layers), stages, m, costs,
                                                                     float(memory_limit))
                    memory = (lambda s, i, j, per_range=per_range: per_range[s])
                elif schedule == "zero_bubble":
                    total, ranges, memory = _zero_bubble(len(layers), stages, m, costs, memory, float(memory_limit))
                else:
                    total, ranges = best_partition(len(layers), stages, lambda i, j: costs(i, j)["time"], memory,
                                                   float(memory_limit), m)
                if ranges is None:
                    candidates.append({"num_stages": stages * (STAGES_PER_RANK if schedule == INTERLEAVED else 1),
                                       "n_microbatches": m, "schedule": schedule, "step_time": math.inf})
                    continue
                if schedule != INTERLEAVED:
                    step = total + max(costs(i, j)["update"] for i, j in ranges)
                memory_per_stage = [memory(s, i, j) for s, (i, j) in enumerate(ranges)]
                plan = {"num_stages": len(ranges), "data_parallel": ranks, "n_microbatches": m, "schedule": schedule,
                        "stages_per_rank": len(ranges) // stages,
                        "ranges": ranges, "split_points": [layers[i][0] for i, _ in ranges[1:]],
                        "stage_times": [costs(i, j)["time"] for i, j in ranges], "step_time": step,
                        "memory_per_stage": memory_per_stage,
                        "memory_per_rank": per_rank if per_rank is not None else memory_per_stage,
                        "stage_costs": {(i, j): costs(i, j) for i in range(len(layers))
                                        for j in range(i + 1, len(layers) + 1)}}
                candidates.append({k: plan[k] for k in ("num_stages", "n_microbatches", "schedule", "step_time")})
                # Ties go to fewer stages, then fewer micro-batches, then 1F1B (less memory).
                if best is None or step < best["step_time"] * (1 - 1e-9):
                    best = plan
    if best is None:
        raise ValueError(f"plan_pipeline: no plan fits the memory limit of {memory_limit} bytes per rank on "
                         f"{world_size} ranks")
    best["candidates"] = candidates
    best["search_seconds"] = time.perf_counter() - start
    return best
