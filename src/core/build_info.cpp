// mf::build_info (include/meshflow/version.h): what the loaded libraries and
// the CPU report at run time.
#include <cblas.h>
#include <mpi.h>
#include <oneapi/dnnl/dnnl.h>

#include <sstream>

#include "meshflow/backend.h"
#include "meshflow/cpu_blas.h"
#include "meshflow/version.h"

namespace mf {

namespace {

std::string onednn_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

// The x86 features the kernels (and the libraries under them) can use,
// as the CPU reports them.
std::string cpu_features() {
  std::ostringstream os;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const std::pair<const char*, bool> features[] = {
      {"sse4.2", __builtin_cpu_supports("sse4.2")},   {"avx", __builtin_cpu_supports("avx")},
      {"avx2", __builtin_cpu_supports("avx2")},       {"fma", __builtin_cpu_supports("fma")},
      {"avx512f", __builtin_cpu_supports("avx512f")}, {"avx512bw", __builtin_cpu_supports("avx512bw")},
      {"avx512vl", __builtin_cpu_supports("avx512vl")}, {"avx512vnni", __builtin_cpu_supports("avx512vnni")},
      {"avx512bf16", __builtin_cpu_supports("avx512bf16")},
  };
  for (const auto& [name, present] : features)
    if (present) os << (os.tellp() > 0 ? " " : "") << name;
#endif
  return os.str();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> build_info() {
  std::vector<std::pair<std::string, std::string>> info;
  info.emplace_back("meshflow", version());
  info.emplace_back("git revision", git_revision());
#if defined(__clang__)
  info.emplace_back("compiler", std::string("clang ") + __clang_version__);
#elif defined(__GNUC__)
  info.emplace_back("compiler", std::string("gcc ") + __VERSION__);
#endif
  info.emplace_back("C++ standard", std::to_string(__cplusplus));
  info.emplace_back("OpenBLAS", std::string(openblas_get_config()) + " (core " + openblas_get_corename() + ")");
  const dnnl_version_t* dnnl = dnnl_version();
  info.emplace_back("oneDNN", std::to_string(dnnl->major) + "." + std::to_string(dnnl->minor) + "." +
                                  std::to_string(dnnl->patch) + " (" + dnnl->hash + ")");
  info.emplace_back("oneDNN ISA", onednn_isa());
  info.emplace_back("oneMKL", cpu::mkl_available() ? cpu::mkl_version() : "not loaded");
  info.emplace_back("GEMM library", cpu::blas_library_name(cpu::preferred_blas_library()));
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  MPI_Get_library_version(mpi, &length);
  std::string mpi_text(mpi, size_t(length));
  if (const auto end = mpi_text.find_first_of("\r\n,"); end != std::string::npos) mpi_text.resize(end);
  info.emplace_back("MPI", mpi_text);
  info.emplace_back("CPU features", cpu_features());
  std::string backends;
  for (int type = 0; type < kNumDeviceTypes; ++type)
    if (has_backend(DeviceType(type))) backends += (backends.empty() ? "" : " ") + std::string(device_type_name(DeviceType(type)));
  info.emplace_back("backends", backends);
  return info;
}

}  // namespace mf
