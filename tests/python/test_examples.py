"""The examples run end to end on small settings."""
import math
import os
import sys

import pytest

import meshflow as mf

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
sys.path.insert(0, EXAMPLES)
import fashion_mnist  # noqa: E402
import gpt  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"
FORTUNES = "/usr/share/games/fortunes"


def fashion_args(tmp_path, epochs, *extra):
    return ["--epochs", str(epochs), "--train-limit", "2048", "--test-limit", "512", "--batch-size", "64",
            "--no-progress", "--checkpoint", str(tmp_path / "ckpt.safetensors"), "--plot",
            str(tmp_path / "loss.png"), *extra]


@pytest.mark.skipif(not os.path.isdir(FASHION), reason="dataset-fashion-mnist is not installed")
def test_fashion_mnist_learns_and_resumes_exactly(tmp_path, capsys):
    full = fashion_mnist.main(fashion_args(tmp_path / "full", 2))
    out = capsys.readouterr().out
    assert "epoch 2:" in out and "test accuracy" in out
    assert full["test_acc"][-1] > 0.70
    assert (tmp_path / "full" / "loss.png").stat().st_size > 1000
    assert (tmp_path / "full" / "ckpt.safetensors").exists()

    # Stop after one epoch, then resume for the second: the same numbers.
    fashion_mnist.main(fashion_args(tmp_path / "split", 2, "--stop-after", "1"))
    resumed = fashion_mnist.main(fashion_args(tmp_path / "split", 2, "--resume"))
    assert "resumed from" in capsys.readouterr().out
    assert resumed["train_loss"] == full["train_loss"]
    assert resumed["test_loss"] == full["test_loss"]
    assert resumed["test_acc"] == full["test_acc"]


@pytest.mark.skipif(not os.path.isdir(FORTUNES), reason="fortunes is not installed")
def test_gpt_trains_and_samples(capsys):
    losses = gpt.main(["--steps", "8", "--layers", "1", "--d-model", "32", "--heads", "2", "--seq", "32",
                       "--batch-size", "8", "--sample-chars", "40", "--log-every", "4", "--lr", "3e-3"])
    out = capsys.readouterr().out
    assert len(losses) == 8 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    assert "held-out loss" in out
    sample = out.split("sample:\n", 1)[1]
    assert len(sample.strip()) >= 20


def test_fashion_mnist_missing_data_is_a_clear_error(tmp_path):
    with pytest.raises(mf.errors.Error, match="dataset-fashion-mnist"):
        fashion_mnist.main(fashion_args(tmp_path, 1, "--data", str(tmp_path / "absent")))


@pytest.mark.parametrize("schedule,graph", [("1f1b", False), ("zbv", False), ("1f1b", True), ("zbv", True)])
def test_gpt_trains_pipelined_under_the_launcher(schedule, graph):
    """examples/gpt.py --pipeline-stages 2 [--graph] on 2 processes (docs/pipeline.md)."""
    import re
    import shutil
    import subprocess
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI is not installed")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(mf.__file__))))
    out = subprocess.run([sys.executable, "-m", "meshflow.distributed.launch", "--nproc-per-node", "2",
                          os.path.join(EXAMPLES, "gpt.py"), "--pipeline-stages", "2", "--schedule", schedule,
                          "--steps", "4", "--layers", "4", "--d-model", "32", "--heads", "2", "--seq", "32",
                          "--log-every", "2", "--microbatches", "4", *(["--graph"] if graph else [])],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    losses = [float(v) for v in re.findall(r"step \d+/4: loss ([0-9.]+)", out.stdout)]
    assert len(losses) == 2 and all(math.isfinite(v) for v in losses), out.stdout
    assert "held-out loss" in out.stdout


DLRM_SMALL = ["--vocab", "100", "--train", "50000", "--test", "10000", "--no-progress"]


def test_dlrm_reaches_the_achievable_auc(tmp_path):
    """examples/dlrm.py in one process: the held-out AUC comes within 0.04
    of the hidden model's (docs/embedding.md)."""
    import dlrm
    auc, achievable = dlrm.main(DLRM_SMALL + ["--data", str(tmp_path / "clicks"), "--store", str(tmp_path / "emb"),
                                              "--plot", str(tmp_path / "loss.png")])
    assert achievable - 0.04 < auc <= achievable + 0.01, (auc, achievable)
    assert (tmp_path / "loss.png").exists()


@pytest.mark.parametrize("processes", [2, 4])
def test_dlrm_under_the_launcher_equals_one_process(tmp_path, processes):
    """Data parallel dense layers (two DistributedDataParallel modules) and
    sharded tables: the same held-out AUC as one process."""
    import re
    import shutil
    import subprocess
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI is not installed")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(mf.__file__))))
    out = subprocess.run([sys.executable, "-m", "meshflow.distributed.launch", "--nproc-per-node", str(processes),
                          os.path.join(EXAMPLES, "dlrm.py"), *DLRM_SMALL, "--data", str(tmp_path / "clicks"),
                          "--store", str(tmp_path / "emb"), "--plot", ""],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    auc, achievable = map(float, re.search(r"held-out AUC ([0-9.]+) \(the hidden model's: ([0-9.]+)\)",
                                           out.stdout).groups())
    assert achievable - 0.04 < auc, (auc, achievable)
