"""meshflow.profiler: spans of eager ops, autograd nodes, graph steps,
DataLoader batches and record_function ranges; tables, schedules, Chrome
traces, and the merge of ranks' traces."""
import json
import os
import shutil
import subprocess
import sys

import pytest

import meshflow as mf
from meshflow.profiler import ProfilerAction, ProfilerActivity, profile, record_function, schedule


def _names(prof, category=None):
    return [e.name for e in prof.events() if category is None or e.category == category]


def test_eager_ops_are_counted_once_per_call():
    a, b = mf.randn(4, 3), mf.randn(4, 3)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            mf.add(a, b)
        mf.mul(a, b)
    avg = {e.key: e for e in prof.key_averages()}
    assert avg["add"].count == 3
    assert avg["mul"].count == 1
    assert avg["add"].cpu_time_total >= avg["add"].self_cpu_time_total >= 0
    assert abs(avg["add"].cpu_time - avg["add"].cpu_time_total / 3) < 1e-9


def test_nothing_is_recorded_outside_a_session():
    a = mf.randn(3)
    mf.add(a, a)
    with record_function("outside"):
        mf.add(a, a)
    with profile() as prof:
        mf.mul(a, a)
    assert _names(prof) == ["mul"]


def test_record_function_encloses_its_ops_and_backward_nodes_are_spans():
    lin = mf.nn.Linear(5, 3)
    x = mf.randn(8, 5)
    with profile() as prof:
        with record_function("forward"):
            loss = lin(x).relu().sum()
        with record_function("backward"):
            loss.backward()
    events = prof.events()
    forward = next(e for e in events if e.name == "forward")
    assert forward.category == "user"
    inside = [c.name for c in forward.cpu_children]
    assert "addmm" in inside and "relu" in inside and "sum" in inside
    # every op span of the forward lies within it on the same thread
    for c in forward.cpu_children:
        assert forward.time_range.start <= c.time_range.start <= c.time_range.end <= forward.time_range.end
    nodes = [e.name for e in events if e.category == "autograd"]
    assert any("Relu" in n for n in nodes) and any("Addmm" in n for n in nodes), nodes
    back = next(e for e in events if e.name == "backward")
    assert all(e.cpu_parent is not None for e in events if e.category == "autograd")
    assert back.cpu_time_total >= sum(c.cpu_time_total for c in back.cpu_children) - 1e-6


def test_decorator_form():
    @record_function("my_block")
    def block(t):
        return t * 2

    with profile() as prof:
        block(mf.ones(2))
        block(mf.ones(2))
    avg = {e.key: e for e in prof.key_averages()}
    assert avg["my_block"].count == 2


def test_input_shapes_and_grouping():
    with profile(record_shapes=True) as prof:
        mf.add(mf.ones(2, 3), mf.ones(2, 3))
        mf.add(mf.ones(4), mf.ones(4))
        mf.add(mf.ones(4), mf.ones(4))
    adds = [e for e in prof.events() if e.name == "add"]
    assert [[2, 3], [2, 3]] in [e.input_shapes for e in adds]
    grouped = [e for e in prof.key_averages(group_by_input_shape=True) if e.key == "add"]
    counts = sorted((e.count, e.input_shapes) for e in grouped)
    assert counts == [(1, [[2, 3], [2, 3]]), (2, [[4], [4]])]
    table = prof.key_averages(group_by_input_shape=True).table(sort_by="count", row_limit=5)
    assert "Input Shapes" in table and "[[4], [4]]" in table


def test_table_sorting_and_limits():
    a = mf.randn(64, 64)
    with profile() as prof:
        for _ in range(5):
            mf.relu(a)
        mf.matmul(a, a)
    table = prof.key_averages().table(sort_by="count", row_limit=1)
    rows = [line for line in table.splitlines() if line.startswith(("relu", "matmul"))]
    assert len(rows) == 1 and rows[0].startswith("relu") and rows[0].split()[-1] == "5"
    for header in ("Name", "Self CPU %", "Self CPU", "CPU total", "CPU time avg", "# of Calls"):
        assert header in table
    with pytest.raises(ValueError, match="sort_by must be one of"):
        prof.key_averages().table(sort_by="gpu_time")


