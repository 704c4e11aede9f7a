#!/usr/bin/env python3
"""The binding floor: what one small op costs from Python through each way
of binding it, all calling the same C++ `mf::add` on two float32[4] tensors.

* pybind11 (Debian's, as meshflow's other bindings): a class holding an
  mf::Tensor, with `__add__` bound by pybind11;
* nanobind 3.1 (PyPI): the same class and method, bound by nanobind;
* meshflow: `a + b` on meshflow's own Tensor, through its METH_FASTCALL
  slot (Note [Fast calls] in python/bindings/fast_calls.cpp).

Each binding also has an empty method (one tensor argument, returns None)
for the floor of a call alone, and `add_noop`: the same add, with the
result dropped in C++ (the cost of wrapping the result). The two modules
are compiled here with g++ against build/libmeshflow.so into
build/binding-floor/. Each runs in its own process, one thread; rounds
alternate the three, and the median per call is reported.

    bash bench/setup_torch_venv.sh     # the bench venv, with nanobind
    PYTHONPATH=python /usr/bin/python3 bench/binding_floor.py [--rounds 21]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "build", "binding-floor")
VENV_PYTHON = os.path.join(HERE, ".venv-torch", "bin", "python")

SOURCE = textwrap.dedent("""\
    #include "meshflow/ops/creation.h"
    #include "meshflow/ops/elementwise.h"
    #include "meshflow/tensor.h"
    #if defined(FLOOR_NANOBIND)
    #include <nanobind/nanobind.h>
    namespace py = nanobind;
    #define FLOOR_MODULE NB_MODULE
    #else
    #include <pybind11/pybind11.h>
    namespace py = pybind11;
    #define FLOOR_MODULE PYBIND11_MODULE
    #endif

    struct T {
      mf::Tensor t;
    };

    FLOOR_MODULE(MODULE_NAME, m) {
    #if defined(FLOOR_NANOBIND)
      py::class_<T>(m, "T")
    #else
      py::class_<T>(m, "T", py::module_local())
    #endif
          .def("__add__", [](const T& a, const T& b) { return T{mf::add(a.t, b.t)}; })
          .def("add_noop", [](const T& a, const T& b) { (void)mf::add(a.t, b.t); })
          .def("noop", [](const T&, const T&) {});
      m.def("make", [](int64_t n, double v) { return T{mf::full({n}, v)}; });
    }
    """)


def nanobind_paths():
    """(include dirs, source file) of nanobind, from the bench venv."""
    code = ("import nanobind, os, json; d = os.path.dirname(nanobind.__file__); "
            "print(json.dumps([nanobind.include_dir(), os.path.join(d, 'ext', 'robin_map', 'include'), "
            "os.path.join(nanobind.source_dir(), 'nb_combined.cpp')]))")
    out = subprocess.run([VENV_PYTHON, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("binding_floor: nanobind is not in bench/.venv-torch; run bench/setup_torch_venv.sh")
    include, robin, combined = json.loads(out.stdout)
    return [include, robin], combined


def build(name, nanobind):
    os.makedirs(OUT, exist_ok=True)
    src = os.path.join(OUT, f"{name}.cpp")
    with open(src, "w") as f:
        f.write(SOURCE.replace("MODULE_NAME", name))
    target = os.path.join(OUT, name + sysconfig.get_config_var("EXT_SUFFIX"))
    lib = os.path.join(ROOT, "build", "libmeshflow.so")
    if os.path.exists(target) and os.path.getmtime(target) > os.path.getmtime(lib):
        return
    cmd = ["g++", "-O2", "-std=c++20", "-shared", "-fPIC", "-fvisibility=hidden", "-DNDEBUG",
           f"-I{os.path.join(ROOT, 'include')}", f"-I{sysconfig.get_paths()['include']}", src]
    if nanobind:
        includes, combined = nanobind_paths()
        cmd += ["-DFLOOR_NANOBIND"] + [f"-I{i}" for i in includes] + [combined]
    cmd += [f"-L{os.path.dirname(lib)}", "-lmeshflow", f"-Wl,-rpath,{os.path.dirname(lib)}", "-o", target]
    subprocess.run(cmd, check=True)


WORKER = textwrap.dedent("""\
    import json, sys, time
    kind, calls = sys.argv[1], int(sys.argv[2])
    if kind == "meshflow":
        import meshflow as mf
        mf.set_num_threads(1)
        a, b = mf.ones(4), mf.full((4,), 2.0)
        cases = {"add": lambda: a + b, "add_noop": None, "noop": None}
    else:
        sys.path.insert(0, sys.argv[3])
        mod = __import__(kind)
        a, b = mod.make(4, 1.0), mod.make(4, 2.0)
        cases = {"add": lambda: a + b, "add_noop": lambda: a.add_noop(b), "noop": lambda: a.noop(b)}
    out = {}
    for name, fn in cases.items():
        if fn is None:
            continue
        for _ in range(100):
            fn()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out[name] = (time.perf_counter() - t0) / calls
    print(json.dumps(out))
    """)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    build("pybind_floor", nanobind=False)
    build("nanobind_floor", nanobind=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.path.join(ROOT, "python"))
    samples = {}
    for _ in range(args.rounds):
        for kind in ("meshflow", "pybind_floor", "nanobind_floor"):
            out = subprocess.run([sys.executable, "-c", WORKER, kind, str(args.calls), OUT], env=env,
                                 capture_output=True, text=True, check=True)
            for name, t in json.loads(out.stdout).items():
                samples.setdefault((kind, name), []).append(t)
    median = {key: statistics.median(v) for key, v in samples.items()}
    print(f"| binding | a + b (us) | add, result dropped (us) | empty call (us) |")
    print("| --- | --- | --- | --- |")
    for kind, label in (("pybind_floor", "pybind11"), ("nanobind_floor", "nanobind 3.1"),
                        ("meshflow", "meshflow (METH_FASTCALL)")):
        cells = [f"{1e6 * median[(kind, n)]:.3f}" if (kind, n) in median else "-" for n in ("add", "add_noop", "noop")]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
