"""meshflow.profiler: where the time of a training step goes, with PyTorch's
names (torch.profiler).

    with mf.profiler.profile(activities=[mf.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        with mf.profiler.record_function("forward"):
            loss = model(x).sum()
        loss.backward()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
    prof.export_chrome_trace("trace.json")   # opens in Perfetto or chrome://tracing

A trace holds spans of eager ops ("op"), autograd nodes ("autograd"), the
plan nodes of graph-mode steps ("graph", one per node, plus the step),
collectives on any thread ("comm"), DataLoader batches ("data"),
record_function ranges ("user") and profiler steps ("step"). Under the
launcher each rank writes its own trace (its rank is the trace's process
id); `python -m meshflow.profiler.merge` merges them into one timeline.
See docs/profiler.md.
"""

import enum
import functools
import json
import os
import socket
import threading
import time

from meshflow._C import _profiler as _P

__all__ = ["profile", "record_function", "ProfilerActivity", "ProfilerAction", "schedule", "supported_activities",
           "tensorboard_trace_handler", "EventList", "FunctionEvent", "FunctionEventAvg"]


class ProfilerActivity(enum.Enum):
    CPU = 0
    CUDA = 1


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def supported_activities():
    """The activities this build can record."""
    import meshflow
    return {ProfilerActivity.CPU} | ({ProfilerActivity.CUDA} if meshflow.cuda.is_available() else set())


def schedule(*, wait, warmup, active, repeat=0, skip_first=0):
    """The action of each profiler step, as torch.profiler.schedule: skip
    skip_first steps, then cycles of wait (nothing), warmup (nothing
    recorded) and active (recorded; the last one saves) steps, repeat
    times (0: forever)."""
    for name, value, least in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1),
                               ("repeat", repeat, 0), ("skip_first", skip_first, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"schedule: {name} must be an int >= {least}, got {value!r}")

    def action(step):
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        pos = step % cycle
        if pos < wait:
            return ProfilerAction.NONE
        if pos < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if pos < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


def _default_schedule(step):
    return ProfilerAction.RECORD


def _rank_and_world():
    """(rank, world size) of this process in the launcher's job (0, 1 alone);
    read from the launcher's environment, so profiling starts no MPI."""
    for rank_var, size_var in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("RANK", "WORLD_SIZE")):
        if rank_var in os.environ:
            try:
                return int(os.environ[rank_var]), int(os.environ.get(size_var, "1"))
            except ValueError:
                pass
    return 0, 1


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """An on_trace_ready that writes each trace to
    dir_name/<worker_name>.<milliseconds>.pt.trace.json[.gz]; worker_name
    defaults to "<host>_rank<rank>", one file per rank."""
    if worker_name is None:
        worker_name = f"{socket.gethostname()}_rank{_rank_and_world()[0]}"

    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        name = f"{worker_name}.{int(time.time() * 1000)}.pt.trace.json" + (".gz" if use_gzip else "")
        prof.export_chrome_trace(os.path.join(dir_name, name))

    return handler


class _Interval:
    __slots__ = ("start", "end")

    def __init__(self, start, end):
        self.start = start
        self.end = end

    def elapsed_us(self):
        return self.end - self.start


class FunctionEvent:
    """One span: name, category, thread, time_range (microseconds on the
    monotonic clock), cpu_time_total and self_cpu_time_total (its time less
    that of the spans it encloses on its thread), input_shapes, cpu_parent
    and cpu_children."""

    def __init__(self, id, name, category, start_ns, end_ns, thread, input_shapes, args):
        self.id = id
        self.name = name
        self.key = name
        self.category = category
        self.thread = thread
        self.time_range = _Interval(start_ns / 1000.0, end_ns / 1000.0)
        self.input_shapes = input_shapes
        self.args = args
        self.cpu_parent = None
        self.cpu_children = []
        self.count = 1
        self.device_type = ProfilerActivity.CPU

    @property
    def cpu_time_total(self):
        return self.time_range.elapsed_us()

    @property
    def self_cpu_time_total(self):
        return max(0.0, self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children))

    @property
    def cpu_time(self):
        return self.cpu_time_total

    def __repr__(self):
        return (f"<FunctionEvent id={self.id} name={self.name} category={self.category} thread={self.thread} "
                f"cpu_time_total={self.cpu_time_total:.3f}us self_cpu_time_total={self.self_cpu_time_total:.3f}us "
                f"input_shapes={self.input_shapes}>")


