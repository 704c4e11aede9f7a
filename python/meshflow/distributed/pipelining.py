"""Pipeline parallelism in eager mode, named as torch.distributed.pipelining.

A model is split into stages (`pipeline(model, split_points=[...])`, or
one module per stage by hand); each rank wraps its stage(s) in a
PipelineStage and builds the same schedule:

    stage = PipelineStage(module_of_this_rank, stage_index=rank, num_stages=world)
    schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=loss_fn)
    if rank == 0:            schedule.step(x)
    elif rank == world - 1:  out = schedule.step(target=y, losses=losses)
    else:                    schedule.step()
    optimizer.step()

Each step splits the batch along dim 0 into n_microbatches equal parts
and runs the schedule's action lists (meshflow._C._distributed, the same
lists graph mode runs; print them with schedule.describe()). Gradients
are those of one step on the whole batch: each micro-batch's loss is
seeded with 1/n_microbatches (scale_grads=True), so with a mean loss the
accumulated gradients equal the full batch's. Bad input (a stage id used
twice, a batch that does not divide, inputs on the wrong rank) raises the
same error on every rank; a rank that dies makes the others raise
DistributedError within the communicator's timeout. See docs/pipeline.md.
"""
import time as _time

import meshflow as _mf
from meshflow import _C
from meshflow._C import _distributed as _dist
from meshflow.nn import Module as _Module

__all__ = ["PipelineStage", "ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleZBVZeroBubble",
           "ScheduleZeroBubble", "PipelineScheduleSingle", "PipelineScheduleMulti", "pipeline", "Pipe", "SplitPoint",
           "make_schedule", "get_schedule_class", "ActionType", "Action"]

ActionType = _dist.ActionType
Action = _dist.Action
_COMPUTE = (ActionType.FORWARD, ActionType.FULL_BACKWARD, ActionType.BACKWARD_INPUT, ActionType.BACKWARD_WEIGHT)


def make_schedule(kind, num_ranks, n_microbatches, stages_per_rank=1):
    """The action lists of a schedule kind ('gpipe', '1f1b',
    'interleaved_1f1b', 'zero_bubble', 'zbv'), with simulate(),
    describe() and formula_bubble()."""
    return _dist.make_pipeline_schedule(kind, num_ranks, n_microbatches, stages_per_rank)


# Messages of the pipeline use tags from here on (Note [Pipeline messages]).
_TAG_BASE = 4096
_HEADER = 128  # int64 words of a forward message's header
_STATUS_BYTES = 480
_DTYPES = [_mf.float32, _mf.float64, _mf.float16, _mf.bfloat16, _mf.int64, _mf.int32, _mf.int16, _mf.int8,
           _mf.uint8, _mf.bool]


def _world():
    return _dist.world()


def _agree(comm, message, what, error_type=ValueError):
    """Every rank of comm learns every rank's error (None: none) and raises
    the first one: bad input fails on all ranks instead of hanging the
    ones that did nothing wrong."""
    raw = b"" if message is None else message.encode()[:_STATUS_BYTES - 1]
    mine = _mf.tensor(list(bytes([1 if message is not None else 0]) + raw.ljust(_STATUS_BYTES - 1, b"\0")),
                      dtype=_mf.uint8)
    everyone = _mf.empty(_STATUS_BYTES * comm.size(), dtype=_mf.uint8)
    comm.all_gather(mine, everyone, [_STATUS_BYTES] * comm.size())
    values = everyone.tolist()
    ranks = comm.world_ranks()
    for r in range(comm.size()):
        chunk = values[r * _STATUS_BYTES:(r + 1) * _STATUS_BYTES]
        if chunk[0]:
            text = bytes(chunk[1:]).rstrip(b"\0").decode(errors="replace")
            if r == comm.rank():
                raise error_type(text)
            raise error_type(f"{what}: rank {ranks[r]} failed: {text}")


def _all_gather_ints(comm, values, width):
    """Every rank's list of at most `width` ints (padded), in rank order."""
    if len(values) > width:
        raise ValueError(f"pipeline: at most {width} values per rank, got {len(values)}")
    mine = _mf.tensor([len(values)] + list(values) + [0] * (width - len(values)), dtype=_mf.int64)
    out = _mf.empty((width + 1) * comm.size(), dtype=_mf.int64)
    comm.all_gather(mine, out, [width + 1] * comm.size())
    flat = out.tolist()
    rows = [flat[r * (width + 1):(r + 1) * (width + 1)] for r in range(comm.size())]
    return [row[1:1 + row[0]] for row in rows]


