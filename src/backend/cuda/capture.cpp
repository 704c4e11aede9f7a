// CUDA Graphs for Note [Captured steps] (src/backend/capture.h): the work is
// recorded on a side stream of the device (the legacy default stream cannot
// be recorded) and replayed on the current stream. The index-fault record
// of the side stream, which the recorded walks write, is cleared before and
// read after each replay (Note [Device index kernels]).
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>

#include "backend/capture.h"
#include "backend/common/index_fault.h"
#include "backend/cuda/cublas.h"
#include "backend/cuda/cuda_runtime.h"
#include "meshflow/backend.h"
#include "meshflow/error.h"

namespace mf::cuda {

IndexFault* fault_record(int index, cudaStream_t stream);  // kernels/index.cu

namespace {

class CudaGraphWork final : public CapturedWork {
 public:
  CudaGraphWork(int device, cudaGraphExec_t exec, IndexFault* fault) : device_(device), exec_(exec), fault_(fault) {}
  ~CudaGraphWork() override { (void)cudaGraphExecDestroy(exec_); }
  CudaGraphWork(const CudaGraphWork&) = delete;
  CudaGraphWork& operator=(const CudaGraphWork&) = delete;

  void replay() override {
    DeviceGuard guard(device_);
    cudaStream_t stream = current_stream(device_);
    check_cuda(cudaMemsetAsync(fault_, 0, sizeof(IndexFault), stream), "cudaMemsetAsync (index fault)");
    check_cuda(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
    IndexFault host{};
    check_cuda(cudaMemcpyAsync(&host, fault_, sizeof(IndexFault), cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync (index fault)");
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    MF_CHECK(!host.set, IndexError, "graph: index ", host.value,
             " is out of range in a step replayed as a CUDA graph (run without config.enable_cuda_graph() to "
             "see which op)");
  }

 private:
  int device_;
  cudaGraphExec_t exec_;
  IndexFault* fault_;
};

// The device's side stream, made on first use and kept.
Stream side_stream(Backend& backend, int device) {
  static std::mutex mutex;
  static std::map<int, Stream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(device);
  if (it == streams.end()) it = streams.emplace(device, backend.create_stream(device)).first;
  return it->second;
}

std::unique_ptr<CapturedWork> capture_graph(int device, const std::function<void()>& work) {
  Backend& backend = get_backend(DeviceType::CUDA);
  DeviceGuard guard(device);
  const Stream side = side_stream(backend, device);
  struct Restore {
    Backend& backend;
    Stream previous;
    ~Restore() { backend.set_current_stream(previous); }
  } restore{backend, backend.current_stream(device)};
  backend.set_current_stream(side);
  cudaStream_t stream = current_stream(device);
  // What the recorded kernels use is allocated before the recording, which may not allocate: the
  // side stream's index-fault record and cuBLAS workspace (Note [cuBLAS workspace]).
  IndexFault* fault = fault_record(device, stream);
  if (cublas_available()) cublas_handle(device);
  check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  cudaGraph_t graph = nullptr;
  try {
    work();
  } catch (...) {
    (void)cudaStreamEndCapture(stream, &graph);
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  check_cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  check_cuda(status, "cudaGraphInstantiate");
  return std::make_unique<CudaGraphWork>(device, exec, fault);
}

[[maybe_unused]] const bool kRegistered = [] {
  register_capture(DeviceType::CUDA, capture_graph);
  return true;
}();

}  // namespace
}  // namespace mf::cuda
