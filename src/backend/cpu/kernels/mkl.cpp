// Note [oneMKL at run time]: oneMKL's GEMMs are the fastest measured here for
// large float32 and bfloat16 products on Intel CPUs with AMX (bench/README.md,
// "GEMM libraries"), but Debian does not ship it: tools/install_deps.sh
// unpacks the `mkl` wheel from PyPI (a pinned version, checked by hash) into
// MESHFLOW_DEPS_DIR. meshflow does not link it. The first GEMM that may use
// it dlopens libmkl_rt.so.3 from, in order:
//   1. $MESHFLOW_MKL_LIBRARY, a path;
//   2. the path CMake found at configure time (MESHFLOW_MKL_LIBRARY there);
//   3. the loader's own search (LD_LIBRARY_PATH, a pip-installed `mkl`).
// MESHFLOW_MKL=0 turns it off. RTLD_LOCAL keeps MKL's CBLAS symbols out of
// the global namespace, where OpenBLAS's are: the two libraries export the
// same names. MKL runs on the GNU OpenMP layer, so its threads are libgomp's
// one pool (Note [One thread pool] in CMakeLists.txt) and follow
// set_num_threads and OMP_WAIT_POLICY like every other kernel's.
#include "backend/cpu/kernels/mkl.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace mf::cpu::mkl {
namespace {

constexpr int kThreadingGnu = 3;  // MKL_THREADING_GNU
constexpr int kInterfaceLp64 = 0;  // MKL_INTERFACE_LP64

struct Loaded {
  Library lib{};
  bool ok = false;
  std::string report;
};

template <typename F>
bool bind(void* handle, const char* name, F& fn, std::string& report) {
  fn = reinterpret_cast<F>(dlsym(handle, name));
  if (!fn) report += std::string("  missing symbol ") + name + "\n";
  return fn != nullptr;
}

bool try_load(const std::string& path, Loaded& out) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    out.report += "  " + path + ": " + (why ? why : "not loadable") + "\n";
    return false;
  }
  int (*set_threading)(int) = nullptr;
  int (*set_interface)(int) = nullptr;
  void (*get_version)(char*, int) = nullptr;
  Library lib{};
  bool ok = bind(handle, "MKL_Set_Threading_Layer", set_threading, out.report) &&
            bind(handle, "MKL_Set_Interface_Layer", set_interface, out.report) &&
            bind(handle, "MKL_Get_Version_String", get_version, out.report) &&
            bind(handle, "cblas_sgemm", lib.sgemm, out.report) &&
            bind(handle, "cblas_sgemm_batch_strided", lib.sgemm_batch_strided, out.report) &&
            bind(handle, "cblas_gemm_bf16bf16f32", lib.gemm_bf16bf16f32, out.report);
  if (!ok) {
    dlclose(handle);
    return false;
  }
  // Both must be set before any other MKL call.
  set_interface(kInterfaceLp64);
  set_threading(kThreadingGnu);
  char version[256] = {0};
  get_version(version, int(sizeof(version)) - 1);
  lib.version = version;
  lib.path = path;
  out.lib = lib;
  out.ok = true;
  out.report.clear();
  return true;
}

const Loaded& loaded() {
  static const Loaded state = [] {
    Loaded s;
    if (const char* off = std::getenv("MESHFLOW_MKL"); off && std::string(off) == "0") {
      s.report = "  turned off by MESHFLOW_MKL=0\n";
      return s;
    }
    if (const char* path = std::getenv("MESHFLOW_MKL_LIBRARY"); path && *path) {
      try_load(path, s);
      return s;  // an explicit path is not second-guessed
    }
#ifdef MESHFLOW_MKL_DEFAULT_LIBRARY
    if (try_load(MESHFLOW_MKL_DEFAULT_LIBRARY, s)) return s;
#endif
    try_load("libmkl_rt.so.3", s);
    return s;
  }();
  return state;
}

}  // namespace

const Library* library() {
  const Loaded& s = loaded();
  return s.ok ? &s.lib : nullptr;
}

std::string search_report() { return loaded().report; }

}  // namespace mf::cpu::mkl
