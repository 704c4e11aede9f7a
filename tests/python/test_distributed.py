"""meshflow.distributed and meshflow.env: scripts run as jobs of 1, 2 and 4
processes, under the launcher and under plain mpirun. Rank r's inputs are a
function of r, so each rank checks every result itself and prints one OK
line; a failing check exits non-zero."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import meshflow as mf
import meshflow.distributed as dist
from meshflow.distributed import launch

# The directory holding the meshflow package this run imports (tools/test.sh
# --sanitize runs another build): the jobs import the same one.
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(mf.__file__)))
pytestmark = pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI (mpirun) is not installed")

WORKER = textwrap.dedent("""
    import os
    import meshflow as mf
    import meshflow.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    assert n == int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")), n
    assert (mf.env.get_rank(), mf.env.get_world_size()) == (rank, n)
    assert mf.env.get_local_rank() == rank  # one machine
    assert mf.env.backend() == ("mpi" if n > 1 or "OMPI_COMM_WORLD_SIZE" in os.environ else "single")

    def values(r, count, offset=0):
        return [float((r * 7 + i * 3) % 11 + 1) for i in range(offset, offset + count)]

    for dtype in (mf.float32, mf.float64, mf.int64, mf.bfloat16):
        t = mf.tensor(values(rank, 6), dtype=dtype).reshape(2, 3)
        dist.all_reduce(t)
        expected = [sum(values(r, 6)[i] for r in range(n)) for i in range(6)]
        assert t.reshape(-1).tolist() == expected, (dtype, t.tolist(), expected)

        t = mf.tensor(values(rank, 4), dtype=dtype)
        dist.all_reduce(t, op="max")
        assert t.tolist() == [max(values(r, 4)[i] for r in range(n)) for i in range(4)]

        t = mf.tensor(values(rank, 4), dtype=dtype)
        dist.broadcast(t, src=n - 1)
        assert t.tolist() == values(n - 1, 4)

        gathered = [mf.zeros(3, dtype=dtype) for _ in range(n)]
        dist.all_gather(gathered, mf.tensor(values(rank, 3), dtype=dtype))
        assert [g.tolist() for g in gathered] == [values(r, 3) for r in range(n)]

        out = mf.zeros(n, 2, dtype=dtype)
        dist.all_gather_into_tensor(out, mf.tensor(values(rank, 2), dtype=dtype))
        assert out.tolist() == [values(r, 2) for r in range(n)]

        out = mf.zeros(2, dtype=dtype)
        dist.reduce_scatter_tensor(out, mf.tensor(values(rank, 2 * n), dtype=dtype))
        assert out.tolist() == [sum(values(r, 2 * n)[2 * rank + i] for r in range(n)) for i in range(2)]

    # Uneven: rank r contributes r + 1 elements.
    gathered = [mf.zeros(r + 1) for r in range(n)]
    dist.all_gather(gathered, mf.tensor(values(rank, rank + 1)))
    assert [g.tolist() for g in gathered] == [values(r, r + 1) for r in range(n)]
    out = mf.zeros(rank + 1)
    dist.reduce_scatter(out, [mf.tensor(values(rank, r + 1)) for r in range(n)])
    assert out.tolist() == [sum(values(r, rank + 1)[i] for r in range(n)) for i in range(rank + 1)]

    # Rank a sends a + 1 rows to every rank.
    rows = mf.full((n * (rank + 1), 2), float(rank))
    out = mf.zeros(sum(a + 1 for a in range(n)), 2)
    dist.all_to_all_single(out, rows, [a + 1 for a in range(n)], [rank + 1] * n)
    assert out[:, 0].tolist() == [float(a) for a in range(n) for _ in range(a + 1)]
    # Rank a sends b + 1 copies of 10 a + b to rank b.
    outputs = [mf.zeros(rank + 1, dtype=mf.int64) for _ in range(n)]
    dist.all_to_all(outputs, [mf.full((b + 1,), 10 * rank + b, dtype=mf.int64) for b in range(n)])
    assert [o.tolist() for o in outputs] == [[10 * a + rank] * (rank + 1) for a in range(n)]

    if n > 1:
        peer = rank ^ 1
        if peer < n:
            got = mf.zeros(3)
            if rank % 2 == 0:
                dist.send(mf.tensor(values(rank, 3)), dst=peer)
                dist.recv(got, src=peer)
            else:
                dist.recv(got, src=peer)
                dist.send(mf.tensor(values(rank, 3)), dst=peer)
            assert got.tolist() == values(peer, 3)
        evens = dist.new_group(list(range(0, n, 2)))
        if rank % 2 == 0:
            t = mf.tensor([float(rank)])
            dist.all_reduce(t, group=evens)
            assert t.tolist() == [float(sum(range(0, n, 2)))]
            assert dist.get_rank(evens) == rank // 2
        else:
            assert evens is dist.GroupMember.NON_GROUP_MEMBER

    try:
        dist.all_reduce(mf.zeros(3, 4).t())
        raise AssertionError("a non-contiguous tensor was accepted")
    except ValueError as e:
        assert "all_reduce: tensor must be contiguous" in str(e)
    dist.barrier()
    print(f"OK rank {rank} of {n}", flush=True)
