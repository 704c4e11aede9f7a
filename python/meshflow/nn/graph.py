"""meshflow.nn.Graph: graph mode, as OneFlow's nn.Graph.

    class TrainGraph(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(opt, lr_sch=scheduler)

        def build(self, x, y):
            loss = loss_fn(self.model(x), y)
            loss.backward()
            return loss

    g = TrainGraph()
    loss = g(x, y)          # the first call per input signature traces and compiles

build() runs once per input signature (shapes, dtypes, devices, the
modules' training flags, which parameters require grad) in lazy mode: every op, its backward, and the
update of each optimizer given to add_optimizer are recorded into a graph
IR (the optimizers' step() and zero_grad() are called by the graph, not in
build()). The IR is optimized and lowered to a plan that later calls run
without Python. Parameters, buffers and optimizer state stay in the
modules and optimizers, so eager steps and graph steps can alternate.
`g.config.enable_amp(True, dtype=mf.bfloat16)` traces build() under
autocast, so the IR holds the casts of the autocast lists, and
`g.set_grad_scaler(mf.amp.GradScaler())` scales the loss and skips the
updates of steps with inf/NaN gradients inside the plan (docs/amp.md).
Global tensors (placement + SBP) work as in eager mode: the IR holds the
boxing's communication nodes, and global inputs and outputs stay global.
See docs/graph.md.
"""
import contextlib

from meshflow._C import Tensor, _graph, _modules, bfloat16, float16
from meshflow._C import sbp as _sbp

__all__ = ["Graph", "GraphConfig", "GraphModule"]


class GraphModule:
    """The graph-mode settings of one submodule, as OneFlow's
    nn.graph.GraphModule. In a Graph's __init__:

        self.model.blocks[0].to(mf.nn.graph.GraphModule).activation_checkpointing = True

    makes the traced step recompute that module's forward in backward
    instead of keeping its activations (utils.checkpoint while tracing: the
    recomputation is recorded just before the module's first backward op,
    and the graph's passes keep it apart from the forward, Note [Recomputed
    nodes] in include/meshflow/graph/ir.h). Settings live with the module
    and apply to every Graph that runs it."""

    def __init__(self, module):
        self._module = module
        self.activation_checkpointing = False
        self._stage = None  # (stage_id, placement) once set_stage is called

    @property
    def module(self):
        return self._module

    def set_stage(self, stage_id, placement=None):
        """Makes the module pipeline stage `stage_id` (OneFlow's
        GraphModule.set_stage): its parameters must be global tensors on
        `placement`, and its inputs must arrive there (x.to_global(placement=
        ..., sbp=...)). Every Graph that runs the module pipelines it by the
        graph's schedule (config.set_pipeline_schedule) over the micro-batches
        of config.set_gradient_accumulation_steps (docs/pipeline.md)."""
        from meshflow._C import placement as _placement_type
        if isinstance(stage_id, bool) or not isinstance(stage_id, int) or stage_id < 0:
            raise ValueError(f"set_stage: stage_id must be an int >= 0, got {stage_id!r}")
        if placement is None:
            placement = _placement_of_parameters(self._module, stage_id)
        if not isinstance(placement, _placement_type):
            raise TypeError(f"set_stage: placement must be a meshflow.placement, got {type(placement).__name__}")
        object.__setattr__(self, "_stage", (stage_id, placement))
        return self

    @property
    def stage_id(self):
        return None if self._stage is None else self._stage[0]

    def __setattr__(self, name, value):
        if name == "activation_checkpointing":
            if not isinstance(value, bool):
                raise TypeError(f"GraphModule.activation_checkpointing must be a bool, got {type(value).__name__}")
        elif not name.startswith("_"):
            raise AttributeError(f"GraphModule has no setting {name!r}")
        object.__setattr__(self, name, value)

    def __repr__(self):
        stage = "" if self._stage is None else f", stage={self._stage[0]}, placement={self._stage[1]}"
        return (f"GraphModule({type(self._module).__name__}, "
                f"activation_checkpointing={self.activation_checkpointing}{stage})")


def _placement_of_parameters(module, stage_id):
    placements = {repr(p.placement): p.placement for p in module.parameters() if p.is_global}
    if len(placements) != 1:
        raise ValueError(f"set_stage({stage_id}): give the stage's placement (its module has parameters on "
                         f"{len(placements)} placements)")
    return next(iter(placements.values()))


