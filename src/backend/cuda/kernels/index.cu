// The CUDA kernels of the indexing ops, the scans and the ops sized by a
// mask: the shared tables of backend/common/index_kernels.h, scan_kernels.h
// and mask_kernels.h over cuda::Loops, and
// the fault record through which a walk reports a bad index (Note [Device
// index kernels]).
#include <map>
#include <mutex>
#include <utility>

#include "backend/common/index_kernels.h"
#include "backend/common/mask_kernels.h"
#include "backend/common/scan_kernels.h"
#include "backend/cuda/kernels/loops.cuh"

namespace mf {
namespace cuda {

// One record per device and stream (walks on one stream run in order),
// allocated on first use and kept for the process.
IndexFault* fault_record(int index, cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, IndexFault*> records;
  DeviceGuard guard(index);
  std::lock_guard<std::mutex> lock(mutex);
  IndexFault*& slot = records[{index, stream}];
  if (!slot) check_cuda(cudaMalloc(reinterpret_cast<void**>(&slot), sizeof(IndexFault)), "cudaMalloc (index fault)");
  return slot;
}

namespace {
// Whether the stream's work is being recorded (Note [Captured steps]): the
// record is then cleared before each replay and read after it, not per walk.
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  return status == cudaStreamCaptureStatusActive;
}
}  // namespace

IndexFault* Loops::clear_fault(const Device& device) {
  const int index = device.index();
  DeviceGuard guard(index);
  cudaStream_t stream = current_stream(index);
  IndexFault* record = fault_record(index, stream);
  if (!capturing(stream))
    check_cuda(cudaMemsetAsync(record, 0, sizeof(IndexFault), stream), "cudaMemsetAsync (index fault)");
  return record;
}

std::optional<int64_t> Loops::read_fault(const Device& device, IndexFault* fault) {
  const int index = device.index();
  DeviceGuard guard(index);
  cudaStream_t stream = current_stream(index);
  if (capturing(stream)) return std::nullopt;
  IndexFault host;
  check_cuda(cudaMemcpyAsync(&host, fault, sizeof(IndexFault), cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync (index fault)");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize (index fault)");
  if (!host.set) return std::nullopt;
  return host.value;
}

}  // namespace cuda

namespace {

[[maybe_unused]] const bool kRegistered = [] {
  index_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  scan_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  mask_kernels::register_all<cuda::Loops>(DeviceType::CUDA);
  return true;
}();

}  // namespace
}  // namespace mf