""")


def mpirun_flags():
    flags = ["--oversubscribe", "--bind-to", "none"]
    return flags + ["--allow-run-as-root"] if os.geteuid() == 0 else flags


def run(command, timeout=60, extra_env=None):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(PACKAGE), OMP_NUM_THREADS="1", **(extra_env or {}))
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def child_states(pid):
    """The states ("R", "S", "Z", ...) of pid's children, read from /proc (not
    through ps, which a test run under a preloaded sanitizer runtime would
    also load: ps then deadlocks in it)."""
    states = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # the process has ended meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            states.append(fields[0])
    return states


def run_failing_job(command, timeout=60, extra_env=None, grace=10):
    """Runs a job that ends abnormally; returns (result, launcher_hung).
    After such a job Open MPI 4.1's mpirun (with Debian's PMIx) sometimes
    crashes or hangs tearing itself down once every rank has ended (Note
    [Launcher teardown] in tests/distributed/expect_failure.sh): what is
    tested is that the ranks end, so a launcher left without a live rank
    gets `grace` seconds and is then killed (launcher_hung)."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(PACKAGE), OMP_NUM_THREADS="1", **(extra_env or {}))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env)
        start, ranks_seen, ranks_gone, hung = time.monotonic(), False, None, False
        while proc.poll() is None:
            now = time.monotonic()
            # The launcher execs mpirun, whose children are the ranks.
            states = child_states(proc.pid)
            ranks_seen = ranks_seen or bool(states)
            if ranks_seen and all(state.startswith("Z") for state in states):
                ranks_gone = ranks_gone or now
                if now - ranks_gone >= grace:
                    proc.kill()
                    hung = True
                    break
            elif now - start >= timeout:
                proc.kill()
                proc.wait()
                raise subprocess.TimeoutExpired(command, timeout)
            time.sleep(0.2)
        proc.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(command, proc.returncode, out.read(), err.read()), hung