class PipelineStage:
    """One stage of a pipeline: `submodule` runs stage `stage_index` of
    `num_stages` on this rank. `group` is the communicator of the pipeline's
    ranks (the world by default); its ranks run the stages in the layout the
    schedule gives (stage s on group rank s for one stage per rank)."""

    def __init__(self, submodule, stage_index, num_stages, device=None, input_args=None, output_args=None,
                 group=None, dw_builder=None):
        if not isinstance(submodule, _Module):
            raise TypeError(f"PipelineStage: submodule must be a meshflow.nn.Module, got {type(submodule).__name__}")
        for name, value in (("stage_index", stage_index), ("num_stages", num_stages)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"PipelineStage: {name} must be an int, got {type(value).__name__}")
        if num_stages < 1:
            raise ValueError(f"PipelineStage: num_stages must be at least 1, got {num_stages}")
        if not 0 <= stage_index < num_stages:
            raise ValueError(f"PipelineStage: stage_index must be in [0, {num_stages}), got {stage_index}")
        self.submod = submodule
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.device = device
        self.group = _world() if group is None else group
        self.group_rank = self.group.rank()
        self.group_size = self.group.size()
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        # Parameters this stage shares with other stages (pipeline() fills
        # it): tie id -> parameter. Their gradients are summed over the
        # ranks that hold them after each step.
        self._tied = {}

    def __repr__(self):
        return f"PipelineStage(stage_index={self.stage_index}, num_stages={self.num_stages})"


def _split(value, m, what):
    """value split along dim 0 into m equal micro-batches (non-tensors are
    repeated)."""
    if isinstance(value, _mf.Tensor):
        if value.dim() == 0:
            raise ValueError(f"step: {what} is a 0-dim tensor; micro-batches split dim 0")
        rows = value.shape[0]
        if rows % m:
            raise ValueError(f"step: the batch ({what}, {rows} rows along dim 0) must divide into n_microbatches "
                             f"({m}) micro-batches of equal size; got a remainder of {rows % m}")
        return list(value.chunk(m, 0))
    if isinstance(value, (tuple, list)):
        parts = [_split(v, m, f"{what}[{k}]") for k, v in enumerate(value)]
        return [type(value)(p[i] for p in parts) for i in range(m)]
    if isinstance(value, dict):
        parts = {k: _split(v, m, f"{what}[{k!r}]") for k, v in value.items()}
        return [{k: p[i] for k, p in parts.items()} for i in range(m)]
    return [value] * m


def _tensors_of(chunk):
    """The tensors of one micro-batch's (args, kwargs), in order."""
    args, kwargs = chunk
    return [t for t in list(args) + [kwargs[k] for k in sorted(kwargs)] if isinstance(t, _mf.Tensor)]


def _merge(chunks):
    first = chunks[0]
    if isinstance(first, _mf.Tensor):
        return _mf.cat(list(chunks), 0) if first.dim() > 0 else _mf.stack(list(chunks))
    if isinstance(first, (tuple, list)):
        return type(first)(_merge([c[k] for c in chunks]) for k in range(len(first)))
    return first