def test_chrome_trace_is_valid_and_nested(tmp_path):
    lin = mf.nn.Linear(4, 4)
    with profile(record_shapes=True) as prof:
        with record_function("step"):
            lin(mf.randn(2, 4)).sum().backward()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    assert os.listdir(tmp_path) == ["trace.json"]  # written through a temporary file, renamed
    trace = json.loads(path.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    assert len(spans) == len(prof.events())
    assert {"process_name", "thread_name"} <= {m["name"] for m in meta}
    for e in spans:
        assert {"name", "cat", "ts", "dur", "pid", "tid"} <= set(e)
        assert e["dur"] >= 0 and e["pid"] == 0
    step = next(e for e in spans if e["name"] == "step")
    for e in spans:
        if e["tid"] == step["tid"] and e is not step:
            assert step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1e-3
    lin_span = next(e for e in spans if e["name"] == "addmm")
    assert [2, 4] in lin_span["args"]["Input Dims"]
    assert trace["meshflow"]["rank"] == 0 and "wall_minus_steady_us" in trace["meshflow"]


def test_export_to_a_missing_directory_is_a_clear_error(tmp_path):
    with profile() as prof:
        mf.ones(1) + 1
    with pytest.raises(FileNotFoundError, match="does not exist"):
        prof.export_chrome_trace(str(tmp_path / "no" / "trace.json"))


def test_graph_steps_have_one_span_per_plan_node():
    class G(mf.nn.Graph):
        def __init__(self):
            super().__init__()
            self.lin = mf.nn.Linear(6, 3)

        def build(self, x):
            return self.lin(x).relu().sum()

    g = G()
    x = mf.randn(5, 6)
    g(x)  # compiled outside the session
    with profile() as prof:
        g(x)
        g(x)
    events = prof.events()
    steps = [e for e in events if e.name == "graph step"]
    assert len(steps) == 2
    nodes = [e for e in events if e.category == "graph" and e.name != "graph step"]
    assert nodes and len(nodes) % 2 == 0
    assert all(n.cpu_parent in steps for n in nodes)
    per_step = [[n.name for n in s.cpu_children] for s in steps]
    assert per_step[0] == per_step[1]
    assert not [e for e in events if e.category == "op" and e.cpu_parent in steps]


def test_dataloader_batches_are_spans():
    ds = mf.utils.data.TensorDataset(mf.arange(16.0).reshape(8, 2))
    loader = mf.utils.data.DataLoader(ds, batch_size=2)
    with profile() as prof:
        it = iter(loader)
        for _ in range(4):
            next(it)
    data = [e for e in prof.events() if e.category == "data"]
    assert len(data) == 4 and all(e.name.startswith("enumerate(DataLoader)#") for e in data)


def test_schedule_records_only_active_steps():
    actions = [schedule(wait=1, warmup=1, active=2, repeat=1)(i) for i in range(6)]
    assert actions == [ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD,
                       ProfilerAction.RECORD_AND_SAVE, ProfilerAction.NONE, ProfilerAction.NONE]
    ready = []
    a = mf.ones(3)
    with profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=lambda p: ready.append(p.key_averages())) as prof:
        for step in range(6):
            for _ in range(step + 1):
                mf.add(a, a)
            prof.step()
    assert len(ready) == 1
    avg = {e.key: e for e in ready[0]}
    assert avg["add"].count == 3 + 4  # steps 2 and 3
    assert sorted(k for k in avg if k.startswith("ProfilerStep#")) == ["ProfilerStep#2", "ProfilerStep#3"]


def test_on_trace_ready_without_schedule_and_trace_handler(tmp_path):
    with profile(on_trace_ready=mf.profiler.tensorboard_trace_handler(str(tmp_path), worker_name="w")):
        mf.ones(2).sum()
    files = os.listdir(tmp_path)
    assert len(files) == 1 and files[0].startswith("w.") and files[0].endswith(".pt.trace.json")
    assert any(e["name"] == "sum" for e in json.loads((tmp_path / files[0]).read_text())["traceEvents"])


def test_bad_arguments():
    with pytest.raises(NotImplementedError, match="profile_memory"):
        profile(profile_memory=True)
    with pytest.raises(RuntimeError, match="CUDA"):
        profile(activities=[ProfilerActivity.CUDA])
    with pytest.raises(TypeError, match="ProfilerActivity"):
        profile(activities=["cpu"])
    with pytest.raises(ValueError, match="active must be"):
        schedule(wait=0, warmup=0, active=0)
    with pytest.raises(RuntimeError, match="no trace recorded"):
        profile().key_averages()
    with pytest.raises(TypeError, match="name must be a str"):
        record_function(3)
    with profile():
        with pytest.raises(ValueError, match="already active"):
            with profile():
                pass
    with pytest.raises(ValueError, match="group_by_input_shape needs"):
        with profile() as prof:
            mf.ones(1)
        prof.key_averages(group_by_input_shape=True)


def test_merge_rejects_what_is_not_a_meshflow_trace(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"traceEvents": []}))
    out = subprocess.run([sys.executable, "-m", "meshflow.profiler.merge", str(bad), "-o", str(tmp_path / "m.json")],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.path.dirname(
                             os.path.dirname(os.path.abspath(mf.__file__)))))
    assert out.returncode == 2 and "not a meshflow trace" in out.stderr
    assert not (tmp_path / "m.json").exists()


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed")
def test_ranks_write_their_traces_and_merge_onto_one_timeline(tmp_path):
    from test_global import mpirun
    assert mpirun(2, "profiler_ranks.py", str(tmp_path)).count("profiler ranks OK") == 2
    traces = sorted(str(tmp_path / f) for f in os.listdir(tmp_path) if f.startswith("rank"))
    assert len(traces) == 2
    merged = tmp_path / "merged.json"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(mf.__file__))))
    out = subprocess.run([sys.executable, "-m", "meshflow.profiler.merge", *traces, "-o", str(merged)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    spans = [e for e in json.loads(merged.read_text())["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 1}
    assert min(e["ts"] for e in spans) == 0
    for rank in (0, 1):
        comm = [e for e in spans if e["pid"] == rank and e["cat"] == "comm"]
        assert any(e["name"] == "all_reduce" for e in comm), comm
        # the DDP reduction and the graph's collectives run on named threads
    reduce_spans = [e for e in spans if e["name"] == "all_reduce"]
    # the same collective on both ranks overlaps on the merged timeline
    r0 = [e for e in reduce_spans if e["pid"] == 0]
    r1 = [e for e in reduce_spans if e["pid"] == 1]
    assert any(a["ts"] <= b["ts"] + b["dur"] and b["ts"] <= a["ts"] + a["dur"] for a in r0 for b in r1)


def test_autograd_profiler_names():
    with mf.autograd.profiler.profile(record_shapes=True) as prof:
        with mf.autograd.profiler.record_function("block"):
            mf.ones(3).exp()
    assert {"block", "exp"} <= {e.name for e in prof.function_events}
    assert "exp" in prof.table(sort_by="self_cpu_time_total")
    assert prof.self_cpu_time_total >= 0
    with mf.autograd.profiler.profile(enabled=False) as off:
        mf.ones(1).exp()
    with pytest.raises(RuntimeError, match="no trace recorded"):
        off.key_averages()