def write(tmp_path, text, name="worker.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def expect_ok(result, n):
    assert result.returncode == 0, result.stdout + result.stderr
    # Ranks' lines may interleave in mpirun's output: find them anywhere.
    ranks = sorted(re.findall(r"OK rank (\d+) of (\d+)", result.stdout))
    assert ranks == sorted((str(r), str(n)) for r in range(n)), result.stdout + result.stderr


@pytest.mark.parametrize("n", [1, 2, 4])
def test_collectives_under_the_launcher(tmp_path, n):
    script = write(tmp_path, WORKER)
    expect_ok(run([sys.executable, "-m", "meshflow.distributed.launch", "--nproc-per-node", str(n), script]), n)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_collectives_under_plain_mpirun(tmp_path, n):
    script = write(tmp_path, WORKER)
    expect_ok(run(["mpirun", *mpirun_flags(), "-np", str(n), sys.executable, script]), n)


def test_collectives_in_a_single_process(tmp_path):
    expect_ok(run([sys.executable, write(tmp_path, WORKER)]), 1)


def test_this_process_is_a_group_of_one():
    assert (mf.env.get_rank(), mf.env.get_world_size(), mf.env.get_local_rank()) == (0, 1, 0)
    assert mf.env.backend() == "single" and dist.get_backend() == "single"
    t = mf.tensor([1.0, 2.0])
    dist.all_reduce(t, op="prod")
    assert t.tolist() == [1.0, 2.0]
    out = mf.zeros(2)
    dist.all_gather_into_tensor(out, t)
    assert out.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="all_reduce: op must be one of"):
        dist.all_reduce(t, op="mean")
    with pytest.raises(ValueError, match="broadcast: src must be a world rank"):
        dist.broadcast(t, src=1)
    with pytest.raises(ValueError, match="send: dst must be a world rank"):
        dist.send(t, dst=3)
    with pytest.raises(mf.errors.ShapeError, match="all_to_all: input.shape\\[0\\] must be sum"):
        dist.all_to_all_single(mf.zeros(2), mf.zeros(3), [2], [2])
    with pytest.raises(ValueError, match="all_gather_into_tensor: output_tensor must hold"):
        dist.all_gather_into_tensor(mf.zeros(3), t)


def test_the_launcher_returns_the_job_status(tmp_path):
    script = write(tmp_path, "import sys\nimport meshflow as mf\nmf.env.barrier()\n"
                             "sys.exit(3 if mf.env.get_rank() == 1 else 0)\n")
    result, launcher_hung = run_failing_job([sys.executable, "-m", "meshflow.distributed.launch",
                                             "--nproc-per-node", "2", script])
    assert launcher_hung or result.returncode == 3, result.stdout + result.stderr


def test_a_skipped_collective_raises_on_the_others(tmp_path):
    script = write(tmp_path, textwrap.dedent("""
        import meshflow as mf
        import meshflow.distributed as dist
        t = mf.ones(2)
        dist.all_reduce(t)
        if dist.get_rank() != 0:
            try:
                dist.all_reduce(t)
            except mf.errors.DistributedError as e:
                print(f"rank {dist.get_rank()} raised: {e}", flush=True)
    """))
    result, _ = run_failing_job([sys.executable, "-m", "meshflow.distributed.launch", "--nproc-per-node", "3",
                                 script], extra_env={"MESHFLOW_COMM_TIMEOUT": "2"})
    raised = re.findall(r"rank (\d) raised: all_reduce #2: timed out after 2 s on rank \d", result.stdout)
    assert sorted(raised) == ["1", "2"], result.stdout + result.stderr
    assert result.returncode != 0


def test_collectives_release_the_gil(tmp_path):
    script = write(tmp_path, textwrap.dedent("""
        import threading
        import time
        import meshflow as mf
        import meshflow.distributed as dist
        t = mf.ones(4)
        dist.barrier()
        if dist.get_rank() == 1:
            time.sleep(1.0)
            dist.all_reduce(t)
        else:
            waiting = threading.Thread(target=dist.all_reduce, args=(t,))
            waiting.start()
            ticks = 0
            while waiting.is_alive():
                ticks += 1
                time.sleep(0.01)
            assert ticks >= 20 and t.tolist() == [2.0] * 4, (ticks, t.tolist())
        print(f"OK rank {dist.get_rank()} of 2", flush=True)
    """))
    expect_ok(run([sys.executable, "-m", "meshflow.distributed.launch", "--nproc-per-node", "2", script]), 2)


def test_a_dead_rank_ends_the_job(tmp_path):
    script = write(tmp_path, textwrap.dedent("""
        import os
        import meshflow as mf
        import meshflow.distributed as dist
        t = mf.ones(2)
        dist.all_reduce(t)
        if dist.get_rank() == 1:
            os._exit(5)
        dist.all_reduce(t)
    """))
    result, _ = run_failing_job([sys.executable, "-m", "meshflow.distributed.launch", "--nproc-per-node", "3",
                                 script], timeout=30)
    assert result.returncode != 0