def _as_tuple(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _needs_grad(t):
    return isinstance(t, _mf.Tensor) and t.requires_grad and t.is_floating_point()


def _leaf(t, requires_grad):
    leaf = t.detach()
    if requires_grad and leaf.is_floating_point():
        leaf.requires_grad_(True)
    return leaf


class _MicroBatch:
    """What one stage keeps of one micro-batch between its actions."""
    __slots__ = ("inputs", "outputs", "loss", "output_grads", "input_grads", "deferred")

    def __init__(self):
        self.inputs = None        # the stage's inputs: leaves that require grad where the sender's did
        self.outputs = None       # the stage's outputs (a tuple)
        self.loss = None          # the last stage's loss
        self.output_grads = None  # gradients of the outputs that require grad
        self.input_grads = None   # gradients of the inputs that require grad
        self.deferred = None      # the W half of a split backward


class _PipelineSchedule:
    """The executor shared by every schedule kind: it runs this rank's list
    of actions (Note [Pipeline messages] in src/distributed/pipelining)."""

    _kind = None

    def __init__(self, stages, n_microbatches, loss_fn=None, scale_grads=True):
        stages = list(stages)
        if not stages or not all(isinstance(s, PipelineStage) for s in stages):
            raise TypeError(f"{type(self).__name__}: expected PipelineStage objects, got {stages!r}")
        if not isinstance(n_microbatches, int) or isinstance(n_microbatches, bool):
            raise TypeError(f"{type(self).__name__}: n_microbatches must be an int, "
                            f"got {type(n_microbatches).__name__}")
        if loss_fn is not None and not callable(loss_fn):
            raise TypeError(f"{type(self).__name__}: loss_fn must be callable, got {type(loss_fn).__name__}")
        comm = stages[0].group
        name = type(self).__name__
        # Every rank checks what every rank has (collective): the errors
        # below are the same everywhere.
        problem = None
        if any(s.group is not comm for s in stages):
            problem = f"{name}: every stage of one schedule must use the same group"
        elif len({s.num_stages for s in stages}) != 1:
            problem = f"{name}: the stages disagree on num_stages: {sorted({s.num_stages for s in stages})}"
        elif n_microbatches < 1:
            problem = f"{name}: n_microbatches must be at least 1, got {n_microbatches}"
        _agree(comm, problem, name)
        kind_id = ["gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "zbv"].index(self._kind)
        facts = [kind_id, n_microbatches, stages[0].num_stages, int(loss_fn is not None)]
        facts += [s.stage_index for s in stages]
        rows = _all_gather_ints(comm, facts, 4 + 64)
        ranks = comm.world_ranks()
        self._check_layout(name, rows, ranks)

        p = comm.size()
        num_stages = stages[0].num_stages
        self._schedule = make_schedule(self._kind, p, n_microbatches, num_stages // p)
        mine = sorted(s.stage_index for s in stages)
        expected = self._schedule.stages_of(comm.rank())
        if mine != expected:  # _check_layout compared every rank already
            raise ValueError(f"{name}: this rank holds stages {mine}, the schedule puts {expected} here")
        self._comm = comm
        self._stages = {s.stage_index: s for s in stages}
        self._n_microbatches = n_microbatches
        self._loss_fn = loss_fn
        self._scale_grads = scale_grads
        self._has_backward = loss_fn is not None
        self._num_stages = num_stages
        self._stage_rank = list(self._schedule.stage_rank)
        self._actions = list(self._schedule.actions[comm.rank()])
        self._tied_groups = self._exchange_ties(comm, stages)
        # Note [Random counters of a pipelined step]: (input signature of
        # stage 0's micro-batch, counters of each stage's forward) once known.
        self._counters = None
        # (action, start, end, bytes allocated after it) of this rank's
        # compute actions in the last step, times in time.perf_counter()
        # seconds (bench/pipeline.py reads it).
        self.last_step_timeline = []

    # --- construction checks ---------------------------------------------------------------------
    def _check_layout(self, name, rows, ranks):
        kinds = {tuple(r[:4]) for r in rows}
        if len(kinds) != 1:
            labels = ["gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "zbv"]
            seen = "; ".join(f"rank {ranks[i]}: {labels[r[0]]}, n_microbatches={r[1]}, num_stages={r[2]}, "
                             f"loss_fn {'given' if r[3] else 'not given'}" for i, r in enumerate(rows))
            raise ValueError(f"{name}: every rank must build the same schedule (kind, n_microbatches, num_stages, "
                             f"loss_fn given or not); got {seen}")
        num_stages = rows[0][2]
        owner = {}
        for i, row in enumerate(rows):
            for s in row[4:]:
                if s in owner:
                    where = (f"ranks {ranks[owner[s]]} and {ranks[i]}" if owner[s] != i else f"rank {ranks[i]}")
                    raise ValueError(f"{name}: stage id {s} is used twice (on {where}); each stage index must be "
                                     f"built once")
                owner[s] = i
        missing = [s for s in range(num_stages) if s not in owner]
        if missing:
            raise ValueError(f"{name}: no rank holds stage(s) {missing} of {num_stages}")
        p = len(rows)
        if num_stages % p:
            raise ValueError(f"{name}: {num_stages} stages do not divide over {p} ranks")
        v = num_stages // p
        layout = make_schedule(self._kind, p, 1 if self._kind != "interleaved_1f1b" else p, v).stage_rank
        for s, r in owner.items():
            if layout[s] != r:
                want = [t for t in range(num_stages) if layout[t] == r]
                raise ValueError(f"{name}: rank {ranks[r]} holds stages {sorted(rows[r][4:])}; this schedule puts "
                                 f"stages {want} on it (stage s on rank s % {p} for interleaved, a V for zbv)")

    def _exchange_ties(self, comm, stages):
        """The groups of ranks that hold each tied parameter."""
        ties = {}
        for s in stages:
            for tie, param in s._tied.items():
                ties.setdefault(tie, param)
        holders = _all_gather_ints(comm, sorted(ties), 256)
        groups = []
        for tie in sorted({t for row in holders for t in row}):
            members = [r for r, row in enumerate(holders) if tie in row]
            if len(members) > 1 and comm.rank() in members:
                groups.append((ties[tie], comm.subgroup(members)))
        return groups

    # --- the public API -----------------------------------------------------------------------
    def describe(self):
        """Every rank's actions and the simulated timeline (a string)."""
        return self._schedule.describe()

    @property
    def pipeline_order(self):
        """rank -> its list of actions, as torch's schedules expose it."""
        return {r: list(a) for r, a in enumerate(self._schedule.actions)}

    def step(self, *args, target=None, losses=None, **kwargs):
        """Runs one step of the schedule on the whole batch. The rank of
        stage 0 passes the inputs, the rank of the last stage the target
        (when loss_fn is set) and optionally a list that receives the
        micro-batches' losses; the last stage's rank gets the merged
        outputs, the others None."""
        m = self._n_microbatches
        problem, chunks, targets = None, None, None
        try:
            chunks, targets = self._prepare(args, kwargs, target, losses)
        except (ValueError, TypeError) as e:
            problem = str(e)
        _agree(self._comm, problem, f"{type(self).__name__}.step")
        # Tied parameters: only this step's part of .grad is summed over
        # the ranks that hold them (what was there before stays as it was).
        before = [None if p.grad is None else p.grad.clone() for p, _ in self._tied_groups]
        state = {}
        sends = []
        self.last_step_timeline = []
        seed, base = _C.default_generator.get_state()
        counts = self._stage_counters(chunks)
        per_micro = sum(counts)
        self._draw_at = lambda s, i: (seed, base + i * per_micro + sum(counts[:s]))
        for action in self._actions:
            self._run(action, state, chunks, targets, sends)
        for work in sends:
            work.wait()
        _C.default_generator.set_state((seed, base + m * per_micro))
        for (param, group), old in zip(self._tied_groups, before):
            step_grad = _mf.zeros_like(param) if param.grad is None else \
                (param.grad.clone() if old is None else param.grad - old)
            group.all_reduce(step_grad)
            param.grad = step_grad if old is None else old + step_grad
        last = self._num_stages - 1
        if last in self._stages:
            if losses is not None and self._has_backward:
                losses.extend(state[(last, i)].loss.detach() for i in range(m))
            return _merge([state[(last, i)].outputs[0] if len(state[(last, i)].outputs) == 1
                           else state[(last, i)].outputs for i in range(m)])
        return None

    # --- execution ----------------------------------------------------------------------------
    def _prepare(self, args, kwargs, target, losses):
        name = f"{type(self).__name__}.step"
        me = self._comm.world_ranks()[self._comm.rank()]
        first_rank = self._comm.world_ranks()[self._stage_rank[0]]
        last_rank = self._comm.world_ranks()[self._stage_rank[-1]]
        m = self._n_microbatches
        if 0 in self._stages:
            if not args and not kwargs:
                raise ValueError(f"{name}: rank {me} runs stage 0 and needs the inputs: call step(x) here")
        elif args or kwargs:
            raise ValueError(f"{name}: inputs given on rank {me}, which does not run stage 0 (rank {first_rank} "
                             f"does); call step() without inputs here")
        holds_last = self._num_stages - 1 in self._stages
        if target is not None and not holds_last:
            raise ValueError(f"{name}: target given on rank {me}, which does not run the last stage (rank "
                             f"{last_rank} does)")
        if target is not None and not self._has_backward:
            raise ValueError(f"{name}: target given but the schedule has no loss_fn")
        if holds_last and self._has_backward and target is None:
            raise ValueError(f"{name}: rank {me} runs the last stage and the schedule has a loss_fn: call "
                             f"step(target=y) here")
        if losses is not None and not isinstance(losses, list):
            raise TypeError(f"{name}: losses must be a list, got {type(losses).__name__}")
        chunks = None
        if 0 in self._stages:
            arg_chunks = _split(list(args), m, "input")
            kwarg_chunks = _split(dict(kwargs), m, "input")
            chunks = list(zip(arg_chunks, kwarg_chunks))
        targets = _split(target, m, "target") if target is not None else None
        return chunks, targets

    # Note [Random counters of a pipelined step]
    # One process running the micro-batches one after another draws random
    # counters (dropout's Philox offsets) micro-batch by micro-batch, stage
    # by stage: stage s of micro-batch i starts at base + i * C + (the
    # counters of stages 0..s-1), C being one micro-batch's counters over all
    # stages. A pipeline runs the stages on several ranks in another order,
    # so each forward sets its rank's generator there before it runs, and a
    # step leaves every generator at base + m * C: the masks are those of
    # one process, on every schedule. The counters of each stage come from
    # running its forward once on micro-batch 0 (stage 0's data, zeros of
    # the received shapes after it), stage after stage, with its buffers
    # and the generator restored afterwards; they are found again when the
    # micro-batch's shapes change.
    def _stage_counters(self, chunks):
        signature = [] if chunks is None else [d for t in _tensors_of(chunks[0]) for d in (t.dim(), *t.shape)]
        key = _mf.tensor((signature + [0] * _HEADER)[:_HEADER], dtype=_mf.int64)
        self._comm.broadcast(key, self._stage_rank[0])
        key = tuple(key.tolist())
        if self._counters is not None and self._counters[0] == key:
            return self._counters[1]
        counts, received = [], None
        for s in range(self._num_stages):
            values = [0] * (_HEADER + 1)
            if s in self._stages:
                if s == 0:
                    call_args, call_kwargs = chunks[0]
                else:
                    call_args, call_kwargs = tuple(_mf.zeros(shape, dtype=dtype) for dtype, shape in received), {}
                drawn, outputs = self._dry_forward(s, call_args, call_kwargs)
                described = [len(outputs)]
                for o in outputs:
                    described += [_DTYPES.index(o.dtype), o.dim(), *o.shape]
                if len(described) > _HEADER:
                    raise ValueError(f"{type(self).__name__}: a stage's outputs are described by at most {_HEADER} "
                                     f"numbers, got {len(described)}")
                values[:len(described) + 1] = [drawn] + described
            words = _mf.tensor(values, dtype=_mf.int64)
            self._comm.broadcast(words, self._stage_rank[s])
            values = words.tolist()
            counts.append(values[0])
            received, k = [], 2
            for _ in range(values[1]):
                dtype, ndim = _DTYPES[values[k]], values[k + 1]
                received.append((dtype, values[k + 2:k + 2 + ndim]))
                k += 2 + ndim
        self._counters = (key, counts)
        return counts

    def _dry_forward(self, s, call_args, call_kwargs):
        """(counters drawn, output tensors) of stage s's forward, leaving
        its buffers and the generator as they were."""
        module = self._stages[s].submod
        saved = [(b, b.clone()) for b in module.buffers()]
        state = _C.default_generator.get_state()
        try:
            with _mf.no_grad():
                out = module(*call_args, **call_kwargs)
            drawn = _C.default_generator.get_state()[1] - state[1]
        finally:
            _C.default_generator.set_state(state)
            with _mf.no_grad():
                for b, copy in saved:
                    b.copy_(copy)
        outputs = _as_tuple(out)
        if not all(isinstance(o, _mf.Tensor) for o in outputs):
            raise TypeError(f"{type(self).__name__}: a stage must return tensors, got "
                            f"{[type(o).__name__ for o in outputs]}")
        return drawn, outputs

    def _peer(self, stage):
        return self._stage_rank[stage]

    def _tag(self, action):
        return _TAG_BASE + action.tag

    def _run(self, action, state, chunks, targets, sends):
        t, s, i = action.type, action.stage_index, action.microbatch_index
        backward = t in (ActionType.FULL_BACKWARD, ActionType.BACKWARD_INPUT, ActionType.BACKWARD_WEIGHT,
                         ActionType.SEND_B, ActionType.RECV_B)
        if backward and not self._has_backward:
            return
        try:
            start = _time.perf_counter()
            self._run_action(action, state, chunks, targets, sends)
            if sends and action.type in (ActionType.SEND_F, ActionType.SEND_B):
                # Sends that completed release their tensors now, not at the step's end.
                sends[:] = [w for w in sends if not w.is_completed()]
            if action.type in _COMPUTE:
                self.last_step_timeline.append((str(action), start, _time.perf_counter(), _mf.memory_allocated()))
        except _mf.errors.DistributedError as e:
            raise _mf.errors.DistributedError(f"{type(self).__name__}.step: action {action} on rank "
                                              f"{self._comm.world_ranks()[self._comm.rank()]}: {e}") from e

    def _run_action(self, action, state, chunks, targets, sends):
        t, s, i = action.type, action.stage_index, action.microbatch_index
        mb = state.setdefault((s, i), _MicroBatch())
        if t == ActionType.RECV_F:
            mb.inputs = self._recv_forward(self._peer(s - 1), self._tag(action))
        elif t == ActionType.FORWARD:
            self._forward(s, i, mb, state, chunks, targets)
        elif t == ActionType.SEND_F:
            self._send_forward(mb.outputs, self._peer(s + 1), self._tag(action), sends)
        elif t == ActionType.RECV_B:
            mb.output_grads = self._recv_backward(mb.outputs, self._peer(s + 1), self._tag(action))
        elif t in (ActionType.FULL_BACKWARD, ActionType.BACKWARD_INPUT):
            self._backward(s, i, mb, state, split=t == ActionType.BACKWARD_INPUT)
        elif t == ActionType.BACKWARD_WEIGHT:
            mb.deferred.run()
            mb.deferred = None
            mb.inputs = None
        elif t == ActionType.SEND_B:
            for g in mb.input_grads:
                sends.append(self._comm.isend(g.contiguous(), self._peer(s - 1), self._tag(action)))
            mb.input_grads = None

    def _forward(self, s, i, mb, state, chunks, targets):
        stage = self._stages[s]
        if s == 0:
            call_args, call_kwargs = chunks[i]
            mb.inputs = ()
        else:
            call_args, call_kwargs = mb.inputs, {}
        _C.default_generator.set_state(self._draw_at(s, i))  # Note [Random counters of a pipelined step]
        out = stage.submod(*call_args, **call_kwargs)
        mb.outputs = _as_tuple(out)
        if stage.is_last and self._has_backward:
            mb.loss = self._loss_fn(out, targets[i])
            if not isinstance(mb.loss, _mf.Tensor) or mb.loss.numel() != 1:
                raise ValueError(f"{type(self).__name__}: loss_fn must return a tensor of one element, got "
                                 f"{getattr(mb.loss, 'shape', type(mb.loss).__name__)}")
        if s + 1 < self._num_stages and self._peer(s + 1) == self._peer(s):
            # The next stage is on this rank: hand the outputs over as leaves.
            state.setdefault((s + 1, i), _MicroBatch()).inputs = tuple(
                _leaf(o, _needs_grad(o)) if isinstance(o, _mf.Tensor) else o for o in mb.outputs)
        if not self._has_backward:
            mb.inputs = None

    def _backward(self, s, i, mb, state, split):
        if self._stages[s].is_last:
            scale = 1.0 / self._n_microbatches if self._scale_grads else 1.0
            outputs, grads = [mb.loss], [_mf.full_like(mb.loss, scale)]
        else:
            if mb.output_grads is None:  # the next stage is on this rank
                mb.output_grads = state[(s + 1, i)].input_grads
                state[(s + 1, i)].input_grads = None
            pairs = [(o, g) for o, g in zip([o for o in mb.outputs if _needs_grad(o)], mb.output_grads)]
            outputs, grads = [o for o, _ in pairs], [g for _, g in pairs]
        leaves = [x for x in (mb.inputs or ()) if _needs_grad(x)]
        if not outputs:
            mb.input_grads = [_mf.zeros_like(x) for x in leaves]
        elif split:
            got, mb.deferred = _C._autograd_backward_input(outputs, grads, leaves)
            mb.input_grads = [g if g is not None else _mf.zeros_like(x) for g, x in zip(got, leaves)]
        else:
            _mf.autograd.backward(outputs, grads)
            mb.input_grads = [x.grad if x.grad is not None else _mf.zeros_like(x) for x in leaves]
        mb.outputs = tuple(o.detach() if isinstance(o, _mf.Tensor) else o for o in mb.outputs) \
            if self._stages[s].is_last else None
        mb.output_grads = None
        if not split:
            mb.inputs = None

    # --- messages: a header with the tensors' dtypes and shapes, then each tensor ---------------
    def _send_forward(self, outputs, dst, tag, sends):
        header = [0] * _HEADER
        words = [len(outputs)]
        for o in outputs:
            if not isinstance(o, _mf.Tensor):
                raise TypeError(f"{type(self).__name__}: a stage that sends to another rank must return tensors, "
                                f"got {type(o).__name__}")
            words += [_DTYPES.index(o.dtype), int(_needs_grad(o)), o.dim(), *o.shape]
        if len(words) > _HEADER:
            raise ValueError(f"{type(self).__name__}: a stage's outputs are described by at most {_HEADER} "
                             f"numbers, got {len(words)} (fewer or lower-dimensional outputs)")
        header[:len(words)] = words
        sends.append(self._comm.isend(_mf.tensor(header, dtype=_mf.int64), dst, tag))
        for o in outputs:
            sends.append(self._comm.isend(o.detach().contiguous(), dst, tag))

    def _recv_forward(self, src, tag):
        header = _mf.empty(_HEADER, dtype=_mf.int64)
        self._comm.recv(header, src, tag)
        words = header.tolist()
        count, k, tensors = words[0], 1, []
        for _ in range(count):
            dtype, requires_grad, ndim = _DTYPES[words[k]], bool(words[k + 1]), words[k + 2]
            shape = words[k + 3:k + 3 + ndim]
            k += 3 + ndim
            t = _mf.empty(shape, dtype=dtype)
            self._comm.recv(t, src, tag)
            tensors.append(_leaf(t, requires_grad))
        return tuple(tensors)

    def _recv_backward(self, outputs, src, tag):
        grads = []
        for o in outputs:
            if _needs_grad(o):
                g = _mf.empty(list(o.shape), dtype=o.dtype)
                self._comm.recv(g, src, tag)
                grads.append(g)
        return grads


class PipelineScheduleSingle(_PipelineSchedule):
    """A schedule with one stage per rank."""

    def __init__(self, stage, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True):
        if not isinstance(stage, PipelineStage):
            raise TypeError(f"{type(self).__name__}: expected a PipelineStage, got {type(stage).__name__} "
                            f"(schedules with several stages per rank take a list)")
        super().__init__([stage], n_microbatches, loss_fn, scale_grads)


class PipelineScheduleMulti(_PipelineSchedule):
    """A schedule with several stages per rank (a list)."""

    def __init__(self, stages, n_microbatches, loss_fn=None, args_chunk_spec=None, kwargs_chunk_spec=None,
                 output_merge_spec=None, scale_grads=True):
        if isinstance(stages, PipelineStage):
            stages = [stages]
        super().__init__(stages, n_microbatches, loss_fn, scale_grads)


class ScheduleGPipe(PipelineScheduleSingle):
    """Every forward, then every backward: bubble (p-1)/(m+p-1), and each
    stage holds all m micro-batches' activations."""
    _kind = "gpipe"


class Schedule1F1B(PipelineScheduleSingle):
    """One forward, one backward: GPipe's bubble with at most p micro-batches'
    activations on the first stage (p - s on stage s)."""
    _kind = "1f1b"


class ScheduleZeroBubble(PipelineScheduleSingle):
    """1F1B with the backward split into input and weight gradients (ZB-H1):
    the weight halves fill the bubble, at 1F1B's memory."""
    _kind = "zero_bubble"


class ScheduleInterleaved1F1B(PipelineScheduleMulti):
    """Several stages per rank (stage s on rank s % p): bubble
    (p-1)/(v m+p-1) with v stages per rank; n_microbatches must be a multiple
    of the number of ranks."""
    _kind = "interleaved_1f1b"


class ScheduleZBVZeroBubble(PipelineScheduleMulti):
    """Two stages per rank in a V (rank r holds stages r and 2p-1-r), with
    split backwards: the bubble nearly vanishes once n_microbatches >= 2p."""
    _kind = "zbv"


# --- splitting a model ---------------------------------------------------------------------------
class SplitPoint:
    """Where pipeline(split_spec=...) starts a stage: BEGINNING puts the
    named module first in a new stage, END makes it the last of its stage."""
    BEGINNING = "beginning"
    END = "end"


class _StageModule(_Module):
    """Consecutive children of a Sequential-like model under their original
    names (state_dict keys match the whole model's)."""

    def __init__(self, named_children):
        super().__init__()
        self._order = []
        for name, child in named_children:
            self.add_module(name, child)
            self._order.append(name)

    def forward(self, *args):
        out = args
        for name in self._order:
            out = getattr(self, name)(*_as_tuple(out))
        return out


class Pipe:
    """A model split into stages by pipeline()."""

    def __init__(self, stage_modules, ties):
        self._stage_modules = stage_modules
        self._ties = ties  # stage -> {tie id: parameter}
        self.num_stages = len(stage_modules)

    def get_stage_module(self, stage_idx):
        if not 0 <= stage_idx < self.num_stages:
            raise ValueError(f"Pipe.get_stage_module: stage_idx must be in [0, {self.num_stages}), got {stage_idx}")
        return self._stage_modules[stage_idx]

    def build_stage(self, stage_index, device=None, group=None):
        stage = PipelineStage(self.get_stage_module(stage_index), stage_index, self.num_stages, device, group=group)
        stage._tied = dict(self._ties.get(stage_index, {}))
        return stage

    def __repr__(self):
        return f"Pipe(num_stages={self.num_stages})"


def pipeline(module, split_points=None, mb_args=None, mb_kwargs=None, split_spec=None):
    """Splits a Sequential-like module (children run one after another) into
    stages. split_points lists the children (names or indices) that begin a
    new stage; split_spec ({name: SplitPoint.BEGINNING or END}) says the same
    as torch.distributed.pipelining does. Parameters used by several stages
    (tied weights) have their gradients summed over those stages' ranks."""
    if not isinstance(module, _Module):
        raise TypeError(f"pipeline: module must be a meshflow.nn.Module, got {type(module).__name__}")
    children = list(module.named_children())
    if not children:
        raise ValueError("pipeline: the module has no children to split")
    names = [n for n, _ in children]
    begins = set()
    for point in split_points or []:
        if isinstance(point, int) and not isinstance(point, bool):
            if not 0 < point < len(children):
                raise ValueError(f"pipeline: split point {point} must be a child index in [1, {len(children)})")
            begins.add(point)
        elif isinstance(point, str):
            if point not in names:
                raise ValueError(f"pipeline: split point {point!r} is not a child of the module; children are {names}")
            if names.index(point) == 0:
                raise ValueError(f"pipeline: split point {point!r} is the first child: a stage would be empty")
            begins.add(names.index(point))
        else:
            raise TypeError(f"pipeline: split points are child names or indices, got {type(point).__name__}")
    for name, where in (split_spec or {}).items():
        if name not in names:
            raise ValueError(f"pipeline: split_spec names {name!r}, which is not a child; children are {names}")
        k = names.index(name) + (1 if where == SplitPoint.END else 0)
        if where not in (SplitPoint.BEGINNING, SplitPoint.END):
            raise ValueError(f"pipeline: split_spec values are SplitPoint.BEGINNING or SplitPoint.END, got {where!r}")
        if 0 < k < len(children):
            begins.add(k)
    bounds = [0] + sorted(begins) + [len(children)]
    stage_modules = [_StageModule(children[a:b]) for a, b in zip(bounds, bounds[1:])]
    holders = {}
    for s, sm in enumerate(stage_modules):
        for p in sm.parameters():
            # Python wrappers are not kept: one parameter is one storage.
            key = (p.data_ptr(), tuple(p.shape), tuple(p.stride()), str(p.dtype))
            holders.setdefault(key, (p, set()))[1].add(s)
    ties = {}
    tie = 0
    for p, stages in holders.values():
        if len(stages) > 1:
            for s in stages:
                ties.setdefault(s, {})[tie] = p
            tie += 1
    return Pipe(stage_modules, ties)


def get_schedule_class(schedule_name):
    """The schedule class of a name, as torch's get_schedule_class: 'gpipe',
    '1f1b', 'zero_bubble', 'interleaved_1f1b' or 'zbv' (any case; PyTorch's
    class names too)."""
    classes = [ScheduleGPipe, Schedule1F1B, ScheduleZeroBubble, ScheduleInterleaved1F1B, ScheduleZBVZeroBubble]
    key = str(schedule_name).lower()
    for cls in classes:
        if key in (cls._kind, cls.__name__.lower(), cls.__name__[len("Schedule"):].lower()):
            return cls
    raise ValueError(f"get_schedule_class: unknown schedule {schedule_name!r}; expected one of "
                     f"{[c._kind for c in classes]}")
