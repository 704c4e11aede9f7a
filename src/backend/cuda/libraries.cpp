// The loader of Note [Lazily loaded CUDA libraries].
#include "backend/cuda/libraries.h"

#include <dlfcn.h>

#include "meshflow/error.h"

namespace mf::cuda::library {

void* open(std::initializer_list<const char*> names, const char* what) {
  const char* error = "no candidate names";
  for (const char* name : names) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
    error = dlerror();
  }
  throw Error(detail::concat("cuda: cannot open ", what, " (", *names.begin(), "): ", error));
}

void* symbol(void* library, const char* what, const char* name) {
  void* fn = dlsym(library, name);
  MF_CHECK(fn != nullptr, Error, "cuda: ", what, " has no ", name);
  return fn;
}

}  // namespace mf::cuda::library