def test_a_rank_that_never_starts_mpi_ends_the_job(tmp_path):
    script = write(tmp_path, textwrap.dedent("""
        import os
        import sys
        if os.environ["OMPI_COMM_WORLD_RANK"] == "1":
            sys.exit(0)  # before any collective: MPI is never initialised here
        import meshflow as mf
        mf.distributed.all_reduce(mf.ones(2))
    """))
    result, _ = run_failing_job([sys.executable, "-m", "meshflow.distributed.launch", "--nproc-per-node", "2",
                                 script], timeout=30, extra_env={"MESHFLOW_COMM_TIMEOUT": "2"})
    assert result.returncode != 0
    assert "MPI initialisation did not complete within 2 s" in result.stderr, result.stderr


def raised_messages(stdout):
    """{rank: message} of the "rank R raised: ..." lines, which mpirun may interleave."""
    return dict(re.findall(r"rank (\d) raised: (.*?)(?=rank \d raised: |\n|$)", stdout))


def run_job(tmp_path, text, n, timeout=60, comm_timeout="120"):
    """(result, seconds) of a job expected to fail (run_failing_job)."""
    script = write(tmp_path, textwrap.dedent(text))
    start = time.monotonic()
    result, _ = run_failing_job([sys.executable, "-m", "meshflow.distributed.launch", "--nproc-per-node", str(n),
                                 script], timeout=timeout, extra_env={"MESHFLOW_COMM_TIMEOUT": comm_timeout})
    return result, time.monotonic() - start


@pytest.mark.parametrize("mode", ["ddp", "global"])
def test_an_uncaught_exception_on_one_rank_aborts_the_job_at_once(tmp_path, mode):
    """Note [Uncaught exceptions]: no rank waits out the 120 s timeout; the
    raising rank's traceback comes before Open MPI's abort notice."""
    result, seconds = run_job(tmp_path, f"""
        import meshflow as mf
        import meshflow.distributed as dist
        mode = {mode!r}
        rank = dist.get_rank()
        model = mf.nn.Linear(4, 2)
        if mode == "ddp":
            model = mf.nn.parallel.DistributedDataParallel(model)
        else:
            p = mf.placement("cpu", [0, 1, 2, 3])
            model = model.to_global(placement=p, sbp=mf.sbp.broadcast)
        for step in range(100):
            x = mf.ones(8, 4) * rank
            if mode == "global":
                x = x.to_global(placement=p, sbp=mf.sbp.split(0))
            if rank == 2 and step == 3:
                raise ZeroDivisionError("rank 2 fails at step 3")
            model(x).sum().backward()
    """, 4)
    assert result.returncode != 0
    assert seconds < 40, (seconds, result.stderr[-3000:])
    err = result.stderr
    assert "ZeroDivisionError: rank 2 fails at step 3" in err, err[-3000:]
    assert "world rank 2 raised an uncaught exception" in err
    abort = err.find("MPI_ABORT")
    assert abort == -1 or err.find("ZeroDivisionError") < abort, err[-3000:]


def test_a_timeout_names_the_missing_rank_and_dumps_the_flight_record(tmp_path):
    result, seconds = run_job(tmp_path, """
        import datetime
        import time
        import meshflow as mf
        import meshflow.distributed as dist
        dist.init_process_group(timeout=datetime.timedelta(seconds=2))
        t = mf.ones(3)
        dist.all_reduce(t)
        if dist.get_rank() == 2:
            time.sleep(8)  # stuck in user code
        else:
            try:
                dist.all_reduce(t)
            except mf.errors.DistributedError as e:
                print(f"rank {dist.get_rank()} raised: {e}", flush=True)
                time.sleep(3)  # the first rank to exit ends the job: let the other one print
    """, 3)
    assert seconds < 45
    raised = raised_messages(result.stdout)
    assert sorted(raised) == ["0", "1"], result.stdout + result.stderr
    for rank, message in raised.items():
        assert message.startswith("all_reduce #2: timed out after 2 s"), message
        assert "world ranks [2] did not reach this call" in message, message
        other = "1" if rank == "0" else "0"
        assert f"world ranks [{other}] are waiting in it too" in message, message
    assert "flight record of rank 0" in result.stderr and "NOT COMPLETED" in result.stderr, result.stderr
    assert re.search(r"#1 all_reduce float32\(3,\) sum: done in", result.stderr), result.stderr


