"""The auto-parallel simulator: the plan, step time, memory per rank and
communication volume that graph.config.enable_auto_parallel would give a
training step on a mesh of any size, from one process.

    python -m meshflow.distributed.simulate model.py --mesh 8x8 \\
        --gemm-tflops 300 --memory-bandwidth 2000 --interconnect 100,5

model.py defines step(), returning (model, optimizer, loss_fn, inputs):
loss_fn(model, *inputs) is the loss, and inputs are local tensors holding
the whole (global) batch. The step is traced once with every parameter
broadcast, then its op calls' signatures are derived for the mesh and
searched under the described machine (Note [Auto parallel] in
include/meshflow/distributed/auto_parallel.h; docs/auto_parallel.md).

The machine is described as follows:

- --machine FILE: a JSON cost model (meshflow.distributed.auto.to_dict's
  keys). Or:
- --gemm-tflops and --memory-bandwidth (GB/s), with --interconnect
  BANDWIDTH_GBPS,LATENCY_US. A collective over m ranks then takes a ring's
  2(m-1) (all_reduce) or m-1 steps of latency, and moves 2(m-1)/m or
  (m-1)/m of the tensor per rank at that bandwidth.
- --calibrated: this machine as calibrate() measured it.
"""
import argparse
import importlib.util
import json
import math
import sys

import meshflow as _mf
from meshflow._C import _auto_parallel as _ap
from meshflow.distributed import auto as _auto

__all__ = ["simulate", "described_machine", "main"]


def described_machine(gemm_tflops, memory_bandwidth_gbps, interconnect_gbps, latency_us, mesh_sizes,
                      op_overhead_us=5.0):
    """A cost model for a machine described by its rates: float32 GEMMs
    at gemm_tflops (float64 at half, 16-bit at twice), elementwise ops at
    memory_bandwidth_gbps, and ring collectives over each group size in
    mesh_sizes at interconnect_gbps with latency_us per step."""
    for name, v in (("gemm_tflops", gemm_tflops), ("memory_bandwidth", memory_bandwidth_gbps),
                    ("interconnect bandwidth", interconnect_gbps)):
        if not v > 0:
            raise ValueError(f"simulate: {name} must be > 0, got {v!r}")
    if latency_us < 0:
        raise ValueError(f"simulate: the interconnect latency must be >= 0 us, got {latency_us!r}")
    data = {"gemm_flops": gemm_tflops * 1e12, "gemm_flops_f64": gemm_tflops * 0.5e12,
            "gemm_flops_16": gemm_tflops * 2e12, "memory_bandwidth": memory_bandwidth_gbps * 1e9,
            "op_overhead": op_overhead_us * 1e-6, "collectives": {}}
    for kind in _auto.COLLECTIVES:
        fits = {}
        for m in sorted(set(int(x) for x in mesh_sizes if int(x) >= 2)):
            steps = 2 * (m - 1) if kind == "all_reduce" else m - 1
            factor = (2.0 if kind == "all_reduce" else 1.0) * (m - 1) / m
            # Points 4x apart, so that the model's power law between them
            # follows latency + bytes / bandwidth.
            fits[str(m)] = [[b, steps * latency_us * 1e-6 + b * factor / (interconnect_gbps * 1e9)]
                            for b in (1 << k for k in range(12, 31, 2))]
        data["collectives"][kind] = fits
    return _auto.from_dict(data)


def _mesh(shape):
    sizes = [int(s) for s in shape]
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError(f"simulate: a mesh needs sizes >= 1, got {shape!r}")
    ranks = list(range(math.prod(sizes)))

    def nest(rs, dims):
        if len(dims) == 1:
            return rs
        step = len(rs) // dims[0]
        return [nest(rs[i * step:(i + 1) * step], dims[1:]) for i in range(dims[0])]
    return _mf.placement("cpu", nest(ranks, sizes))


class _Step(_mf.nn.Graph):
    def __init__(self, model, optimizer, loss_fn, backward=True):
        super().__init__()
        self.model = model
        if optimizer is not None:
            self.add_optimizer(optimizer)
        self.loss_fn = loss_fn
        self.backward = backward

    def build(self, *inputs):
        loss = self.loss_fn(self.model, *inputs)
        if self.backward:
            loss.backward()
        return loss


