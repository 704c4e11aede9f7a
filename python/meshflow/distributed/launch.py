"""Starts a meshflow job: N processes of a Python script on each node.

    python -m meshflow.distributed.launch --nproc-per-node 4 train.py --lr 0.1

replaces itself with Open MPI's mpirun (so the job's exit status is this
command's: 0 when every rank succeeded, else the first failing rank's), after
choosing its flags: --allow-run-as-root for root, --oversubscribe when more
processes than cores, no core binding (each rank runs an OpenMP pool), and
OMP_NUM_THREADS = cores / processes unless already set.

Several nodes: mpirun on node 0 starts every rank, reaching the other nodes
over ssh (passwordless ssh and the same paths on every node are required).
Run the launcher once, on node 0, with --nnodes M and --hosts naming the M
nodes (the first is node 0; --master-addr, if given, must be it); other
--node-rank values are refused, since nothing needs to run on those nodes.
"""
import argparse
import os
import shutil
import sys


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m meshflow.distributed.launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1,
                        help="processes per node (default 1)")
    parser.add_argument("--nnodes", type=int, default=1, help="number of nodes (default 1)")
    parser.add_argument("--node-rank", "--node_rank", type=int, default=0,
                        help="this node's index; only node 0 launches")
    parser.add_argument("--master-addr", "--master_addr", default=None,
                        help="node 0's address (exported as MASTER_ADDR)")
    parser.add_argument("--master-port", "--master_port", type=int, default=None,
                        help="exported as MASTER_PORT (MPI needs no port)")
    parser.add_argument("--hosts", default=None, help="comma-separated node names, node 0 first (--nnodes > 1)")
    parser.add_argument("--mpirun", default="mpirun", help="the mpirun program (default: mpirun on PATH)")
    parser.add_argument("--dry-run", action="store_true", help="print the mpirun command instead of running it")
    parser.add_argument("script", help="the Python script every rank runs")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    return parser.parse_args(argv)


def build_command(args, cores=None, is_root=None, environ=None):
    """The mpirun command line and the environment it runs with."""
    cores = cores or os.cpu_count() or 1
    is_root = os.geteuid() == 0 if is_root is None else is_root
    env = dict(os.environ if environ is None else environ)
    if args.nproc_per_node < 1:
        raise SystemExit(f"launch: --nproc-per-node must be at least 1, got {args.nproc_per_node}")
    if args.nnodes < 1:
        raise SystemExit(f"launch: --nnodes must be at least 1, got {args.nnodes}")
    if args.node_rank != 0:
        raise SystemExit(f"launch: only node 0 runs the launcher (got --node-rank {args.node_rank}): mpirun on "
                         "node 0 starts the processes of every node over ssh; see --help")

    command = [args.mpirun, "-np", str(args.nproc_per_node * args.nnodes), "--bind-to", "none"]
    if is_root:
        command.append("--allow-run-as-root")
    if args.nproc_per_node > cores:
        command.append("--oversubscribe")
    if args.nnodes > 1:
        hosts = args.hosts.split(",") if args.hosts else []
        if len(hosts) != args.nnodes:
            raise SystemExit(f"launch: --nnodes {args.nnodes} needs --hosts with {args.nnodes} comma-separated "
                             f"node names (node 0 first), got {args.hosts!r}")
        if args.master_addr is not None and hosts[0] != args.master_addr:
            raise SystemExit(f"launch: --master-addr ({args.master_addr}) must be the first of --hosts "
                             f"({hosts[0]})")
        command += ["--host", ",".join(f"{h}:{args.nproc_per_node}" for h in hosts)]
        env.setdefault("MASTER_ADDR", hosts[0])
    elif args.master_addr is not None:
        env.setdefault("MASTER_ADDR", args.master_addr)
    if args.master_port is not None:
        env.setdefault("MASTER_PORT", str(args.master_port))
    env.setdefault("OMP_NUM_THREADS", str(max(1, cores // args.nproc_per_node)))
    # Local ranks inherit the whole environment; remote ones get these.
    for name in ("PYTHONPATH", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MESHFLOW_COMM_TIMEOUT", "MASTER_ADDR",
                 "MASTER_PORT"):
        if name in env:
            command += ["-x", name]
    command += [sys.executable, args.script] + list(args.script_args)
    return command, env


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    command, env = build_command(args)
    if args.dry_run:
        print(" ".join(command))
        return 0
    program = shutil.which(command[0])
    if program is None:
        raise SystemExit(f"launch: {command[0]} not found; install Open MPI (openmpi-bin) or pass --mpirun")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(program, command, env)


if __name__ == "__main__":
    sys.exit(main())