class FunctionEventAvg:
    """The spans of one key (a name, or a name and input shapes) together."""

    def __init__(self, key, input_shapes=None):
        self.key = key
        self.input_shapes = input_shapes
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.category = None

    def add(self, event):
        self.count += event.count
        self.cpu_time_total += event.cpu_time_total
        self.self_cpu_time_total += event.self_cpu_time_total
        self.category = self.category or event.category
        return self

    @property
    def cpu_time(self):
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def self_cpu_time(self):
        return self.self_cpu_time_total / self.count if self.count else 0.0

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} count={self.count} cpu_time_total={self.cpu_time_total:.3f}us "
                f"self_cpu_time_total={self.self_cpu_time_total:.3f}us input_shapes={self.input_shapes}>")


def _format_us(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


_SORT_KEYS = ("cpu_time_total", "self_cpu_time_total", "cpu_time", "self_cpu_time", "count")


class EventList(list):
    """A list of FunctionEvent or FunctionEventAvg, with torch's table()."""

    def __init__(self, events=(), trace=None):
        super().__init__(events)
        self._trace = trace

    @property
    def self_cpu_time_total(self):
        return sum(e.self_cpu_time_total for e in self)

    def key_averages(self, group_by_input_shape=False):
        groups = {}
        for e in self:
            shapes = e.input_shapes if group_by_input_shape else None
            key = (e.key, repr(shapes))
            if key not in groups:
                groups[key] = FunctionEventAvg(e.key, shapes)
            groups[key].add(e)
        return EventList(groups.values(), self._trace)

    def total_average(self):
        total = FunctionEventAvg("Total")
        for e in self:
            total.add(e)
        return total

    def table(self, sort_by=None, row_limit=100, max_name_column_width=55, header=None,
              top_level_events_only=False):
        """A text table of the rows: name, self and total time (and their
        share of the whole), average time and calls, sorted by one of
        cpu_time_total, self_cpu_time_total, cpu_time, self_cpu_time or
        count (largest first)."""
        rows = list(self)
        if top_level_events_only:
            rows = [e for e in rows if getattr(e, "cpu_parent", None) is None]
        if sort_by is not None:
            if sort_by not in _SORT_KEYS:
                raise ValueError(f"table: sort_by must be one of {', '.join(_SORT_KEYS)}, got {sort_by!r}")
            rows.sort(key=lambda e: getattr(e, sort_by), reverse=True)
        if row_limit is not None and row_limit > 0:
            rows = rows[:row_limit]
        with_shapes = any(getattr(e, "input_shapes", None) for e in rows)
        total_self = sum(e.self_cpu_time_total for e in self) or 1.0
        names = [e.key if len(e.key) <= max_name_column_width else e.key[:max_name_column_width - 3] + "..."
                 for e in rows]
        width = max([len("Name")] + [len(n) for n in names])
        heads = ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"]
        cols = [max(12, len(h)) for h in heads]
        line = "-" * width + "  " + "  ".join("-" * c for c in cols)
        if with_shapes:
            line += "  " + "-" * 40
        out = []
        if header:
            out.append(header)
        out.append(line)
        title = "Name".ljust(width) + "  " + "  ".join(h.rjust(c) for h, c in zip(heads, cols))
        if with_shapes:
            title += "  Input Shapes"
        out += [title, line]
        for name, e in zip(names, rows):
            cells = [f"{100.0 * e.self_cpu_time_total / total_self:.2f}%", _format_us(e.self_cpu_time_total),
                     f"{100.0 * e.cpu_time_total / total_self:.2f}%", _format_us(e.cpu_time_total),
                     _format_us(e.cpu_time_total / max(e.count, 1)), str(e.count)]
            row = name.ljust(width) + "  " + "  ".join(v.rjust(c) for v, c in zip(cells, cols))
            if with_shapes:
                row += "  " + str(e.input_shapes if e.input_shapes is not None else "")
            out.append(row)
        out.append(line)
        out.append(f"Self CPU time total: {_format_us(sum(e.self_cpu_time_total for e in self))}")
        return "\n".join(out) + "\n"

    def __str__(self):
        return self.table()

    def export_chrome_trace(self, path):
        if self._trace is None:
            raise ValueError("export_chrome_trace: these events come from no recorded trace")
        self._trace.export_chrome_trace(path)


class _Trace:
    """One recorded session: the events, the thread names and the clocks."""

    def __init__(self, raw, rank, world_size, step_spans):
        events, threads, wall_minus_steady_ns = raw
        self.rank = rank
        self.world_size = world_size
        self.threads = {int(k): v for k, v in threads.items()}
        self.wall_minus_steady_ns = wall_minus_steady_ns
        merged = list(events) + [(n, "step", s, e, t, [], "") for (n, s, e, t) in step_spans]
        merged.sort(key=lambda e: (e[2], -e[3]))
        self.events = []
        stacks = {}  # thread -> open spans
        for i, (name, cat, start, end, thread, shapes, args) in enumerate(merged):
            fe = FunctionEvent(i, name, cat, start, end, thread, shapes or None, args)
            stack = stacks.setdefault(thread, [])
            while stack and stack[-1].time_range.end * 1000.0 <= start:
                stack.pop()
            if stack and end <= stack[-1].time_range.end * 1000.0:
                fe.cpu_parent = stack[-1]
                stack[-1].cpu_children.append(fe)
            stack.append(fe)
            self.events.append(fe)

    def chrome_json(self):
        pid = self.rank
        out = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"rank {self.rank}"}},
               {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
        used = sorted({e.thread for e in self.events})
        for t in used:
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": t,
                        "args": {"name": self.threads.get(t, f"thread {t}")}})
        for e in self.events:
            ev = {"ph": "X", "name": e.name, "cat": e.category, "pid": pid, "tid": e.thread,
                  "ts": e.time_range.start, "dur": e.cpu_time_total}
            args = {}
            if e.input_shapes:
                args["Input Dims"] = e.input_shapes
            if e.args:
                args["details"] = e.args
            if args:
                ev["args"] = args
            out.append(ev)
        return {"traceEvents": out, "displayTimeUnit": "ms",
                "meshflow": {"rank": self.rank, "world_size": self.world_size,
                             "wall_minus_steady_us": self.wall_minus_steady_ns / 1000.0}}

    def export_chrome_trace(self, path):
        _write_json_atomically(path, self.chrome_json())


