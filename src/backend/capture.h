// Note [Captured steps]: a device backend that can record the work a
// function queues on a stream and replay it as one unit (CUDA Graphs)
// registers a CaptureFn for its device type. Graph mode uses it when
// asked (nn.Graph's config.enable_cuda_graph(), as OneFlow's): a compiled
// step whose shapes are fixed is captured once and replayed on later runs,
// so a run costs one launch instead of one per kernel (docs/graph.md).
//
// capture(device, work) records what work() queues on the device's current
// stream without running it, and returns the recording; replay() runs it on
// the current stream. A kernel that cannot be recorded (it waits for the
// host, or allocates device memory) makes capture() throw, having run
// nothing; the caller then runs its work as usual. An index out of range
// inside a replay is reported when the replay ends (the walks' records are
// read once per replay, not once per op).
#pragma once

#include <functional>
#include <memory>

#include "meshflow/device.h"

namespace mf {

class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual void replay() = 0;
};

using CaptureFn = std::function<std::unique_ptr<CapturedWork>(int device_index, const std::function<void()>& work)>;

// Sets (or, with an empty fn, clears) the capture of a device type.
void register_capture(DeviceType type, CaptureFn fn);
// The recording of work on device, or nullptr where its type has no capture.
std::unique_ptr<CapturedWork> capture(const Device& device, const std::function<void()>& work);

}  // namespace mf
