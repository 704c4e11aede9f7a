"""The global view's layouts on 1, 2 and 4 processes (mpirun)."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import meshflow as mf

SCRIPTS = os.path.join(os.path.dirname(__file__), "dist_scripts")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def mpirun(n, script, *args, timeout=300, env=None):
    """Runs dist_scripts/<script> on n ranks (with `env` added to the
    environment); fails the test unless every rank ends well and prints its
    "OK" line."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(mf.__file__))), OMP_NUM_THREADS="1",
               **(env or {}))
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), sys.executable,
           os.path.join(SCRIPTS, script), *args]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


needs_mpi = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed")

# script -> the text each rank prints when all its checks passed (ranks' lines
# may interleave, so they are counted, not split).
SCRIPTS_AND_MARKERS = {
    "global_boxing.py": "transitions OK",      # every boxing transition round-trips
    "global_ops.py": "layouts OK",             # ops and backward equal one process
    "data_parallel.py": "data parallel OK",    # MLP data-parallel equals one process
    "tensor_parallel.py": "tensor parallel OK",  # TP / DP / 2-D blocks equal one process
    "ddp.py": "ddp OK",                        # DistributedDataParallel equals one process
    "graph_global.py": "graph global OK",      # global models in mf.nn.Graph give eager's bits (2x2 mesh on 4)
    "zero_optimizer.py": "zero optimizer OK",  # ZeroRedundancyOptimizer (ZeRO-1) equals one process
    "graph_zero.py": "graph zero OK",          # graph.config.enable_zero stages 1 and 2 equal one process
    "fully_shard.py": "fully_shard OK",        # fully_shard (ZeRO-3) equals one process and DDP
    "sync_batch_norm.py": "sync batch norm OK",  # SyncBatchNorm under DDP equals BatchNorm on one process
}


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("script", sorted(SCRIPTS_AND_MARKERS))
def test_distributed_script_equals_one_process(script, ranks):
    assert mpirun(ranks, script).count(SCRIPTS_AND_MARKERS[script]) == ranks


@needs_mpi
@pytest.mark.parametrize("ranks,mesh", [(2, "1d"), (4, "1d"), (4, "2x2")])
def test_every_sbp_signature_of_every_op_equals_one_process(ranks, mesh):
    out = mpirun(ranks, "sbp_matrix.py", "--mesh", mesh, timeout=900)
    assert out.count("signatures OK") == ranks, out[-2000:]


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


def test_global_tensor_data_needs_to_local():
    g = mf.ones(4, placement=mf.placement("cpu", [0]), sbp=mf.sbp.broadcast)
    assert g.is_global and not mf.ones(2).is_global
    with pytest.raises(RuntimeError, match="to_local"):
        g.numpy()
    assert (g + 1).to_local().tolist() == [2.0, 2.0, 2.0, 2.0]


@needs_mpi
@pytest.mark.parametrize("ranks", [1, 2])
def test_cuda_placements_equal_one_process(ranks):
    """Global tensors and their gradients, boxing, the collectives on CUDA
    tensors, DDP and graph mode on a CUDA placement (dist_scripts/
    cuda_placements.py), on the emulated device, whose collectives stage
    through host memory over MPI. tools/gpu_check.sh runs the same script
    on a GPU, on NCCL."""
    out = mpirun(ranks, "cuda_placements.py", env={"MESHFLOW_EMULATE_CUDA": "1"})
    assert out.count("cuda placements OK") == ranks


@needs_mpi
def test_graph_zero3_checkpoint_saved_on_4_ranks_loads_on_1_and_2(tmp_path):
    assert mpirun(4, "graph_zero.py", "save", str(tmp_path)).count("graph zero save OK") == 4
    for n in (1, 2):
        assert mpirun(n, "graph_zero.py", "load", str(tmp_path)).count("graph zero load OK") == n


@needs_mpi
def test_fully_shard_checkpoint_saved_on_4_ranks_loads_on_1_and_2(tmp_path):
    ckpt = str(tmp_path / "fsdp")
    assert mpirun(4, "fully_shard.py", "save", ckpt).count("fully_shard save OK") == 4
    for n in (1, 2):
        assert mpirun(n, "fully_shard.py", "load", ckpt).count("fully_shard load OK") == n


@needs_mpi
@pytest.mark.parametrize("saved_on", [2, 4])
def test_distributed_checkpoint_loads_in_place_on_other_world_sizes(tmp_path, saved_on):
    assert mpirun(saved_on, "distributed_checkpoint.py", "save", str(tmp_path)).count("dcp save OK") == saved_on
    files = sorted(p.name for p in (tmp_path / "dcp").iterdir())
    assert files[0] == "checkpoint.safetensors" and len(files) == 1 + saved_on
    for n in (1, 2, 4):
        assert mpirun(n, "distributed_checkpoint.py", "load", str(tmp_path), str(saved_on)).count("dcp load OK") == n


@needs_mpi
@pytest.mark.parametrize("saved_on", [2, 4])
def test_global_checkpoint_loads_on_other_world_sizes(tmp_path, saved_on):
    assert mpirun(saved_on, "global_checkpoint.py", "save", str(tmp_path)).count("OK") == saved_on
    assert (tmp_path / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.glob("model.safetensors.shard*"))  # one file per writing rank
    for n in (1, 2, 4):
        assert mpirun(n, "global_checkpoint.py", "load", str(tmp_path), str(saved_on)).count("OK") == n


def test_device_mesh_and_fully_shard_in_one_process():
    from meshflow.distributed.device_mesh import DeviceMesh, init_device_mesh
    from meshflow.distributed.fsdp import FSDPModule, fully_shard
    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    assert mesh.size() == 1 and mesh.ndim == 1 and mesh.get_local_rank("dp") == 0
    assert mesh.placement == mf.placement("cpu", [0]) and mesh == DeviceMesh("cpu", [0])
    assert repr(mesh) == "DeviceMesh('cpu', [0], mesh_dim_names=('dp',))"
    with pytest.raises(ValueError, match="product is the world size"):
        init_device_mesh("cpu", (2,))
    with pytest.raises(ValueError, match="unique"):
        DeviceMesh("cpu", [[0]], mesh_dim_names=("a", "a"))
    mf.manual_seed(0)
    model = mf.nn.Sequential(mf.nn.Linear(4, 8), mf.nn.Tanh(), mf.nn.Linear(8, 2)).double()
    mf.manual_seed(0)
    ref = mf.nn.Sequential(mf.nn.Linear(4, 8), mf.nn.Tanh(), mf.nn.Linear(8, 2)).double()
    fully_shard(model[0], mesh=mesh)
    fully_shard(model, mesh=mesh)
    assert isinstance(model, FSDPModule) and isinstance(model[0], FSDPModule)
    assert model[0].weight.is_global and model[0].weight.sbp == (mf.sbp.split(0),)
    x = mf.randn(5, 4, dtype=mf.float64)
    (model(x) ** 2).sum().backward()
    (ref(x) ** 2).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.to_local().numpy(), q.grad.numpy(), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="hybrid"):
        fully_shard(mf.nn.Linear(2, 2), mesh=mf.placement("cpu", [[0]]))


def test_global_factory_refuses_ranks_outside_the_world():
    world = mf.env.get_world_size()
    for kind in ("cpu",) + (("cuda",) if mf.cuda.is_available() else ()):
        with pytest.raises(ValueError, match=f"names rank {world} but the world has {world} ranks"):
            mf.tensor([1.0, 2.0], placement=mf.placement(kind, list(range(world + 1))), sbp=mf.sbp.split(0))
