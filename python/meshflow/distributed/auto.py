"""Automatic parallelism: the cost model, its calibration, and the reports
of graph mode's strategy search (graph.config.enable_auto_parallel).

    model = build_model()                          # written for one device
    g = TrainGraph(model, optimizer)
    g.config.enable_auto_parallel(True)
    g.config.set_auto_parallel_memory_limit(2 << 30)   # optional
    loss = g(x_global, y_global)                   # traced, searched, compiled
    print(g.auto_parallel_report())

The search (Note [Auto parallel] in include/meshflow/distributed/
auto_parallel.h) costs each op call's signature from its FLOPs and bytes at
the rates `calibrate()` measured here (the measurements are in
meshflow.distributed.calibration), and each boxing by a fitted
alpha-beta model of the local MPI's collectives. See docs/auto_parallel.md.
"""
import json
import os
import tempfile

import meshflow as _mf
from meshflow.utils.collect_env import _cpu_model
from meshflow._C import _auto_parallel as _ap
from meshflow.distributed.calibration import (COLLECTIVES, collective_time, measure_collectives, measure_step,
                                              validate_collectives, _measure_collectives, _measure_compute,
                                              _measure_sync_latency)

__all__ = ["CostModel", "calibrate", "cost_model", "set_cost_model", "cost_report", "COLLECTIVES", "plan_pipeline",
           "best_partition", "measure_step", "validate_collectives", "collective_time", "measure_collectives"]

CostModel = _ap.CostModel

_current = None  # the cost model the searches use (set_cost_model / calibrate)
_calibrated = None  # calibrate()'s last model: this machine's, which measures its ops' rates


def _cache_path(world):
    root = os.environ.get("MESHFLOW_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "meshflow")
    key = f"{_cpu_model()}|threads={_mf.get_num_threads()}|world={world}|v10"
    import zlib
    return os.path.join(root, f"cost_model_{zlib.crc32(key.encode()):08x}.json")


def to_dict(model):
    """The cost model as plain data (JSON-able)."""
    return {
        "gemm_flops": model.gemm_flops, "gemm_flops_f64": model.gemm_flops_f64,
        "gemm_flops_16": model.gemm_flops_16, "gemm_half_intensity": model.gemm_half_intensity,
        "conv_efficiency": model.conv_efficiency, "attention_efficiency": model.attention_efficiency,
        "memory_bandwidth": model.memory_bandwidth, "transpose_bandwidth": model.transpose_bandwidth,
        "op_overhead": model.op_overhead, "sync_latency": model.sync_latency,
        "op_bandwidth": dict(model.op_bandwidth),
        "collectives": {kind: {str(m): [list(p) for p in points] for m, points in fits.items()}
                        for kind, fits in model.collectives().items()},
    }


def from_dict(d):
    """A cost model from to_dict's data (a device/network description for
    the simulator has the same keys)."""
    model = CostModel()
    for key in ("gemm_flops", "gemm_flops_f64", "gemm_flops_16", "gemm_half_intensity", "conv_efficiency",
                "attention_efficiency", "memory_bandwidth", "transpose_bandwidth", "op_overhead", "sync_latency"):
        if key in d:
            value = float(d[key])
            least = ">= 0" if key in ("op_overhead", "gemm_half_intensity", "transpose_bandwidth",
                                      "sync_latency") else "> 0"
            if not (value >= 0 if least == ">= 0" else value > 0):
                raise ValueError(f"cost model: {key} must be {least}, got {d[key]!r}")
            setattr(model, key, value)
    rates = d.get("op_bandwidth", {})
    if not isinstance(rates, dict) or not all(isinstance(k, str) and float(v) > 0 for k, v in rates.items()):
        raise ValueError(f"cost model: op_bandwidth must map op names to bytes/s > 0, got {rates!r}")
    model.op_bandwidth = {k: float(v) for k, v in rates.items()}
    for kind, fits in d.get("collectives", {}).items():
        for m, points in fits.items():
            model.set_collective(kind, int(m), [(float(b), float(t)) for b, t in points])
    return model


def calibrate(force=False):
    """Measures this machine's rates (GEMM per dtype, elementwise bandwidth,
    per-op overhead; sustained by every rank at once, Note [Sustained
    rates]) and, under the launcher, the collectives'
    times on the local MPI and the latency a collective adds inside a step
    (Note [Sync latency]); every rank gets rank 0's numbers. The
    result is cached per CPU model, thread count and world size
    ($MESHFLOW_CACHE_DIR or ~/.cache/meshflow) and becomes the model the
    searches use. Collective over the world when it has more than one
    rank."""
    global _current, _calibrated
    dist = _mf.distributed
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    path = _cache_path(world)
    data = None
    if not force and rank == 0 and os.path.exists(path):
        try:
            with open(path) as f:
                data = json.load(f)
            from_dict(data)
        except (OSError, ValueError, TypeError, KeyError):
            data = None  # a damaged cache is measured again
    if world > 1:
        box = [data]
        dist.broadcast_object_list(box, src=0)
        data = box[0]
    if data is None:
        # Collectives first: the GEMM libraries' threads may spin for a
        # while after a GEMM, slowing the collectives measured after it.
        collectives = _measure_collectives() if world > 1 else {}
        data = _measure_compute()
        data["collectives"] = collectives
        data["sync_latency"] = _measure_sync_latency() if world > 1 else 0.0
        if world > 1:
            box = [data]
            dist.broadcast_object_list(box, src=0)
            data = box[0]
        if rank == 0:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".cost_model.")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, path)
    _current = _calibrated = from_dict(data)
    return _current


