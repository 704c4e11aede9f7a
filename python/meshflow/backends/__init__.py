"""meshflow.backends: which device backends and libraries this build has
(torch.backends' names). Note [Device backends] in meshflow/backend.h."""
import types as _types

from meshflow import _C

__all__ = ["cpu", "cuda", "cudnn", "mkl", "mkldnn", "openmp"]


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


def _preferred_blas_library(backend=None):
    """The library that runs float32 and bfloat16 matrix products on the CPU,
    after setting it when `backend` is given: "auto" (the default: the
    fastest measured for each product shape), "openblas", "onednn"
    ("mkldnn") or "mkl" (where oneMKL is installed). Mirrors
    torch.backends.cuda.preferred_blas_library. Note [Choosing a GEMM
    library] in src/backend/cpu/kernels/gemm.cpp."""
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"preferred_blas_library: expected a str or None, got {type(backend).__name__}")
    return _C._preferred_blas_library(backend)


def _blas_choices():
    """What "auto" measured and chose, one dict per product shape: dtype,
    batch, n, m, k, a_transposed, b_transposed, threads, library and the
    seconds each candidate library took for one product."""
    return _C._blas_choices()


cpu = _module("cpu", "The CPU backend (always built).", get_cpu_capability=_cpu_capability,
              preferred_blas_library=_preferred_blas_library, blas_choices=_blas_choices,
              clear_blas_choices=lambda: _C._clear_blas_choices())
cuda = _module("cuda", "The CUDA backend: is_built() is true when it was compiled in, with or without a GPU.",
               is_built=lambda: _C._backend_built("cuda"))
cudnn = _module("cudnn", "cuDNN: no meshflow kernel calls it yet.", is_available=lambda: False,
                version=lambda: None)
mkldnn = _module("mkldnn", "oneDNN, which meshflow's CPU convolutions and GEMMs call.", is_available=lambda: True)
mkl = _module("mkl", "oneMKL, loaded at run time where tools/install_deps.sh installed it (or "
               "$MESHFLOW_MKL_LIBRARY names it); the CPU's GEMMs use it where it measures fastest.",
               is_available=lambda: _C._mkl_available(), version=lambda: _C._mkl_version() or None)
openmp = _module("openmp", "OpenMP, meshflow's CPU thread pool.", is_available=lambda: True)
