"""Pipeline parallelism (docs/pipeline.md): the schedules from Python, the
eager schedules on 1, 2 and 4 processes against one process, bad input on
every rank, and a rank that dies or stalls in the middle of a schedule."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import meshflow as mf
import meshflow.nn as nn
import meshflow.nn.functional as F
from meshflow.distributed import pipelining as pp

from test_global import SCRIPTS, mpirun, needs_mpi


@pytest.mark.parametrize("kind,v", [("gpipe", 1), ("1f1b", 1), ("interleaved_1f1b", 2), ("zero_bubble", 1),
                                    ("zbv", 2)])
def test_schedules_are_data(kind, v):
    s = pp.make_schedule(kind, 4, 8, v)
    assert s.kind == kind and s.num_stages == 4 * v and len(s.actions) == 4
    sim = s.simulate()
    formula = {"gpipe": 3 / 11, "1f1b": 3 / 11, "interleaved_1f1b": 3 / 19}.get(kind)
    if formula is not None:
        assert sim.bubble_fraction == pytest.approx(formula, abs=1e-12)
    else:
        assert sim.bubble_fraction < 3 / 11
    names = [str(a) for a in s.actions[0]]
    assert names[0] == "0F0"
    assert all(isinstance(a, pp.Action) for a in s.actions[0])
    text = s.describe()
    assert "rank 3:" in text and "timeline" in text


def test_simulated_bubble_with_costs_and_latency():
    s = pp.make_schedule("1f1b", 2, 4)
    sim = s.simulate(forward=1.0, backward_input=1.0, backward_weight=1.0, latency=0.25)
    assert sim.step_time > s.simulate().step_time
    assert len(sim.timeline) == 2 and sim.peak_activations == [2, 1]


def test_schedule_rules():
    with pytest.raises(ValueError, match="multiple of the number of ranks"):
        pp.make_schedule("interleaved_1f1b", 4, 6, 2)
    with pytest.raises(ValueError, match="expected one of"):
        pp.make_schedule("pipedream", 2, 2)
    with pytest.raises(ValueError, match="exactly two stages per rank"):
        pp.make_schedule("zbv", 2, 4, 3)


def test_pipeline_splits_a_sequential():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    pipe = pp.pipeline(model, split_points=["2", 4])
    assert pipe.num_stages == 3
    assert list(pipe.get_stage_module(1).state_dict()) == ["2.weight", "2.bias"]
    x = mf.randn(5, 3)
    h = x
    for s in range(3):
        h = pipe.get_stage_module(s)(h)
    np.testing.assert_allclose(h.detach().numpy(), model(x).detach().numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="not a child"):
        pp.pipeline(model, split_points=["7"])
    with pytest.raises(ValueError, match="stage would be empty"):
        pp.pipeline(model, split_points=["0"])
    split = pp.pipeline(model, split_spec={"2": pp.SplitPoint.END})
    assert split.num_stages == 2 and list(split.get_stage_module(1).state_dict()) == ["4.weight", "4.bias"]


def test_one_process_schedule_equals_plain_training():
    """One rank, one stage: the schedule is gradient accumulation."""
    mf.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    x, y = mf.randn(8, 3, dtype=mf.float64), mf.randn(8, 2, dtype=mf.float64)
    F.mse_loss(model(x), y).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    schedule = pp.ScheduleGPipe(pp.PipelineStage(model, 0, 1), 4, loss_fn=F.mse_loss)
    losses = []
    out = schedule.step(x, target=y, losses=losses)
    assert tuple(out.shape) == (8, 2) and len(losses) == 4
    for p, e in zip(model.parameters(), expected):
        np.testing.assert_allclose(p.grad.numpy(), e.numpy(), rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="must divide into n_microbatches"):
        schedule.step(x[:6], target=y[:6])
    with pytest.raises(TypeError, match="expected a PipelineStage"):
        pp.ScheduleGPipe(model, 2)


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_eager_schedules_equal_one_process(ranks):
    if ranks == 1:
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(mf.__file__))))
        out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "pipeline_eager.py")], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "pipeline eager OK" in out.stdout
        return
    assert mpirun(ranks, "pipeline_eager.py", timeout=600).count("pipeline eager OK") == ranks


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_graph_schedules_equal_one_process(ranks, tmp_path):
    """Pipelined nn.Graph (GraphModule.set_stage): every schedule, tied
    weights, dropout, BatchNorm, a grad scaler, clipping, checkpoints across
    stage splits and the errors of bad stage layouts."""
    out = mpirun(ranks, "graph_pipeline.py", str(tmp_path), timeout=900)
    assert out.count("graph pipeline OK") == ranks


@needs_mpi
@pytest.mark.parametrize("ranks", [4, 8])
def test_graph_pipeline_with_data_and_tensor_parallel_stages(ranks):
    """2 stages of 2 data-parallel ranks (4), or of 2x2 data x tensor
    parallel meshes (8: the 2x2x2 case) equal one process."""
    assert mpirun(ranks, "graph_pipeline_3d.py", timeout=900).count("graph pipeline 3d OK") == ranks


@needs_mpi
def test_bad_input_fails_on_every_rank():
    assert mpirun(2, "pipeline_errors.py").count("pipeline errors OK") == 2


@needs_mpi
@pytest.mark.parametrize("fault", ["die", "stall"])
@pytest.mark.parametrize("script,waits_in", [
    # Eager: rank 1 stalls in its second forward; rank 0 waits for that micro-batch's gradient.
    ("pipeline_errors.py", "Schedule1F1B.step: action 0RECV_B1 on rank 0"),
    # Graph: rank 1 skips the second step; rank 0 sends its forwards and waits for a gradient.
    ("graph_pipeline_fault.py", "irecv"),
])
def test_a_rank_that_fails_mid_schedule_ends_the_job(fault, script, waits_in):
    from test_distributed import run_failing_job
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
               os.path.join(SCRIPTS, script), fault]
    result, _ = run_failing_job(command, timeout=60, extra_env={"MESHFLOW_COMM_TIMEOUT": "3"})
    assert result.returncode != 0
    if fault == "stall":
        raised = re.search(r"rank 0 raised DistributedError: (.*)", result.stdout)
        assert raised, result.stdout + result.stderr
        assert waits_in in raised.group(1) and "timed out after 3 s" in raised.group(1), raised.group(1)


@needs_mpi
def test_isend_irecv():
    assert mpirun(2, "p2p_nonblocking.py").count("p2p nonblocking OK") == 2


def test_get_schedule_class():
    assert pp.get_schedule_class("1f1b") is pp.Schedule1F1B
    assert pp.get_schedule_class("ScheduleZBVZeroBubble") is pp.ScheduleZBVZeroBubble
    assert pp.get_schedule_class("Interleaved1F1B") is pp.ScheduleInterleaved1F1B
    with pytest.raises(ValueError, match="unknown schedule 'pipedream'"):
        pp.get_schedule_class("pipedream")


@needs_mpi
@pytest.mark.parametrize("n", [1, 2, 4])
def test_collectives_with_async_op(n):
    """Queued collectives (Note [Asynchronous collectives]), beside isend/irecv above."""
    assert mpirun(n, "async_collectives.py").count("async collectives OK") == n