def cost_model():
    """The cost model the searches use: set_cost_model's, else calibrate()'s."""
    return _current if _current is not None else calibrate()


def set_cost_model(model):
    """Makes `model` (a CostModel or to_dict's data) the one the searches use."""
    global _current
    _current = model if isinstance(model, CostModel) else from_dict(model)
    return _current


# --- graph mode ---------------------------------------------------------------------------

def _placement_of(graph, args):
    for a in args:
        if isinstance(a, _mf.Tensor) and a.is_global:
            return a.placement
    for _, module in graph._modules():
        for p in module.parameters():
            if p.is_global:
                return p.placement
    raise ValueError(f"{type(graph).__name__}: enable_auto_parallel needs a placement to plan on: pass global "
                     "inputs (tensor.to_global(placement, sbp)) or lay the model out on one")


def _log_step(graph, args, pin_all=False):
    """The first trace: every free parameter broadcast on the graph's
    placement, each global op call logged (pin_all: every parameter keeps
    its layout, data parallelism for broadcast ones). Returns (log,
    placement, params, names, pinned)."""
    placement = _placement_of(graph, args)
    B = [_mf.sbp.broadcast] * len(placement.hierarchy)
    modules = graph._modules()
    ignore_user = graph.config.auto_parallel_ignore_user_sbp
    # Layouts an earlier search of this graph chose are not the user's.
    chosen_before = getattr(graph, "_auto_laid_out", set())
    params, names, pinned = [], [], []
    seen = set()
    with _mf.no_grad():
        for prefix, module in modules:
            for name, p in module.named_parameters():
                if id(p) in seen:
                    continue
                seen.add(id(p))
                if not p.is_global:
                    p.data = p.detach().to_global(placement=placement, sbp=B)
                elif p.placement != placement:
                    raise ValueError(f"{type(graph).__name__}: parameter {prefix}.{name} is on {p.placement} but "
                                     f"the graph's inputs on {placement}; auto parallel plans one placement")
                user = any(s != _mf.sbp.broadcast for s in p.sbp) and id(p) not in chosen_before
                params.append(p)
                names.append(f"{prefix}.{name}")
                pinned.append(pin_all or (user and not ignore_user))
            for name, b in module.named_buffers():
                if b is not None and not b.is_global:
                    b.data = b.detach().to_global(placement=placement, sbp=B)
        # Free parameters start broadcast (pinned ones keep their layouts).
        for p, pin in zip(params, pinned):
            if not pin and any(s != _mf.sbp.broadcast for s in p.sbp):
                p.data = p.detach().to_global(placement=placement, sbp=B)
        for optimizer, _ in graph._optimizers:
            optimizer._set_zero(0, 0)
    log = _ap.CallLog()

    def register():
        states = {}
        for optimizer, _ in graph._optimizers:
            sd = optimizer.state_dict()
            index = 0
            for group in optimizer.param_groups:
                for p in group["params"]:
                    entry = sd["state"].get(index, {})
                    states.setdefault(id(p), []).extend(
                        t for t in entry.values() if isinstance(t, _mf.Tensor) and tuple(t.shape) == tuple(p.shape))
                    index += 1
        for p, name, pin in zip(params, names, pinned):
            tied = states.get(id(p), [])
            # The parameter and its optimizer state; its gradient is a value
            # of the step, live from backward to the update.
            s = log.add_source(p, name, pin, 1 + len(tied))
            for t in tied:
                log.tie(t, s)

    with _ap.LogCalls(log):
        graph._trace(args, None, on_state=register,
                     on_inputs=lambda inputs: [log.add_input(t) for t in inputs if isinstance(t, _mf.Tensor)])
    return log, placement, params, names, pinned