def _write_json_atomically(path, obj):
    """Writes obj as JSON (gzip for a .gz path) through a temporary file
    renamed over path, so a reader never sees half a trace."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot write {path!r}: the directory {directory!r} does not exist")
    tmp = f"{path}.tmp.{os.getpid()}"
    data = json.dumps(obj).encode()
    try:
        if path.endswith(".gz"):
            import gzip
            with gzip.open(tmp, "wb") as f:
                f.write(data)
        else:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class profile:
    """Records a session (torch.profiler.profile's arguments). activities:
    ProfilerActivity.CPU (CUDA is refused in a build without a CUDA
    backend). record_shapes: keep each op's input shapes. schedule and
    on_trace_ready: record only some steps (see schedule()) and hand each
    finished trace to on_trace_ready(prof). profile_memory, with_stack,
    with_flops and with_modules are not recorded: asking for them is an
    error."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None, use_cuda=None):
        acts = set(activities) if activities is not None else {ProfilerActivity.CPU}
        for a in acts:
            if not isinstance(a, ProfilerActivity):
                raise TypeError(f"profile: activities must be ProfilerActivity values, got {a!r}")
        if ProfilerActivity.CUDA in acts or use_cuda:
            import meshflow
            if not meshflow.cuda.is_available():
                raise RuntimeError("profile: ProfilerActivity.CUDA asked for, but no CUDA device is available "
                                   "to this build of meshflow")
        for name, value in (("profile_memory", profile_memory), ("with_stack", with_stack),
                            ("with_flops", with_flops), ("with_modules", with_modules)):
            if value:
                raise NotImplementedError(f"profile: {name}=True is not supported by meshflow's profiler")
        self.activities = acts
        self.record_shapes = bool(record_shapes)
        self.schedule = schedule if schedule is not None else _default_schedule
        self._record_steps = schedule is not None  # ProfilerStep#N spans, as torch, with a schedule only
        self.on_trace_ready = on_trace_ready
        self.step_num = 0
        self.current_action = ProfilerAction.NONE
        self._trace = None
        self._recording = False
        self._running = False
        self._step_start = None
        self._step_spans = []
        self._rank, self._world_size = _rank_and_world()

    # --- the session ----------------------------------------------------------------------------------
    def start(self):
        if self._running:
            raise RuntimeError("profile.start: the profiler is already running")
        self._running = True
        self.step_num = 0
        self.current_action = self.schedule(self.step_num)
        self._enter(self.current_action)
        return self

    def stop(self):
        if not self._running:
            return
        self._running = False
        if self._recording:
            self._close_step()
            self._finish(save=True)
        self.current_action = ProfilerAction.NONE

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        return False

    def step(self):
        """Marks the end of a training step: the schedule's next action
        starts or ends recording."""
        if not self._running:
            return
        if self._recording:
            self._close_step()
        previous = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        if previous == ProfilerAction.RECORD_AND_SAVE and self._recording:
            self._finish(save=True)
        elif self._recording and self.current_action not in (ProfilerAction.RECORD,
                                                             ProfilerAction.RECORD_AND_SAVE):
            self._finish(save=False)
        self._enter(self.current_action)

    def _enter(self, action):
        if action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            if not self._recording:
                _P.start(self.record_shapes)
                _P.set_thread_name(threading.current_thread().name)
                self._recording = True
                self._step_spans = []
            self._step_start = _P.now_ns() if self._record_steps else None

    def _close_step(self):
        if self._step_start is not None:
            self._step_spans.append((f"ProfilerStep#{self.step_num}", self._step_start, _P.now_ns(),
                                     _thread_id()))
            self._step_start = None

    def _finish(self, save):
        raw = _P.stop()
        self._recording = False
        self._trace = _Trace(raw, self._rank, self._world_size, self._step_spans)
        self._step_spans = []
        if save and self.on_trace_ready is not None:
            self.on_trace_ready(self)

    # --- the results ----------------------------------------------------------------------------------
    def _require_trace(self, what):
        if self._trace is None:
            raise RuntimeError(f"profile.{what}: no trace recorded yet (profile a block first)")
        return self._trace

    def events(self):
        trace = self._require_trace("events")
        return EventList(trace.events, trace)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        if group_by_input_shape and not self.record_shapes:
            raise ValueError("key_averages: group_by_input_shape needs profile(record_shapes=True)")
        return self.events().key_averages(group_by_input_shape)

    def export_chrome_trace(self, path):
        self._require_trace("export_chrome_trace").export_chrome_trace(path)

    def trace_json(self):
        """The trace as the dict export_chrome_trace writes."""
        return self._require_trace("trace_json").chrome_json()


def _thread_id():
    """The profiler's id of the calling thread (its spans' tid)."""
    return _P.thread_id()


class record_function:
    """A named range in the trace (a context manager or a decorator), as
    torch.profiler.record_function. Costs nothing outside a session."""

    def __init__(self, name, args=None):
        if not isinstance(name, str):
            raise TypeError(f"record_function: name must be a str, got {type(name).__name__}")
        self.name = name
        self.args = args
        self._start = None

    def __enter__(self):
        self._start = _P.now_ns() if _P.enabled() else None
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._start is not None and _P.enabled():
            _P.add(self.name, "user", self._start, _P.now_ns())
        self._start = None
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with record_function(self.name, self.args):
                return fn(*args, **kwargs)
        return wrapped