def test_a_timeout_in_graph_mode_names_the_missing_rank(tmp_path):
    result, seconds = run_job(tmp_path, """
        import time
        import numpy as np
        import meshflow as mf
        import meshflow.distributed as dist
        import meshflow.nn.functional as F
        dist.init_process_group(timeout=2)
        rank = dist.get_rank()
        mesh = mf.placement("cpu", [0, 1])

        class TrainGraph(mf.nn.Graph):
            def __init__(self, model, opt):
                super().__init__()
                self.model = model
                self.add_optimizer(opt)

            def build(self, x, y):
                loss = F.cross_entropy(self.model(x), y)
                loss.backward()
                return loss

        model = mf.nn.Linear(8, 4).to_global(mesh, mf.sbp.broadcast)
        graph = TrainGraph(model, mf.optim.SGD(model.parameters(), lr=0.1))
        x = mf.tensor(np.ones((4, 8), np.float32), placement=mesh, sbp=mf.sbp.split(0))
        y = mf.tensor(np.zeros(4, np.int64), placement=mesh, sbp=mf.sbp.split(0))
        graph(x, y)
        try:
            if rank == 1:
                time.sleep(8)
            else:
                graph(x, y).to_local().item()
        except mf.errors.DistributedError as e:
            print(f"rank {rank} raised: {e}", flush=True)
    """, 2)
    assert seconds < 45
    raised = raised_messages(result.stdout)
    assert list(raised) == ["0"], result.stdout + result.stderr
    assert re.match(r"(all_gather|all_reduce) #\d+: timed out after 2 s", raised["0"]), raised
    assert "world ranks [1] did not reach this call" in raised["0"], raised


def test_a_rank_in_another_collective_is_named(tmp_path):
    result, seconds = run_job(tmp_path, """
        import time
        import meshflow as mf
        import meshflow.distributed as dist
        dist.init_process_group(timeout=2)
        t = mf.ones(3)
        try:
            if dist.get_rank() == 1:
                dist.recv(t, src=0)  # a collective could match the other's messages
            else:
                dist.all_reduce(t)
        except mf.errors.DistributedError as e:
            print(f"rank {dist.get_rank()} raised: {e}", flush=True)
            time.sleep(3)  # the first rank to exit ends the job: let the other one print
    """, 2)
    assert seconds < 45
    raised = raised_messages(result.stdout)
    assert sorted(raised) == ["0", "1"], result.stdout + result.stderr
    assert "world rank 1 is in recv, after 0 collectives of this group" in raised["0"], raised
    assert raised["1"].startswith("recv: timed out") and "world rank 0 is in all_reduce #1" in raised["1"], raised


def test_mismatched_collectives_end_in_bounded_time(tmp_path):
    """broadcast on one rank, all_reduce on the others: whatever MPI makes of
    the mismatch, the job is over within the timeout plus the report."""
    result, seconds = run_job(tmp_path, """
        import meshflow as mf
        import meshflow.distributed as dist
        dist.init_process_group(timeout=3)
        t = mf.ones(1000)
        for step in range(3):
            if dist.get_rank() == 0:
                dist.broadcast(t, src=0)
            else:
                dist.all_reduce(t)
    """, 3, timeout=90)
    assert result.returncode != 0
    assert seconds < 45, seconds
    # MPI may notice (message truncated) or the waits time out: a DistributedError either way
    # (ranks' stderr lines may interleave mid-word, so only the class name is matched).
    assert "DistributedError" in result.stderr, result.stderr[-3000:]


def test_mismatched_placements_fail_on_every_rank_at_once(tmp_path):
    result, seconds = run_job(tmp_path, """
        import meshflow as mf
        import meshflow.distributed as dist
        rank = dist.get_rank()
        ranks = [0, 1] if rank == 0 else [0, 1, 2]
        try:
            mf.ones(4).to_global(placement=mf.placement("cpu", ranks), sbp=mf.sbp.broadcast)
        except ValueError as e:
            print(f"rank {rank} raised: {e}", flush=True)
    """, 3)
    assert seconds < 30
    raised = raised_messages(result.stdout)
    assert sorted(raised) == ["0", "1", "2"], result.stdout + result.stderr
    assert all("world ranks [1, 2] pass another placement or sbp than world rank 0" in m for m in raised.values())


