"""meshflow.backends: which device backends and libraries this build has
(torch.backends' names). Note [Device backends] in meshflow/backend.h."""
import types as _types

from meshflow import _C

__all__ = ["cpu", "cuda", "cudnn", "mkldnn", "openmp"]


def _module(name, doc, **functions):
    m = _types.ModuleType(f"meshflow.backends.{name}", doc)
    for key, fn in functions.items():
        fn.__name__ = fn.__qualname__ = key
        setattr(m, key, fn)
    return m


def _cpu_capability():
    flags = _C._build_info().get("CPU features", "").split()
    if "avx512f" in flags and "avx512bw" in flags and "avx512vl" in flags:
        return "AVX512"
    return "AVX2" if "avx2" in flags else "DEFAULT"


cpu = _module("cpu", "The CPU backend (always built).", get_cpu_capability=_cpu_capability)
cuda = _module("cuda", "The CUDA backend: is_built() is true when it was compiled in, with or without a GPU.",
               is_built=lambda: _C._backend_built("cuda"))
cudnn = _module("cudnn", "cuDNN: no meshflow kernel calls it yet.", is_available=lambda: False,
                version=lambda: None)
mkldnn = _module("mkldnn", "oneDNN, which meshflow's CPU convolutions and GEMMs call.", is_available=lambda: True)
openmp = _module("openmp", "OpenMP, meshflow's CPU thread pool.", is_available=lambda: True)