def _search(log, model, memory_limit):
    """The search, under calibrate()'s model with the log's memory-bound
    calls measured (Note [Measured op rates]): a first plan (unmeasured
    calls at the model's bandwidths) gives the shapes each rank runs, its
    calls are measured on those shapes, and the search runs again. Under
    the launcher every rank calls this alike and takes rank 0's rates. A
    described machine (set_cost_model) is left as given."""
    plan = _ap.search(log, model, memory_limit)
    if model is not _calibrated:
        return plan
    measured = _ap.measure_op_rates(log, model, 0.005, plan)
    dist = _mf.distributed
    if dist.is_initialized() and dist.get_world_size() > 1:
        box = [dict(model.op_bandwidth), measured]
        dist.broadcast_object_list(box, src=0)
        model.op_bandwidth, measured = box
    return _ap.search(log, model, memory_limit) if measured else plan


def _plan_graph(graph, args):
    """The first trace (logged), the search, and the parameters moved to
    the chosen layouts. Returns the plan's record for the second trace."""
    chosen_before = getattr(graph, "_auto_laid_out", set())
    log, placement, params, names, pinned = _log_step(graph, args)
    model = cost_model()
    plan = _search(log, model, graph.config.auto_parallel_memory_limit)
    log.release_tensors()  # the old parameters' replicas are freed when moved
    with _mf.no_grad():
        for p, layout in zip(params, plan.sources):
            if tuple(p.sbp) != tuple(layout):
                p.data = p.detach().to_global(placement=placement, sbp=list(layout))
        for optimizer, _ in graph._optimizers:
            optimizer._set_zero(0, 0)
    object.__setattr__(graph, "_auto_laid_out", chosen_before | {id(p) for p, pin in zip(params, pinned) if not pin})
    record = {"log": log, "plan": plan, "model": model, "names": names, "placement": placement}
    object.__setattr__(graph, "_auto_parallel", record)
    return record


