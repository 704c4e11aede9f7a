// What this build of meshflow is: its version, the commit it was built
// from, and the libraries and CPU features it runs on
// (python -m meshflow.utils.collect_env prints them).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mf {

// The CMake project version, "0.10.0".
const char* version();
// The git commit the library was built from ("" when not built from a
// checkout).
const char* git_revision();
// (name, value) pairs: the compiler, the OpenBLAS, oneDNN and MPI
// libraries loaded, the ISA oneDNN dispatches to, the CPU features the
// kernels can use, and the backends built.
std::vector<std::pair<std::string, std::string>> build_info();

}  // namespace mf
