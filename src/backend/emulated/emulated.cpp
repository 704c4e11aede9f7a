// Note [Emulated device] in emulated.h.
#include "backend/emulated/emulated.h"

#include <mutex>

#include "backend/capture.h"
#include "backend/common/amp_kernels.h"
#include "backend/common/attention_gemm.h"
#include "backend/common/composed_kernels.h"
#include "backend/common/conv_kernels.h"
#include "backend/common/host_staged.h"
#include "backend/common/index_kernels.h"
#include "backend/common/layout_kernels.h"
#include "backend/common/linalg_kernels.h"
#include "backend/common/loss_kernels.h"
#include "backend/common/mask_kernels.h"
#include "backend/common/pool_kernels.h"
#include "backend/common/random_kernels.h"
#include "backend/common/reduce_kernels.h"
#include "backend/common/resample_kernels.h"
#include "backend/common/rnn_kernels.h"
#include "backend/common/scan_kernels.h"
#include "backend/common/sort_kernels.h"
#include "meshflow/distributed/communicator.h"

namespace mf {

using emulated::EmulatedBackend;
using emulated::GeometryLoops;
using emulated::GeometryReducer;

void emulate_cuda(int devices) {
  MF_CHECK(devices >= 1 && devices <= 64, ValueError, "emulated device: expected 1 to 64 devices, got ", devices);
  static std::mutex mutex;
  static EmulatedBackend* backend = nullptr;  // kept for the process: tensors may outlive any scope
  std::lock_guard<std::mutex> lock(mutex);
  if (backend) {
    MF_CHECK(backend->device_count() == devices, ValueError, "emulated device: installed with ",
             backend->device_count(), " devices already, asked for ", devices);
    return;
  }
  backend = new EmulatedBackend(devices);
  replace_backend(DeviceType::CUDA, backend);
  OpRegistry& registry = OpRegistry::instance();
  constexpr DeviceType kCuda = DeviceType::CUDA;
  for (const OpDef* op : registry.all())
    if (op->name != "to_device") registry.set_kernel(op->name, kCuda, KernelFn());  // the copy is the backend's verb
  elementwise_kernels::register_all<GeometryLoops>(kCuda);
  reduce_kernels::register_all<GeometryReducer>(kCuda);
  composed_kernels::register_all<GeometryLoops, GeometryReducer>(kCuda);
  loss_kernels::register_all<GeometryLoops, GeometryReducer>(kCuda);
  layout_kernels::register_all<GeometryLoops>(kCuda, true);
  index_kernels::register_all<GeometryLoops>(kCuda);
  scan_kernels::register_all<GeometryLoops>(kCuda);
  mask_kernels::register_all<GeometryLoops>(kCuda);
  amp_kernels::register_all<GeometryLoops>(kCuda);
  random_kernels::register_all<GeometryLoops>(kCuda);
  resample_kernels::register_all<GeometryLoops>(kCuda);
  pool_kernels::register_all<GeometryLoops>(kCuda);
  sort_kernels::register_all<GeometryLoops>(kCuda);
  conv_kernels::register_all<GeometryLoops>(kCuda);
  rnn_kernels::register_all<GeometryLoops>(kCuda);
  attention_gemm::register_all<GeometryLoops, emulated::HostBatchedGemm>(kCuda);
  linalg_kernels::register_all<GeometryLoops>(kCuda);
  host_staged::register_all(kCuda);
  distributed::register_device_groups(kCuda, nullptr);  // its collectives are host-staged
  // Note [Captured steps]: host kernels cannot be recorded; the emulated
  // recording keeps the work and runs it again at each replay, so graph
  // mode's recording and replay decisions run on this device too.
  register_capture(kCuda, [](int, const std::function<void()>& work) -> std::unique_ptr<CapturedWork> {
    struct Rerun final : CapturedWork {
      std::function<void()> work;
      void replay() override { work(); }
    };
    auto rerun = std::make_unique<Rerun>();
    rerun->work = work;
    return rerun;
  });
  // The CUDA backend's own kernels (cuBLAS's products, the optimizer
  // updates' launches): the CPU's, on the host memory.
  for (const OpDef* op : registry.all())
    if (!op->view && !op->kernels[size_t(kCuda)] && op->kernels[size_t(DeviceType::CPU)])
      registry.set_kernel(op->name, kCuda, op->kernels[size_t(DeviceType::CPU)], op->scratch[size_t(DeviceType::CPU)]);
}

}  // namespace mf