def _plan_graph_stages(graph, args):
    """Note [Searched stages in graph mode]: with enable_auto_parallel_pipeline,
    the first compile asks plan_pipeline (Note [Stage search]) for the best
    plan without stages (one stage over the whole placement: the SBP
    search's prediction) and the best with S stages for each S >= 2 that
    divides the ranks (or the num_stages asked for), each stage data
    parallel over its world / S ranks, from the same cost model. The model
    is the graph's one module with children; a copy of it, with whole local
    parameters, is planned on whole local inputs. The last stage's step is
    the graph's own build() with that stage standing in for the module, so
    the loss is the graph's. When the pipeline is predicted faster, each
    child moves to its stage's ranks (set_stage; broadcast there), the
    graph takes the plan's micro-batch count and schedule, and the trace
    moves build()'s inputs after the first (the targets) to the last stage
    and each stage's inputs to it (split along the batch over a stage's
    ranks). Rank 0's plan is every rank's. Returns whether stages were
    placed."""
    import copy
    name = type(graph).__name__
    placement = _placement_of(graph, args)
    if len(placement.hierarchy) != 1:
        raise ValueError(f"{name}: enable_auto_parallel_pipeline places stages over the ranks of a 1-D placement, got "
                         f"{placement}")
    from meshflow.nn.graph import GraphModule, _ranks
    ranks = _ranks(placement)
    if len(ranks) < 2:
        return False
    wanted = graph.config.auto_parallel_pipeline_stages
    if wanted is not None and len(ranks) % wanted:
        raise ValueError(f"{name}: enable_auto_parallel_pipeline(num_stages={wanted}) must divide the "
                         f"{len(ranks)} ranks of {placement}")
    owners = [(attr, m) for attr, m in graph._modules() if any(True for _ in m.children())]
    if len(owners) != 1:
        raise ValueError(f"{name}: enable_auto_parallel_pipeline cuts the graph's one module whose children run one "
                         f"after another (an nn.Sequential); the graph has {len(owners)} modules with children")
    attr, module = owners[0]
    layers = list(module.named_children())
    counts = [wanted] if wanted is not None else [c for c in range(2, len(ranks) + 1) if len(ranks) % c == 0]
    counts = [c for c in counts if c <= len(layers)]
    if not counts:
        return False  # fewer layers than stages
    for p in list(module.parameters()) + list(module.buffers()):
        if p.is_global and (not p.placement == placement or any(x != _mf.sbp.broadcast for x in p.sbp)):
            raise ValueError(f"{name}: enable_auto_parallel_pipeline moves whole parameters to their stages; a "
                             f"parameter is {tuple(p.sbp)} on {p.placement} (lay the model out broadcast on "
                             f"{placement} or leave it local)")

    def whole(t):
        if not isinstance(t, _mf.Tensor) or not t.is_global:
            return t
        return t.to_global(sbp=[_mf.sbp.broadcast] * len(t.placement.hierarchy)).to_local()

    local = copy.deepcopy(module)
    with _mf.no_grad():
        for t in list(local.parameters()) + list(local.buffers()):
            if t.is_global:
                t.data = whole(t.detach())
    inputs = tuple(whole(a) for a in args)

    def step(stage, x, *targets):
        saved = graph.__dict__[attr]
        object.__setattr__(graph, attr, stage)
        try:
            out = type(graph).build(graph, x, *targets)
        finally:
            object.__setattr__(graph, attr, saved)
        return out[0] if isinstance(out, (tuple, list)) else out

    def loss_unused(output, *targets):
        raise AssertionError("the last stage runs build()")

    model = cost_model()
    limit = graph.config.auto_parallel_memory_limit
    flat = plan_pipeline(local, loss_unused, inputs, len(ranks), cost_model=model, memory_limit=limit,
                         microbatches=[1], num_stages=1, _step_fn=step)
    # Each stage data parallel over its ranks (the parameters broadcast there).
    piped = None
    for count in counts:
        plan = plan_pipeline(local, loss_unused, inputs, len(ranks), cost_model=model, memory_limit=limit,
                             num_stages=count, _step_fn=step, _data_parallel=True)
        if piped is None or plan["step_time"] < piped["step_time"] * (1 - 1e-9):
            piped = plan
    record = {"plan": piped, "unpipelined_step_time": flat["step_time"], "placement": placement,
              "module": attr, "layers": [n for n, _ in layers], "model": model}
    # Rank 0's plan is every rank's: the others trace the one-rank stage
    # meshes without a part of their own, and their figures may differ by
    # an op's overhead, enough to break a near tie differently.
    box = [(piped, flat["step_time"])]
    _mf.distributed.broadcast_object_list(box, src=0)
    piped, record["unpipelined_step_time"] = box[0]
    record["plan"] = piped
    object.__setattr__(graph, "_auto_stage_search", record)
    if not piped["step_time"] < record["unpipelined_step_time"]:
        return False
    B = [_mf.sbp.broadcast]
    per_stage = piped["data_parallel"]
    with _mf.no_grad():
        for s, (i, j) in enumerate(piped["ranges"]):
            stage = _mf.placement(placement.type, ranks[s * per_stage:(s + 1) * per_stage])
            for _, layer in layers[i:j]:
                for t in list(layer.parameters()) + list(layer.buffers()):
                    t.data = t.detach().to_global(placement=stage, sbp=B)
                layer.to(GraphModule).set_stage(s, stage)
    for optimizer, _ in graph._optimizers:
        optimizer._set_zero(0, 0)
    graph.config.set_gradient_accumulation_steps(piped["n_microbatches"])
    graph.config.set_pipeline_schedule(piped["schedule"])
    object.__setattr__(graph, "_auto_pipeline", record)
    object.__setattr__(graph, "_auto_parallel", None)
    return True


