// The CUDA backend's device verbs on a real GPU (Note [CUDA backend]);
// skipped where the backend is not built or sees no device. tools/gpu_check.sh
// runs these on a GPU machine.
#include "meshflow/backend.h"
#include "test_util.h"

namespace mf {
namespace {
using testing::expect_values;

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!has_backend(DeviceType::CUDA)) GTEST_SKIP() << "the CUDA backend is not built";
    if (get_backend(DeviceType::CUDA).device_count() == 0) GTEST_SKIP() << "no CUDA device is visible";
  }
  Backend& cuda() { return get_backend(DeviceType::CUDA); }
  const Device dev0{DeviceType::CUDA, 0};
};

TEST_F(CudaBackendTest, CopiesRoundTripAndCountMemory) {
  cuda().synchronize(0);
  const int64_t before = memory_stats(dev0).allocated_bytes;
  Tensor x = transpose(reshape(arange(12.0, DType::Float64), {3, 4}), 0, 1);
  Tensor on_gpu = to(x, dev0);
  EXPECT_EQ(on_gpu.device(), dev0);
  EXPECT_GE(memory_stats(dev0).allocated_bytes, before + 96);
  Tensor back = to(on_gpu, Device());
  expect_values(back, testing::values(contiguous(x)));
  on_gpu = Tensor();
  EXPECT_EQ(memory_stats(dev0).allocated_bytes, before);
}

TEST_F(CudaBackendTest, FreedBlocksAreReusedOnTheirStreamOnly) {
  Allocator& alloc = cuda().allocator(0);
  void* a = alloc.allocate(1 << 20);
  alloc.deallocate(a, 1 << 20);
  void* b = alloc.allocate(1 << 20);
  EXPECT_EQ(a, b);  // the same stream: the cached block
  alloc.deallocate(b, 1 << 20);
  const Stream side = cuda().create_stream(0);
  const Stream previous = cuda().current_stream(0);
  cuda().set_current_stream(side);
  void* c = alloc.allocate(1 << 20);
  EXPECT_NE(c, a);  // another stream does not take the default stream's block
  alloc.deallocate(c, 1 << 20);
  cuda().set_current_stream(previous);
  cuda().synchronize(0);
}

TEST_F(CudaBackendTest, PinnedNonBlockingCopiesAndEvents) {
  Tensor host = pin_memory(arange(double(1 << 16), DType::Float32));
  EXPECT_TRUE(host.is_pinned());
  auto start = cuda().create_event(0, true), end = cuda().create_event(0, true);
  const Stream stream = cuda().current_stream(0);
  start->record(stream);
  Tensor on_gpu = to(host, dev0, /*non_blocking=*/true);
  end->record(stream);
  end->synchronize();
  EXPECT_TRUE(end->query());
  EXPECT_GE(start->elapsed_ms(*end), 0.0);
  expect_values(to(on_gpu, Device()), testing::values(host));
}

TEST_F(CudaBackendTest, DevicesBeyondTheCountAreErrors) {
  const int count = cuda().device_count();
  try {
    to(ones({2}), Device(DeviceType::CUDA, count));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mf
