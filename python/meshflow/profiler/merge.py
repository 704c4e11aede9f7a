"""Merges the traces of a job's ranks into one timeline:

    python -m meshflow.profiler.merge trace_rank0.json trace_rank1.json -o merged.json

Each rank's trace (export_chrome_trace) keeps its rank as the process id and
records the wall-clock time of its monotonic clock's zero, so the merge
places every span on one clock; time 0 is the earliest span of the job."""

import argparse
import gzip
import json
import os
import sys

from meshflow.profiler import _write_json_atomically


def _load(path):
    opener = gzip.open if os.fspath(path).endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"merge: cannot read the trace {path!r}: {e}") from None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError(f"merge: {path!r} is not a Chrome trace (no traceEvents list)")
    info = trace.get("meshflow")
    if not isinstance(info, dict) or not isinstance(info.get("wall_minus_steady_us"), (int, float)):
        raise ValueError(f"merge: {path!r} is not a meshflow trace (no meshflow clock record); "
                         "export it with meshflow.profiler.profile.export_chrome_trace")
    return trace


def merge(traces):
    """One trace dict from rank traces (dicts as export_chrome_trace writes);
    two traces of one rank are refused."""
    ranks = {}
    for i, t in enumerate(traces):
        rank = t["meshflow"].get("rank", i)
        if rank in ranks:
            raise ValueError(f"merge: two traces of rank {rank}")
        ranks[rank] = t
    spans = []
    for rank, t in ranks.items():
        shift = t["meshflow"]["wall_minus_steady_us"]
        for e in t["traceEvents"]:
            if e.get("ph") == "X":
                spans.append((rank, shift, e))
    origin = min((shift + e["ts"] for _, shift, e in spans), default=0.0)
    out = []
    for rank, t in sorted(ranks.items()):
        out += [dict(e, pid=rank) for e in t["traceEvents"] if e.get("ph") == "M"]
    for rank, shift, e in spans:
        out.append(dict(e, pid=rank, ts=shift + e["ts"] - origin))
    world = max([t["meshflow"].get("world_size", 1) for t in ranks.values()] + [len(ranks)])
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "meshflow": {"ranks": sorted(ranks), "world_size": world, "wall_origin_us": origin}}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m meshflow.profiler.merge",
                                     description="Merge the profiler traces of a job's ranks into one timeline.")
    parser.add_argument("traces", nargs="+", help="the ranks' trace files (.json or .json.gz)")
    parser.add_argument("-o", "--output", required=True, help="the merged trace to write")
    args = parser.parse_args(argv)
    try:
        merged = merge([_load(p) for p in args.traces])
        _write_json_atomically(args.output, merged)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"merged {len(args.traces)} traces ({len(merged['meshflow']['ranks'])} ranks, "
          f"{sum(1 for e in merged['traceEvents'] if e.get('ph') == 'X')} spans) into {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
