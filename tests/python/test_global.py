"""The global view's layouts on 1, 2 and 4 processes (mpirun)."""
import os
import shutil
import subprocess
import sys

import pytest

import meshflow as mf

SCRIPTS = os.path.join(os.path.dirname(__file__), "dist_scripts")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def mpirun(n, script, timeout=300):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), OMP_NUM_THREADS="1")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), sys.executable,
           os.path.join(SCRIPTS, script)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed")
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_every_boxing_transition_round_trips(ranks):
    out = mpirun(ranks, "global_boxing.py")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("transitions OK") == ranks  # ranks' lines may interleave


def test_placement_and_sbp_values():
    p = mf.placement("cpu", [[0, 1], [2, 3]])
    assert p.hierarchy == (2, 2) and p.ranks == [[0, 1], [2, 3]] and p.type == "cpu"
    assert repr(p) == 'placement(type="cpu", ranks=[[0, 1], [2, 3]])'
    assert mf.sbp.split(1) == mf.sbp.split(1) and mf.sbp.split(0) != mf.sbp.broadcast
    assert repr(mf.sbp.split(0)) == "meshflow.sbp.split(dim=0)"
    with pytest.raises(ValueError):
        mf.placement("cpu", [0, 0])
    with pytest.raises(ValueError):
        mf.placement("cpu", [[0, 1], [2]])


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed")
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_global_ops_and_backward_equal_one_process(ranks):
    out = mpirun(ranks, "global_ops.py")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("layouts OK") == ranks


def test_global_tensor_data_needs_to_local():
    g = mf.ones(4, placement=mf.placement("cpu", [0]), sbp=mf.sbp.broadcast)
    assert g.is_global and not mf.ones(2).is_global
    with pytest.raises(RuntimeError, match="to_local"):
        g.numpy()
    assert (g + 1).to_local().tolist() == [2.0, 2.0, 2.0, 2.0]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed")
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_data_parallel_mlp_equals_one_process(ranks):
    out = mpirun(ranks, "data_parallel.py")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("data parallel OK") == ranks


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed")
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_tensor_parallel_blocks_equal_one_process(ranks):
    out = mpirun(ranks, "tensor_parallel.py")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("tensor parallel OK") == ranks


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed")
@pytest.mark.parametrize("saved_on", [2, 4])
def test_global_checkpoint_loads_on_other_world_sizes(tmp_path, saved_on):
    def run(n, *args):
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), OMP_NUM_THREADS="1")
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), sys.executable,
               os.path.join(SCRIPTS, "global_checkpoint.py"), *args]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert out.stdout.count("OK") == n

    run(saved_on, "save", str(tmp_path))
    assert (tmp_path / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.glob("model.safetensors.shard*"))  # one file per writing rank
    for n in (1, 2, 4):
        run(n, "load", str(tmp_path), str(saved_on))