def simulate(model, optimizer, loss_fn, inputs, mesh, cost_model=None, memory_limit=0, input_sbp=None,
             _backward=True, _input_parameters=None, _data_parallel=False):
    """The searched plan of this training step on `mesh` (a tuple of mesh
    sizes, e.g. (8, 8)) as cost_report's dict, plus "mesh" and
    "communication_bytes_per_step". inputs are the whole batch; input_sbp
    (default: split(0) on every mesh axis) is how it arrives. Runs in one
    process, or under the launcher on every rank alike (each traces the
    step on rank 0's one-rank placement); the model's parameters become
    global tensors there."""
    virtual = _mesh(mesh)
    one = _mf.placement("cpu", [0])
    sbp = input_sbp or [_mf.sbp.split(0)] * len(virtual.hierarchy)
    if len(set(map(str, sbp))) != 1:
        raise ValueError("simulate: input_sbp must be the same on every mesh axis (the trace runs on one rank)")
    graph = _Step(model, optimizer, loss_fn, _backward)
    traced = [x.to_global(placement=one, sbp=sbp[0]) if isinstance(x, _mf.Tensor) else x for x in inputs]
    log, _, _, names, _ = _auto._log_step(graph, traced, pin_all=_data_parallel)
    log.release_tensors()
    model_ = cost_model if cost_model is not None else _auto.cost_model()
    big = _ap.remesh(log, virtual)
    if _input_parameters is None:
        plan = _auto._search(big, model_, float(memory_limit))  # calibrate()'s model: its measured op rates
    else:
        plan = _ap.search(big, model_, float(memory_limit))
    record = {"log": big, "plan": plan, "model": model_, "names": names, "placement": virtual}
    object.__setattr__(graph, "_auto_parallel", record)
    report = _auto.cost_report(graph)
    report["mesh"] = tuple(int(m) for m in mesh)
    if _input_parameters is not None:
        # Each call's part of a pipeline stage's step (Note [Pipeline parts
        # of calls]): the gradients of these parameters stand for the
        # stage's input gradient.
        sources = [s for s in range(big.num_sources) if big.source_name(s) in _input_parameters]
        for row, part in zip(report["calls"], _ap.call_parts(big, sources)):
            row["part"] = part
    return report


def _load(path):
    spec = importlib.util.spec_from_file_location("simulated_model", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"simulate: {path} is not a Python file (expected model.py defining step())")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "step"):
        raise ValueError(f"simulate: {path} must define step() returning (model, optimizer, loss_fn, inputs)")
    return module.step()


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m meshflow.distributed.simulate", description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a Python file defining step() -> (model, optimizer, loss_fn, inputs)")
    p.add_argument("--mesh", required=True, help="mesh sizes, e.g. 8 or 8x8")
    p.add_argument("--machine", help="a JSON cost model (meshflow.distributed.auto.to_dict's keys)")
    p.add_argument("--calibrated", action="store_true", help="this machine, as calibrate() measured it")
    p.add_argument("--gemm-tflops", type=float, help="float32 GEMM TFLOP/s of one device")
    p.add_argument("--memory-bandwidth", type=float, help="GB/s of one device's elementwise ops")
    p.add_argument("--interconnect", help="BANDWIDTH_GBPS,LATENCY_US of the collectives")
    p.add_argument("--memory-limit", type=float, default=0, help="bytes per rank the plan may keep")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    try:
        mesh = [int(x) for x in args.mesh.lower().split("x")]
    except ValueError:
        mesh = []
    if not mesh or any(m < 1 for m in mesh):
        p.error(f"--mesh: expected sizes >= 1 like 8 or 8x8, got {args.mesh!r}")
    if args.machine:
        with open(args.machine) as f:
            cost = _auto.from_dict(json.load(f))
    elif args.calibrated:
        cost = _auto.calibrate()
    else:
        if args.gemm_tflops is None or args.memory_bandwidth is None or args.interconnect is None:
            p.error("describe the machine: --machine FILE, --calibrated, or --gemm-tflops, --memory-bandwidth "
                    "and --interconnect")
        try:
            bandwidth, latency = (float(v) for v in args.interconnect.split(","))
        except ValueError:
            p.error(f"--interconnect: expected BANDWIDTH_GBPS,LATENCY_US, got {args.interconnect!r}")
        cost = described_machine(args.gemm_tflops, args.memory_bandwidth, bandwidth, latency, mesh)
    model, optimizer, loss_fn, inputs = _load(args.model)
    report = simulate(model, optimizer, loss_fn, inputs, mesh, cost, args.memory_limit)
    if args.json:
        out = dict(report)
        out["placement"] = str(out["placement"])
        out["parameters"] = [dict(q, sbp=_auto._sbp_str(q["sbp"])) for q in out["parameters"]]
        out["peak_values"] = [dict(v, sbp=None if v["sbp"] is None else _auto._sbp_str(v["sbp"]))
                              for v in out["peak_values"]]
        out["calls"] = len(out["calls"])
        print(json.dumps(out, indent=1))
        return 0
    print(f"mesh {'x'.join(map(str, mesh))}: predicted step {report['step_time'] * 1e3:.3f} ms "
          f"(compute {report['compute_time'] * 1e3:.3f} ms, communication {report['communication_time'] * 1e3:.3f} ms); "
          f"communication {report['communication_bytes'] / 2**20:.2f} MiB per rank per step; memory per rank "
          f"{report['memory'] / 2**20:.2f} MiB (parameters and optimizer state {report['parameter_memory'] / 2**20:.2f} "
          f"MiB){'' if report['memory_limit_met'] else '; the memory limit could not be met'}; "
          f"searched in {report['search_seconds'] * 1e3:.1f} ms")
    for q in report["parameters"]:
        print(f"  {q['name']:<40} {str(q['shape']):<16} {_auto._sbp_str(q['sbp'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
