"""What a bug report needs, as torch.utils.collect_env:

    python -m meshflow.utils.collect_env

prints meshflow's version and where it was loaded from, the Python,
operating system and compiler, the OpenBLAS, oneDNN and MPI libraries
loaded (and the ISA oneDNN dispatches to), the CPU model and the features
the kernels can use, the thread settings, and the backends built and the
devices seen. get_env_info() returns the same as (name, value) pairs.
"""
import os
import platform
import sys

__all__ = ["get_env_info", "get_pretty_env_info", "main"]


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _os_name():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def _distribution_version(name):
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version(name)
    except (ImportError, PackageNotFoundError):
        return "not installed"


def get_env_info():
    """[(name, value)] of everything main() prints."""
    import meshflow as mf
    from meshflow import _C
    build = _C._build_info()
    info = [
        ("meshflow", mf.__version__),
        ("meshflow location", os.path.dirname(os.path.abspath(mf.__file__))),
        ("git revision", build.get("git revision") or "not built from a checkout"),
        ("Python", f"{platform.python_version()} ({sys.executable})"),
        ("OS", f"{_os_name()} ({platform.machine()}, kernel {platform.release()})"),
        ("compiler", build.get("compiler", "unknown")),
        ("OpenBLAS", build.get("OpenBLAS", "unknown")),
        ("oneDNN", build.get("oneDNN", "unknown")),
        ("oneDNN ISA", build.get("oneDNN ISA", "unknown")),
        ("MPI", build.get("MPI", "unknown")),
        ("CUDA", "not built (no CUDA backend in this build)"),
        ("numpy", _distribution_version("numpy")),
        ("CPU", _cpu_model()),
        ("CPU features", build.get("CPU features") or "none detected"),
        ("cores", f"{os.cpu_count()} online, {len(os.sched_getaffinity(0))} usable by this process"
         if hasattr(os, "sched_getaffinity") else str(os.cpu_count())),
        ("threads", f"{mf.get_num_threads()} (intra-op pool)"),
    ]
    for name in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MESHFLOW_COMM_TIMEOUT"):
        info.append((name, os.environ.get(name, "unset")))
    info.append(("backends built", build.get("backends", "cpu")))
    devices = ["cpu"]
    if mf.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(mf.cuda.device_count())]
    info.append(("devices seen", ", ".join(devices)))
    return info


def get_pretty_env_info():
    rows = get_env_info()
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name + ':':<{width + 1}} {value}" for name, value in rows)


def main():
    print("Collecting environment information...")
    print(get_pretty_env_info())


if __name__ == "__main__":
    main()
