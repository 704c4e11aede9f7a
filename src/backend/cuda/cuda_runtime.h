// What the CUDA backend's sources share (only they see the CUDA headers):
// error checks, the current-device guard and the current stream.
#pragma once

#include <cuda_runtime_api.h>

#include "meshflow/error.h"

namespace mf::cuda {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) [[unlikely]] {
    (void)cudaGetLastError();  // clears a sticky error of this call
    throw Error(detail::concat("CUDA error in ", what, ": ", cudaGetErrorName(status), " (",
                               cudaGetErrorString(status), ")"));
  }
}

// Makes `device` current for the scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// The runtime's handle of the calling thread's current stream on `device`
// (Backend::current_stream); nullptr is the legacy default stream.
cudaStream_t current_stream(int device);

}  // namespace mf::cuda