def test_split_on_one_rank_and_broadcast_on_another_is_caught(tmp_path):
    result, seconds = run_job(tmp_path, """
        import meshflow as mf
        import meshflow.distributed as dist
        rank = dist.get_rank()
        sbp = mf.sbp.split(0) if rank == 0 else mf.sbp.broadcast
        try:
            mf.ones(4).to_global(placement=mf.placement("cpu", [0, 1]), sbp=sbp)
        except ValueError as e:
            print(f"rank {rank} raised: {e}", flush=True)
    """, 2)
    assert seconds < 30
    raised = raised_messages(result.stdout)
    assert sorted(raised) == ["0", "1"], result.stdout + result.stderr
    assert "world ranks [1] pass another placement or sbp" in raised["0"]


def test_mismatched_groups_fail_in_bounded_time(tmp_path):
    """Note [Subgroup handshake]: ranks 0 and 1 disagree about the group and
    fail at once; rank 2, which rank 0 never contacts, after the timeout
    (unless the job has ended first: a rank that cannot communicate any more
    aborts the job when it exits)."""
    result, seconds = run_job(tmp_path, """
        import meshflow as mf
        import meshflow.distributed as dist
        rank = dist.get_rank()
        comm = dist._dist.world()
        try:
            comm.subgroup([0, 1] if rank == 0 else [0, 1, 2])
        except mf.errors.DistributedError as e:
            print(f"rank {rank} raised: {e}", flush=True)
    """, 3, comm_timeout="3")
    assert seconds < 40
    raised = raised_messages(result.stdout)
    assert {"0", "1"} <= set(raised), result.stdout + result.stderr
    assert "world rank 1 creates a group of world ranks [0, 1, 2] while world rank 0 creates one of [0, 1]" in \
        raised["0"], raised
    assert "2" not in raised or "timed out after 3 s" in raised["2"], raised


def test_init_process_group_checks_its_arguments():
    with pytest.raises(ValueError, match="positive number of seconds"):
        dist.init_process_group(timeout=-1)
    with pytest.raises(TypeError, match="timedelta"):
        dist.init_process_group(timeout="1")
    with pytest.raises(ValueError, match="world_size=4"):
        dist.init_process_group(world_size=4)
    before = dist._dist.comm_timeout()
    import datetime
    dist.init_process_group(timeout=datetime.timedelta(minutes=7))
    assert dist._dist.comm_timeout() == 420.0
    dist._dist.set_comm_timeout(before)


def command_for(*argv, cores=2, is_root=False):
    return launch.build_command(launch.parse_args(list(argv)), cores=cores, is_root=is_root, environ={})


def test_launcher_flags():
    command, env = command_for("--nproc-per-node", "4", "train.py", "--lr", "0.1", is_root=True)
    assert command[:3] == ["mpirun", "-np", "4"]
    assert "--allow-run-as-root" in command and "--oversubscribe" in command
    assert command[-4:] == [sys.executable, "train.py", "--lr", "0.1"]
    assert env["OMP_NUM_THREADS"] == "1"
    command, env = command_for("--nproc-per-node", "2", "train.py")
    assert "--allow-run-as-root" not in command and "--oversubscribe" not in command
    command, env = command_for("--nproc-per-node", "2", "--nnodes", "2", "--hosts", "a,b", "--master-addr", "a",
                               "--master-port", "29500", "train.py")
    assert command[2] == "4" and command[command.index("--host") + 1] == "a:2,b:2"
    assert env["MASTER_ADDR"] == "a" and env["MASTER_PORT"] == "29500"
    with pytest.raises(SystemExit, match="needs --hosts with 2"):
        command_for("--nnodes", "2", "--master-addr", "a", "train.py")
    with pytest.raises(SystemExit, match="only node 0 runs the launcher"):
        command_for("--nnodes", "2", "--node-rank", "1", "--hosts", "a,b", "train.py")