def _follow(record):
    guard = _ap.FollowPlan(record["plan"])
    record["guard"] = guard
    return guard


def _check_followed(graph, guard):
    record = graph._auto_parallel
    plan = record["plan"]
    if guard.followed != plan.num_calls:
        raise RuntimeError(f"{type(graph).__name__}: auto parallel: the compiled step made {guard.followed} global "
                           f"op calls but the planned step {plan.num_calls}; build() must make the same calls on "
                           "every trace")


def _one_sbp(s):
    if s == _mf.sbp.broadcast:
        return "B"
    if s == _mf.sbp.partial_sum:
        return "P"
    return f"S({s.axis})"


def _sbp_str(layout):
    if layout is None:
        return "-"
    return "(" + ", ".join(_one_sbp(s) for s in layout) + ")"


def cost_report(graph):
    """The plan the last auto-parallel compile of `graph` chose, as data:
    {"calls": [{op, input_shapes, inputs, outputs, compute, boxing,
    boxing_bytes, collectives}, ...], "parameters": [{name, shape, sbp}],
    "step_time", "compute_time", "communication_time",
    "communication_bytes", "memory", "parameter_memory", "peak_values",
    "search_seconds", "memory_limit_met", "cost_model"} (times in seconds,
    memory in bytes per rank). peak_values are the step's values held
    where its predicted live bytes peak: [{value, op and call (the call
    making it; None for an input of the step), shape (whole), dtype,
    sbp}]; with boxing's copies at that call they make up the peak."""
    staged = getattr(graph, "_auto_pipeline", None)
    if staged is not None:
        plan = staged["plan"]
        per_stage, everyone = plan["data_parallel"], _ranks_of(staged["placement"])
        stages = [{"stage": s, "ranks": everyone[s * per_stage:(s + 1) * per_stage],
                   "layers": staged["layers"][i:j], "time": t, "memory": mem}
                  for s, ((i, j), t, mem) in enumerate(zip(plan["ranges"], plan["stage_times"],
                                                           plan["memory_per_stage"]))]
        return {"pipeline": {"num_stages": plan["num_stages"], "schedule": plan["schedule"],
                             "n_microbatches": plan["n_microbatches"], "split_points": plan["split_points"],
                             "stages": stages, "candidates": plan["candidates"]},
                "placement": staged["placement"], "step_time": plan["step_time"],
                "unpipelined_step_time": staged["unpipelined_step_time"], "memory": max(plan["memory_per_stage"]),
                "search_seconds": plan["search_seconds"], "cost_model": to_dict(staged["model"])}
    record = getattr(graph, "_auto_parallel", None)
    if record is None:
        raise ValueError(f"cost_report: {type(graph).__name__} has no auto-parallel plan; enable "
                         "graph.config.enable_auto_parallel() and call the graph first")
    log, plan, model = record["log"], record["plan"], record["model"]
    params = [{"name": record["names"][s], "shape": tuple(log.source_shape(s)), "sbp": tuple(plan.sources[s])}
              for s in range(log.num_sources)]
    calls = _ap.report(log, model, plan)
    return {
        "calls": calls, "parameters": params, "placement": record["placement"],
        "step_time": plan.step_time, "compute_time": plan.compute_time,
        "communication_time": plan.communication_time, "communication_bytes": plan.communication_bytes,
        "memory": plan.memory, "parameter_memory": plan.parameter_memory, "peak_values": _peak_values(log, plan, calls),
        "search_seconds": plan.search_seconds,
        "memory_limit_met": plan.memory_limit_met, "cost_model": to_dict(model),
    }