def _settings(module, create=False):
    settings = module.__dict__.get("_graph_module")
    if settings is None and create:
        settings = GraphModule(module)
        module.__dict__["_graph_module"] = settings
    return settings


_module_to = _modules.Module.to


def _to(self, *args, **kwargs):
    """Module.to(GraphModule) gives the module's graph settings (OneFlow);
    any other argument converts it as before."""
    if len(args) == 1 and not kwargs and args[0] is GraphModule:
        return _settings(self, create=True)
    return _module_to(self, *args, **kwargs)


_to.__doc__ = (_module_to.__doc__ or "") + "\n\nmodule.to(meshflow.nn.graph.GraphModule): its graph-mode settings."
_modules.Module.to = _to


@contextlib.contextmanager
def _checkpointed_forwards(modules):
    """While tracing: the forward of each (sub)module whose GraphModule asks
    for activation checkpointing runs under utils.checkpoint."""
    from meshflow.utils.checkpoint import checkpoint
    patched = []
    try:
        for root in modules:
            for module in root.modules():
                settings = _settings(module)
                if settings is None or not settings.activation_checkpointing or "forward" in module.__dict__:
                    continue
                forward = module.forward

                def checkpointed(*args, _forward=forward, **kwargs):
                    return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

                module.forward = checkpointed
                patched.append(module)
        yield
    finally:
        for module in patched:
            del module.forward


_SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "zbv")


def _pipeline_stages(modules):
    """[(stage_id, placement, module)] of the modules marked with set_stage
    among these modules' submodules, sorted by id (a stage may have several:
    OneFlow marks each layer)."""
    stages, seen = [], set()
    for root in modules:
        for module in root.modules():
            settings = _settings(module)
            if settings is None or settings._stage is None or id(module) in seen:
                continue
            seen.add(id(module))
            stages.append((settings._stage[0], settings._stage[1], module))
    return sorted(stages, key=lambda s: s[0])


def _ranks(placement):
    """A placement's ranks as a flat list."""
    out, todo = [], [placement.ranks]
    while todo:
        r = todo.pop()
        if isinstance(r, list):
            todo.extend(reversed(r))
        else:
            out.append(r)
    return out


