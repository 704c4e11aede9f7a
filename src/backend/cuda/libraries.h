// Note [Lazily loaded CUDA libraries]: libmeshflow links the CUDA runtime
// statically, and the runtime opens the driver only when a CUDA call needs
// it, so importing meshflow needs neither a driver nor a GPU. The libraries
// beside the runtime (cuBLAS, cuDNN, NCCL) are opened with dlopen on their
// first use, for the same reason: a process that never multiplies, convolves
// or communicates on a GPU never needs them, and one that does gets a clear
// error where they are missing. Each library's entry points are a struct of
// function pointers typed by the library's own declarations (decltype), so
// the headers check every call and nothing links against the library.
#pragma once

#include <initializer_list>

namespace mf::cuda::library {

// The first of `names` that opens; throws Error naming `what` when none does.
void* open(std::initializer_list<const char*> names, const char* what);
// The address of `name` in `library`; throws Error when it has none.
void* symbol(void* library, const char* what, const char* name);

template <typename F>
void bind(void* library, const char* what, const char* name, F& fn) {
  fn = reinterpret_cast<F>(symbol(library, what, name));
}

}  // namespace mf::cuda::library