def _peak_values(log, plan, calls):
    out = []
    for v in plan.peak_values:
        kind, node, index, shape, dtype = log.value(v)
        call = node if kind == "output" else None
        out.append({"value": v, "op": None if call is None else calls[call]["op"], "call": call,
                    "shape": tuple(shape), "dtype": dtype,
                    "sbp": None if call is None else calls[call]["outputs"][index]})
    return out


def _ranks_of(placement):
    from meshflow.nn.graph import _ranks
    return _ranks(placement)


def _report_table(graph):
    r = cost_report(graph)
    if "pipeline" in r:
        pipe = r["pipeline"]
        lines = [f"auto parallel pipeline on {r['placement']}: {pipe['num_stages']} stages, schedule "
                 f"{pipe['schedule']!r}, {pipe['n_microbatches']} micro-batches",
                 f"{'stage':>5}  {'ranks':>8}  {'ms per micro-batch':>18}  {'MiB':>8}  layers"]
        for st in pipe["stages"]:
            ranks = ",".join(map(str, st["ranks"]))
            lines.append(f"{st['stage']:>5}  {ranks:>8}  {st['time'] * 1e3:>18.3f}  {st['memory'] / 2**20:>8.2f}  "
                         + ", ".join(st["layers"]))
        lines.append(f"predicted step {r['step_time'] * 1e3:.3f} ms (without stages: "
                     f"{r['unpipelined_step_time'] * 1e3:.3f} ms); memory per rank {r['memory'] / 2**20:.2f} MiB; "
                     f"searched in {r['search_seconds'] * 1e3:.1f} ms")
        return "\n".join(lines)
    lines = [f"auto parallel plan on {r['placement']}",
             f"{'#':>4}  {'op':<24} {'signature':<44} {'compute ms':>10} {'boxing ms':>9}  boxing"]
    for i, c in enumerate(r["calls"]):
        sig = ", ".join(_sbp_str(x) for x in c["inputs"]) + " -> " + ", ".join(_sbp_str(x) for x in c["outputs"])
        lines.append(f"{i:>4}  {c['op']:<24} {sig:<44} {c['compute'] * 1e3:>10.3f} {c['boxing'] * 1e3:>9.3f}  "
                     + "; ".join(c["collectives"]))
    lines.append("parameters:")
    for p in r["parameters"]:
        lines.append(f"  {p['name']:<40} {str(p['shape']):<16} {_sbp_str(p['sbp'])}")
    lines.append(f"predicted step {r['step_time'] * 1e3:.3f} ms (compute {r['compute_time'] * 1e3:.3f} ms, "
                 f"communication {r['communication_time'] * 1e3:.3f} ms, {r['communication_bytes'] / 2**20:.2f} MiB "
                 f"per rank); memory per rank {r['memory'] / 2**20:.2f} MiB (parameters and optimizer state "
                 f"{r['parameter_memory'] / 2**20:.2f} MiB); searched in {r['search_seconds'] * 1e3:.1f} ms"
                 + ("" if r["memory_limit_met"] else "; the memory limit could not be met"))
    return "\n".join(lines)


# Stage search for pipeline parallelism (Note [Stage search]).
from meshflow.distributed.auto_pipeline import best_partition, plan_pipeline  # noqa: E402