class _Pipeline:
    """A graph's stages laid out for its schedule: the checks of bad input
    (every rank reaches the same verdict: they see the same modules)."""

    def __init__(self, name, modules, kind, m):
        from meshflow.distributed import get_rank
        by_id = {}
        for stage_id, placement, module in modules:
            if stage_id in by_id and not by_id[stage_id][0] == placement:
                raise ValueError(f"{name}: pipeline stage id {stage_id} is used twice, on {by_id[stage_id][0]} "
                                 f"({type(by_id[stage_id][1][0]).__name__}) and on {placement} "
                                 f"({type(module).__name__}); a stage's modules share one placement")
            by_id.setdefault(stage_id, (placement, []))[1].append(module)
        ids = sorted(by_id)
        if ids != list(range(len(ids))):
            raise ValueError(f"{name}: pipeline stage ids must be 0, 1, ..., {len(ids) - 1}; got {ids}")
        stages = [(s, by_id[s][0], by_id[s][1]) for s in ids]
        placements = []  # distinct, in order of first stage
        for _, p, _ in stages:
            if not any(p == q for q in placements):
                placements.append(p)
        for i, p in enumerate(placements):
            for q in placements[i + 1:]:
                shared = set(_ranks(p)) & set(_ranks(q))
                if shared:
                    raise ValueError(f"{name}: the placements of pipeline stages must be equal or disjoint; {p} and "
                                     f"{q} share ranks {sorted(shared)}")
        num_stages, p = len(stages), len(placements)
        if kind in ("gpipe", "1f1b", "zero_bubble"):
            if p != num_stages:
                first = next(q for q in placements if sum(s[1] == q for s in stages) > 1)
                twice = [s[0] for s in stages if s[1] == first]
                raise ValueError(f"{name}: stages {twice} are on one placement {first}; schedule {kind!r} runs one "
                                 "stage per placement (use 'interleaved_1f1b' or 'zbv' for several stages per rank)")
            rank_of = list(range(num_stages))
        elif kind == "interleaved_1f1b":
            if num_stages % p:
                raise ValueError(f"{name}: 'interleaved_1f1b' needs the same number of stages on each placement; "
                                 f"{num_stages} stages on {p} placements")
            rank_of = [s % p for s in range(num_stages)]
        else:  # zbv: stage s and 2p-1-s on one placement
            if num_stages != 2 * p:
                raise ValueError(f"{name}: 'zbv' needs two stages per placement, got {num_stages} stages on {p}")
            rank_of = [s if s < p else 2 * p - 1 - s for s in range(num_stages)]
        for s, placement, _ in stages:
            if not placement == placements[rank_of[s]]:
                raise ValueError(f"{name}: schedule {kind!r} puts stage {s} with stage {rank_of[s]} "
                                 f"({placements[rank_of[s]]}), but it is on {placement}")
        from meshflow.distributed import pipelining
        self.schedule = pipelining.make_schedule(kind, p, m, num_stages // p)  # ValueError for m it cannot take
        self.kind, self.num_ranks, self.stages_per_rank, self.m = kind, p, num_stages // p, m
        me = get_rank()
        self.rank = next((i for i, q in enumerate(placements) if me in _ranks(q)), None)
        self.stages = stages
        self.moves_inputs = False  # stages the search placed: inputs move to their stage by themselves


def _to_stage(t, placement):
    """A global tensor moved to a searched stage's placement: split along
    the batch over its ranks (data parallel), whole on one rank."""
    sbp = _sbp.split(0) if len(_ranks(placement)) > 1 and t.dim() > 0 else _sbp.broadcast
    return t.to_global(placement=placement, sbp=[sbp] * len(placement.hierarchy))


def _device_type_of(args):
    """The device type of the first tensor among a call's arguments
    (a global tensor's placement type), "cpu" without one: where build()
    runs, and so the autocast lists it is traced with."""
    for a in args:
        if isinstance(a, Tensor):
            return a.placement.type if a.is_global else a.device.type
    return "cpu"


@contextlib.contextmanager
def _stage_scopes(pipeline, tracer):
    """While tracing: each stage's forward runs inside the tracer's stage
    scope, and its tensor inputs must be on the stage's placement."""
    patched = []
    state = {"inside": None}
    try:
        for stage_id, placement, modules in pipeline.stages:
            for module in modules:
                forward = module.forward

                def scoped(*args, _forward=forward, _id=stage_id, _placement=placement, _module=module, **kwargs):
                    if state["inside"] is not None:  # a stage module inside another: the outer one's scope
                        return _forward(*args, **kwargs)
                    if pipeline.moves_inputs:
                        args = [_to_stage(a, _placement) if isinstance(a, Tensor) and a.is_global
                                and not a.placement == _placement else a for a in args]
                    for a in list(args) + list(kwargs.values()):
                        if isinstance(a, Tensor) and a.is_global and not a.placement == _placement:
                            raise ValueError(f"pipeline stage {_id} ({type(_module).__name__} on {_placement}) got "
                                             f"an input on {a.placement}; move it with "
                                             f"x.to_global(placement=<stage {_id}'s placement>, sbp=...)")
                    state["inside"] = _id
                    tracer.enter_stage(_id)
                    try:
                        return _forward(*args, **kwargs)
                    finally:
                        tracer.exit_stage()
                        state["inside"] = None

                patched.append((module, module.__dict__.get("forward")))
                module.forward = scoped
        yield
    finally:
        for module, previous in patched:
            if previous is None:
                del module.forward
            else:
                module.forward = previous


class GraphConfig:
    """A graph's options (OneFlow's graph.config)."""

    def __init__(self):
        self.amp_dtype = None
        # Run boxing's collectives on a communication thread, overlapping
        # the compute that does not need their results (docs/graph.md).
        self.overlap_communication = True
        self.exact = False
        self.zero = None  # (stage, shard_min_size) while ZeRO is on
        self.accumulation_steps = 1
        self.pipeline_schedule = "1f1b"
        self.auto_parallel = False
        self.auto_parallel_memory_limit = 0
        self.auto_parallel_ignore_user_sbp = False
        self.auto_parallel_pipeline = False
        self.auto_parallel_pipeline_stages = None
        self.cuda_graph = False

    def enable_cuda_graph(self, mode=True):
        """Replays each step as one CUDA graph, as OneFlow's
        graph.config.enable_cuda_graph: the second run of a compiled plan
        is recorded and later runs replay it, one launch per step instead of
        one per kernel (Note [Captured steps]). A plan is recorded again
        when a learning rate changed; plans that draw random numbers
        (dropout), communicate, or run a kernel that waits for the host run
        step by step, as without it. On the CPU it changes nothing."""
        self.cuda_graph = bool(mode)

    def enable_amp(self, mode=True, *, dtype=bfloat16):
        """Mixed precision: build() is traced inside autocast(device, dtype)
        on the device type of its tensor arguments (the CPU without any),
        so matmul, linear, conv and attention run in dtype and the rest by
        the autocast lists; parameters and optimizer state stay float32."""
        if dtype not in (bfloat16, float16):
            raise TypeError(f"enable_amp: dtype must be meshflow.bfloat16 or meshflow.float16, got {dtype!r}")
        self.amp_dtype = dtype if mode else None

    def enable_zero(self, mode=True, *, stage=1, shard_min_size=1024, shard_restore_level=1):
        """ZeRO for a data-parallel global model, as OneFlow's
        graph.config.enable_zero: the optimizers' state of every parameter
        with at least shard_min_size elements is split S(0) over mesh axis 0
        (the data-parallel axis, where the parameters must be broadcast), each
        rank updating its rows and the parameters gathered back after the
        update. stage=1 all-reduces the gradients first; stage=2
        reduce-scatters them into the update's rows; stage=3 also keeps
        those parameters as their rows, gathered just before each use in
        forward and again in backward (the parameters' sbp becomes split(0)
        on axis 0). Tensors whose dim 0 has fewer rows than ranks stay
        replicated (docs/memory.md). shard_restore_level (OneFlow's) must be
        0, 1 or 2 and changes nothing."""
        if isinstance(stage, bool) or not isinstance(stage, int) or stage not in (1, 2, 3):
            raise ValueError(f"enable_zero: stage must be 1, 2 or 3, got {stage!r}")
        if isinstance(shard_min_size, bool) or not isinstance(shard_min_size, int) or shard_min_size < 0:
            raise ValueError(f"enable_zero: shard_min_size must be an int >= 0, got {shard_min_size!r}")
        if shard_restore_level not in (0, 1, 2) or isinstance(shard_restore_level, bool):
            raise ValueError(f"enable_zero: shard_restore_level must be 0, 1 or 2, got {shard_restore_level!r}")
        self.zero = (stage, shard_min_size) if mode else None

    def set_gradient_accumulation_steps(self, value):
        """Gradient accumulation, as OneFlow's config: every call splits each
        build() input along dim 0 into `value` equal micro-batches (0-d inputs
        go whole to each), runs build() on each, the gradients summing, scales
        the gradients by 1/value and steps the optimizers once. 0-d outputs
        come back averaged over the micro-batches (a mean loss equals the
        whole batch's), others concatenated along dim 0. Clipping inside
        build() would see partial sums; under a grad scaler the summed
        gradients are unscaled and checked for infs once, after the last
        micro-batch."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"set_gradient_accumulation_steps: expected an int >= 1, got {value!r}")
        self.accumulation_steps = value

    def set_pipeline_schedule(self, name):
        """The order in which each rank runs its pipeline stages' forwards
        and backwards over the micro-batches: "gpipe", "1f1b" (the default),
        "interleaved_1f1b" (several stages per placement, stage s with stage
        s % p), "zero_bubble" (backward split into its input-gradient and
        weight-gradient parts) or "zbv" (two stages per placement in a V).
        See docs/pipeline.md."""
        if name not in _SCHEDULES:
            raise ValueError(f"set_pipeline_schedule: expected one of {', '.join(map(repr, _SCHEDULES))}, got {name!r}")
        self.pipeline_schedule = name

    def enable_auto_parallel(self, mode=True):
        """OneFlow's automatic parallelism: the graph chooses every
        parameter's layout and every op's SBP signature on the placement of
        its inputs (or of its parameters) to minimise the predicted step time
        (meshflow.distributed.auto). Parameters may be local (the model as
        written for one device) or broadcast; a parameter laid out otherwise
        keeps its layout unless enable_auto_parallel_ignore_user_sbp_config
        is on. The parameters keep the chosen layouts after the compile. See
        docs/auto_parallel.md."""
        self.auto_parallel = bool(mode)

    def set_auto_parallel_memory_limit(self, limit):
        """Bytes per rank the searched plan may keep (parameters, gradients,
        optimizer state and the peak of live activations, as predicted); 0
        (the default) sets no limit."""
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0:
            raise ValueError(f"set_auto_parallel_memory_limit: expected a number of bytes >= 0, got {limit!r}")
        self.auto_parallel_memory_limit = float(limit)

    def enable_auto_parallel_ignore_user_sbp_config(self, mode=True):
        """The search lays out every parameter, also those the user laid out
        other than broadcast (OneFlow's name)."""
        self.auto_parallel_ignore_user_sbp = bool(mode)

    def enable_auto_parallel_pipeline(self, mode=True, num_stages=None):
        """With enable_auto_parallel: the search may also cut the model into
        pipeline stages (num_stages of them, or each count >= 2 that divides
        the ranks of the placement; each stage data parallel over its
        ranks), and choose the
        schedule ("1f1b", "gpipe" or "zero_bubble") and the micro-batch count, when it
        predicts that faster than the best plan without stages. The model is
        the graph's one module whose children run one after another (an
        nn.Sequential), and build(x, *targets) passes x to it first, as
        mf.distributed.auto.plan_pipeline assumes. A chosen plan marks each
        child with set_stage and sets the gradient accumulation steps and the
        pipeline schedule; inputs move to their stage's placement by
        themselves (docs/auto_parallel.md)."""
        if num_stages is not None and (isinstance(num_stages, bool) or not isinstance(num_stages, int)
                                       or num_stages < 2):
            raise ValueError(f"enable_auto_parallel_pipeline: num_stages must be an int >= 2 or None, got "
                             f"{num_stages!r}")
        self.auto_parallel_pipeline = bool(mode)
        self.auto_parallel_pipeline_stages = num_stages

    def enable_exact_mode(self, mode=True):
        """Only the graph rewrites that give the bits of eager mode: the
        bias-gradient fusion (which sums a gradient block by block, so in
        another order than eager's sum) and SGD updates inside the weight
        gradient's GEMM are left out (docs/graph.md)."""
        self.exact = bool(mode)


def _tensor_signature(t):
    """A graph input's part of the signature: a global input adds its
    placement and SBP (its shape is the global shape)."""
    layout = (repr(t.placement), tuple(repr(s) for s in t.sbp)) if t.is_global else None
    return tuple(t.shape), str(t.dtype), str(t.device), layout


def _flatten(result):
    """(tensors, rebuild) for a build() result: a tensor or a tuple/list of tensors."""
    if isinstance(result, Tensor):
        return [result], lambda outs: outs[0]
    if isinstance(result, (tuple, list)) and all(isinstance(t, Tensor) for t in result):
        kind = type(result)
        return list(result), lambda outs: kind(outs)
    raise TypeError("Graph.build() must return a tensor or a tuple or list of tensors, got "
                    f"{type(result).__name__}")


class Graph:
    def __init__(self):
        object.__setattr__(self, "_optimizers", [])
        object.__setattr__(self, "_plans", {})
        object.__setattr__(self, "_last", None)
        object.__setattr__(self, "_grad_scaler", None)
        object.__setattr__(self, "config", GraphConfig())

    def add_optimizer(self, optimizer, *, lr_sch=None):
        """Traces optimizer.step() after build() on every training call and
        steps lr_sch (if given) after every run, as OneFlow's graph does."""
        self._optimizers.append((optimizer, lr_sch))

    def set_grad_scaler(self, grad_scaler):
        """Dynamic loss scaling, as OneFlow's nn.Graph.set_grad_scaler: build()
        calls loss.backward() as usual; the graph scales the loss, unscales
        the gradients when backward() ends, skips the optimizers' updates
        (parameters and state) in a step whose gradients hold an inf or NaN,
        and updates the scaler's scale, all inside the compiled step. The
        scale and growth tracker stay the scaler's own tensors."""
        from meshflow.amp import GradScaler
        if not isinstance(grad_scaler, GradScaler):
            raise TypeError(f"{type(self).__name__}.set_grad_scaler: expected a meshflow.amp.GradScaler, got "
                            f"{type(grad_scaler).__name__}")
        object.__setattr__(self, "_grad_scaler", grad_scaler)
        self._plans.clear()

    def _scaler(self):
        """The grad scaler in effect (None when unset or disabled)."""
        scaler = self._grad_scaler
        return scaler if scaler is not None and scaler.is_enabled() else None

    def build(self, *args):
        raise NotImplementedError(f"{type(self).__name__}.build() is not defined")

    def _modules(self):
        return [(name, value) for name, value in vars(self).items() if isinstance(value, _modules.Module)]

    def _signature(self, args):
        for i, a in enumerate(args):
            if not isinstance(a, Tensor):
                raise TypeError(f"{type(self).__name__}: graph inputs must be tensors, argument {i} is "
                                f"{type(a).__name__}")
        scaler = self._scaler()
        scaling = None if scaler is None else (scaler.get_growth_factor(), scaler.get_backoff_factor(),
                                               scaler.get_growth_interval())
        # Which parameters train: a parameter frozen (or thawed) between calls
        # gets a plan of its own, as eager would skip (or update) it.
        trained = tuple(p.requires_grad for _, m in self._modules() for p in m.parameters())
        return (tuple(_tensor_signature(a) for a in args),
                tuple(m.training for _, m in self._modules()), trained, str(self.config.amp_dtype), scaling,
                self.config.exact, self.config.zero, self.config.accumulation_steps, self.config.pipeline_schedule,
                self.config.auto_parallel, self.config.auto_parallel_memory_limit,
                self.config.auto_parallel_ignore_user_sbp, self.config.auto_parallel_pipeline,
                self.config.auto_parallel_pipeline_stages,
                tuple((s[0], repr(s[1])) for s in _pipeline_stages([m for _, m in self._modules()])))

    def _compile(self, args):
        scaler = self._scaler()
        if scaler is not None:
            if not self._optimizers:
                raise RuntimeError(f"{type(self).__name__}: set_grad_scaler needs an optimizer; a grad scaler "
                                   "scales a training step (call add_optimizer)")
            scaler._lazy_init()  # its state tensors, made before the trace
        stages = _pipeline_stages([m for _, m in self._modules()])
        follow = contextlib.nullcontext()
        if self.config.auto_parallel and self.config.auto_parallel_pipeline and not stages:
            from meshflow.distributed import auto
            if auto._plan_graph_stages(self, args):
                stages = _pipeline_stages([m for _, m in self._modules()])
        auto_stages = getattr(self, "_auto_pipeline", None) is not None
        if self.config.auto_parallel and not auto_stages:
            if stages:
                raise ValueError(f"{type(self).__name__}: enable_auto_parallel searches the layouts of one "
                                 "placement; it does not combine with set_stage (pipeline stages)")
            if self.config.zero is not None:
                raise ValueError(f"{type(self).__name__}: enable_auto_parallel chooses the optimizer state's "
                                 "layouts itself; turn enable_zero off")
            from meshflow.distributed import auto
            plan = auto._plan_graph(self, args)
            follow = auto._follow(plan)
        self._lay_out_optimizer_state()
        pipeline = (_Pipeline(type(self).__name__, stages, self.config.pipeline_schedule,
                              self.config.accumulation_steps) if stages else None)
        if pipeline is not None:
            # Stages the search placed: inputs move to their stage's placement.
            pipeline.moves_inputs = auto_stages
        object.__setattr__(self, "_pipeline", pipeline)
        with follow:
            ir, rebuild = self._trace(args, pipeline)
        if self.config.auto_parallel and not auto_stages:
            auto._check_followed(self, follow)
        if pipeline is not None and pipeline.rank is not None:
            _graph.schedule_pipeline(ir, pipeline.kind, pipeline.num_ranks, pipeline.m, pipeline.stages_per_rank,
                                     pipeline.rank)
        passes = _graph.optimize(ir, exact=self.config.exact)
        return _Plan(_graph.Executable(ir, self.config.overlap_communication), rebuild, passes)

    def _trace(self, args, pipeline, on_state=None, on_inputs=None):
        """build(), its backward and the optimizers' updates traced into an
        IR; on_state(), if given, runs once the optimizers' state exists,
        before build(), and on_inputs(traced inputs) after it."""
        scaler = self._scaler()
        tracer = _graph.Tracer()
        try:
            for optimizer, _ in self._optimizers:
                tracer.add_optimizer(optimizer)
            if scaler is not None:
                tracer.set_grad_scaling(scaler._scale, scaler._growth_tracker, scaler.get_growth_factor(),
                                        scaler.get_backoff_factor(), scaler.get_growth_interval())
            for prefix, module in self._modules():
                for name, t in list(module.named_parameters()) + list(module.named_buffers()):
                    tracer.name_variable(t, f"{prefix}.{name}")
            if on_state is not None:
                on_state()
            traced_inputs = tracer.add_inputs(list(args))
            if on_inputs is not None:
                on_inputs(traced_inputs)
            if pipeline is not None and pipeline.moves_inputs:
                # build(x, *targets): the targets go to the last stage, where the loss is.
                last = pipeline.stages[-1][1]
                traced_inputs = traced_inputs[:1] + [_to_stage(t, last) if isinstance(t, Tensor) and t.is_global
                                                     else t for t in traced_inputs[1:]]
            # Autocast as configured, whatever region the caller is in.
            from meshflow.amp import autocast
            amp = self.config.amp_dtype
            scopes = _stage_scopes(pipeline, tracer) if pipeline else contextlib.nullcontext()
            with autocast(_device_type_of(args), dtype=amp, enabled=amp is not None), \
                    _checkpointed_forwards([m for _, m in self._modules()]), scopes:
                if scaler is not None:
                    scaler._graph_scaled = type(self).__name__
                try:
                    outputs, rebuild = self._build_micro_batches(traced_inputs, tracer)
                finally:
                    if scaler is not None:
                        scaler._graph_scaled = None
            if tracer.num_updates():
                raise RuntimeError(f"{type(self).__name__}.build() called an optimizer's step(); the graph steps the "
                                   "optimizers given to add_optimizer itself after build(): remove the call")
            if self._optimizers:
                for optimizer, _ in self._optimizers:
                    optimizer.step()
            ir = tracer.finish(outputs)
        finally:
            tracer.close()
        return ir, rebuild

    def _build_micro_batches(self, inputs, tracer):
        """build() on the whole inputs, or on each micro-batch under gradient
        accumulation (set_gradient_accumulation_steps); under a grad scaler
        the summed gradients are unscaled and checked once, at the end."""
        m = self.config.accumulation_steps
        pipelined = getattr(self, "_pipeline", None) is not None
        clipped = any("clip_grad_max_norm" in group for optimizer, _ in self._optimizers
                      for group in optimizer.param_groups)
        if m == 1 and not pipelined and not clipped:
            tracer.set_pipeline_phase("forward", 0)
            result = _flatten(self.build(*inputs))
            tracer.set_pipeline_phase("update")
            return result
        name = type(self).__name__
        scaled = self._grad_scaler is not None and self._grad_scaler.is_enabled()
        if scaled:
            tracer.defer_unscaling()
        parts = []
        for i, t in enumerate(inputs):
            if t.dim() == 0:
                parts.append([t] * m)
                continue
            if t.shape[0] % m:
                raise ValueError(f"{name}: set_gradient_accumulation_steps({m}) needs every input's dim 0 to divide "
                                 f"into {m} equal micro-batches; input {i} has shape {tuple(t.shape)}")
            parts.append(list(t.chunk(m, 0)))
        per_micro = []
        rebuild = None
        for k in range(m):
            tracer.set_pipeline_phase("forward", k)
            outs, rebuild = _flatten(self.build(*[p[k] for p in parts]))
            per_micro.append(outs)
        tracer.set_pipeline_phase("update")
        from meshflow import cat, no_grad, stack
        with no_grad():
            for optimizer, _ in self._optimizers:
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            p.grad.mul_(1.0 / m)
        from meshflow import one_embedding  # their sparse gradients too, at their update
        one_embedding._scale_accumulated([optimizer for optimizer, _ in self._optimizers], 1.0 / m)
        if scaled:
            tracer.unscale_accumulated()
        self._clip_gradients()
        outputs = []
        for j in range(len(per_micro[0])):
            column = [outs[j] for outs in per_micro]
            if column[0].dim() == 0:
                outputs.append(stack(column).mean())
            else:
                outputs.append(cat(column, 0))
        return outputs, rebuild

    def _clip_gradients(self):
        """OneFlow's clip_grad_max_norm / clip_grad_norm_type of a parameter
        group: the group's gradients are clipped after the last micro-batch
        (and after unscaling), by their norm over all pipeline stages."""
        from meshflow.nn.utils import clip_grad_norm_
        for optimizer, _ in self._optimizers:
            for group in optimizer.param_groups:
                if "clip_grad_max_norm" not in group:
                    continue
                params = [p for p in group["params"] if p.grad is not None]
                if params:
                    clip_grad_norm_(params, group["clip_grad_max_norm"], group.get("clip_grad_norm_type", 2.0))

    def _lay_out_optimizer_state(self):
        """ZeRO's layouts of the optimizers' state (Note [ZeRO as layouts] in
        include/meshflow/optim/optimizer.h), before the trace reads it."""
        zero = self.config.zero
        if zero is None:
            for optimizer, _ in self._optimizers:
                if optimizer._zero_stage:
                    optimizer._set_zero(0, 0)
            return
        def memory(t):  # Python handles of one tensor differ; its memory does not
            return (t.to_local() if t.is_global else t).data_ptr(), tuple(t.shape)

        names = {}
        for prefix, module in self._modules():
            for name, p in module.named_parameters():
                names.setdefault(memory(p), f"{prefix}.{name}")
        for optimizer, _ in self._optimizers:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    where = names.get(memory(p), f"a parameter of shape {tuple(p.shape)}")
                    if not p.is_global:
                        raise ValueError(f"{type(self).__name__}: enable_zero shards the optimizer state of global "
                                         f"parameters; {where} is a local tensor (lay the model out with to_global)")
                    if (p._compute_sbp or p.sbp)[0] != _sbp.broadcast:
                        raise ValueError(f"{type(self).__name__}: enable_zero shards over the data-parallel mesh axis 0, "
                                         f"where parameters must be broadcast; {where} is {tuple(p.sbp)} on "
                                         f"{p.placement}")
            optimizer._set_zero(*zero)

    def __call__(self, *args):
        key = self._signature(args)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._compile(args)
            # Under the signature after the compile (a searched pipeline sets stages).
            self._plans[self._signature(args)] = plan
        object.__setattr__(self, "_last", plan)
        plan.executable.capture = self.config.cuda_graph
        outputs = plan.executable.run(list(args))
        for _, scheduler in self._optimizers:
            if scheduler is not None:
                scheduler.step()
        return plan.rebuild(outputs)

    def pipeline_schedule(self):
        """The pipeline schedule of the last compiled plan as a per-rank
        timeline (every rank's actions and the simulated bubble), or None
        for a graph without stages."""
        pipeline = getattr(self, "_pipeline", None)
        return None if pipeline is None else pipeline.schedule.describe()

    @property
    def num_compiled(self):
        """How many input signatures have been traced."""
        return len(self._plans)

    @property
    def planned_peak_bytes(self):
        """The planned peak of the last run plan's intermediate memory
        (static memory planning), or None before the first call."""
        return None if self._last is None else self._last.executable.planned_bytes

    def profile(self, *args, runs=10, by_shape=False):
        """Runs the plan for these inputs `runs` times and returns a table of
        kernel time per op type, or per op and input shapes with by_shape
        (the inputs' signature must be compiled)."""
        plan = self._plans.get(self._signature(args))
        if plan is None:
            raise ValueError(f"{type(self).__name__}.profile: no plan for these inputs yet; call the graph first")
        return plan.executable.profile(list(args), runs, by_shape)

    def auto_parallel_report(self):
        """The plan enable_auto_parallel chose for the last compiled input
        signature, as a table: each op call's signature, its predicted
        compute time and the boxing of its inputs; then the parameters'
        layouts and the predicted step time and memory per rank."""
        from meshflow.distributed import auto
        return auto._report_table(self)

    def debug(self):
        """Prints the IR of the last plan, the passes run and its memory plan."""
        print(self._describe())

    def _describe(self):
        if self._last is None:
            return f"{type(self).__name__} (not traced yet)"
        return f"{type(self).__name__}: passes: {self._last.passes}\n{self._last.executable}"

    def __repr__(self):
        return self._describe()


class _Plan:
    __slots__ = ("executable", "rebuild", "passes")

    def __init__(self, executable, rebuild, passes):
        self.executable, self.rebuild, self.passes = executable, rebuild, passes
