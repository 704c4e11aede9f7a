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

#include <array>
#include <initializer_list>
#include <mutex>

#include "backend/cuda/cuda_runtime.h"
#include "meshflow/error.h"

namespace mf::cuda::library {

// The first of `names` that opens; throws Error naming `what` when none does.
void* open(std::initializer_list<const char*> names, const char* what);
// The address of `name` in `library`; throws Error when it has none.
void* symbol(void* library, const char* what, const char* name);

template <typename F>
void bind(void* library, const char* what, const char* name, F& fn) {
  fn = reinterpret_cast<F>(symbol(library, what, name));
}

// Whether load() (a library's entry points) succeeds: false where it
// throws Error because the library cannot be opened.
template <typename Load>
bool opens(Load load) {
  try {
    load();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A library's handle for a device: one per device in `handles`, made by
// create(&handle) on first use with the device current.
template <typename H, typename Create>
H device_handle(std::array<H, 64>& handles, std::mutex& mutex, int device, const Create& create) {
  MF_CHECK(device >= 0 && device < int(handles.size()), Error, "cuda: device index ", device, " out of range");
  std::lock_guard<std::mutex> lock(mutex);
  if (!handles[size_t(device)]) {
    DeviceGuard guard(device);
    create(&handles[size_t(device)]);
  }
  return handles[size_t(device)];
}

}  // namespace mf::cuda::library
