// The backend boundary (Note [Device backends]) on an emulated device: host
// memory behind the CUDA device type, so copies, allocation, kernel lookup,
// autograd across devices and the errors are checked without a GPU.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "backend/common/amp_kernels.h"
#include "backend/common/attention_gemm.h"
#include "backend/common/attention_kernels.h"
#include "backend/common/attention_tiles.h"
#include "backend/common/composed_kernels.h"
#include "backend/common/conv_kernels.h"
#include "backend/common/elementwise_kernels.h"
#include "backend/common/gemm_plan.h"
#include "backend/common/host_staged.h"
#include "backend/common/index_kernels.h"
#include "backend/common/layout_kernels.h"
#include "backend/common/linalg_kernels.h"
#include "backend/common/loss_kernels.h"
#include "backend/common/mask_kernels.h"
#include "backend/common/pool_kernels.h"
#include "backend/common/random_kernels.h"
#include "backend/common/sort_kernels.h"
#include "backend/common/resample_kernels.h"
#include "backend/common/rnn_kernels.h"
#include "backend/common/scan_kernels.h"
#include "backend/common/reduce_geometry.h"
#include "backend/common/reduce_kernels.h"
#include "backend/cpu/kernels/math.h"
#include "backend/emulated/emulated.h"
#include "meshflow/amp.h"
#include "meshflow/backend.h"
#include "meshflow/distributed/sbp_rules.h"
#include "meshflow/graph/executor.h"
#include "meshflow/graph/trace.h"
#include "meshflow/nn.h"
#include "meshflow/one_embedding.h"
#include "meshflow/ops/conv.h"
#include "meshflow/ops/resample.h"
#include "meshflow/ops/rnn.h"
#include "distributed/comm_ops.h"
#include "test_util.h"

namespace mf {
namespace {
using testing::expect_close;
using testing::expect_values;
using testing::random_tensor;
using testing::values;
using emulated::EmulatedBackend;
using emulated::GeometryLoops;
using emulated::GeometryReducer;

// The emulated device starts with no kernels but the copy: the CUDA
// backend's own (when it is built) are set aside for the test and put back
// after it.
class EmulatedDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = replace_backend(DeviceType::CUDA, &backend_);
    for (const OpDef* op : OpRegistry::instance().all()) {
      const KernelFn& kernel = op->kernels[size_t(DeviceType::CUDA)];
      if (!kernel || op->name == "to_device") continue;  // the copy: the backend's verb
      set_aside_.push_back({op->name, kernel, op->scratch[size_t(DeviceType::CUDA)]});
      OpRegistry::instance().set_kernel(op->name, DeviceType::CUDA, KernelFn());
    }
  }
  void TearDown() override {
    for (const OpDef* op : OpRegistry::instance().all())
      if (op->name != "to_device") OpRegistry::instance().set_kernel(op->name, DeviceType::CUDA, KernelFn());
    for (auto& [op, kernel, scratch] : set_aside_)
      OpRegistry::instance().set_kernel(op, DeviceType::CUDA, kernel, scratch);
    replace_backend(DeviceType::CUDA, previous_);
  }
  // Runs the CPU kernel of `op` on the emulated device (its memory is host memory).
  void add_kernel(const char* op) {
    const OpDef& def = OpRegistry::instance().get(op);
    OpRegistry::instance().set_kernel(op, DeviceType::CUDA, def.kernels[size_t(DeviceType::CPU)],
                                      def.scratch[size_t(DeviceType::CPU)]);
  }
  EmulatedBackend backend_;
  const Device dev0{DeviceType::CUDA, 0}, dev1{DeviceType::CUDA, 1};
  // t on the first emulated device, and back on the host.
  Tensor on(const Tensor& t) const { return to(t, dev0); }
  static Tensor back(const Tensor& t) { return to(t, Device()); }

 private:
  Backend* previous_ = nullptr;
  struct SetAside {
    std::string op;
    KernelFn kernel;
    ScratchFn scratch;
  };
  std::vector<SetAside> set_aside_;
};

TEST_F(EmulatedDevice, CopiesRoundTripAndUseTheDevicesAllocator) {
  Tensor x = reshape(arange(6.0, DType::Float64), {2, 3});
  Tensor y = to(x, dev0);
  EXPECT_EQ(y.device(), dev0);
  EXPECT_EQ(memory_stats(dev0).allocated_bytes, 48);
  EXPECT_EQ(memory_stats(dev1).allocated_bytes, 0);
  Tensor z = to(y, dev1);  // device to device
  EXPECT_EQ(z.device(), dev1);
  Tensor host = to(z, Device());
  EXPECT_TRUE(host.device().is_cpu());
  expect_values(host, {0, 1, 2, 3, 4, 5});
  EXPECT_EQ(backend_.copies, 3);
  EXPECT_TRUE(to(y, dev0).is_same(y));  // already there: no copy
  EXPECT_EQ(backend_.copies, 3);
  // A strided input is made contiguous on its own device first.
  expect_values(to(to(transpose(x, 0, 1), dev0), Device()), {0, 3, 1, 4, 2, 5});
  y = Tensor();
  z = Tensor();
  EXPECT_EQ(memory_stats(dev0).allocated_bytes, 0);
  EXPECT_EQ(memory_stats(dev1).allocated_bytes, 0);
}

TEST_F(EmulatedDevice, AutogradFlowsBackAcrossTheCopy) {
  add_kernel("mul");
  add_kernel("add");  // the two uses' gradients are summed on the device
  Tensor x = arange(4.0, DType::Float64).requires_grad_();
  Tensor on_device = to(x, dev0);
  Tensor product = mul(on_device, on_device);
  EXPECT_EQ(product.device(), dev0);
  Tensor loss = sum(to(product, Device()));
  loss.backward();
  EXPECT_TRUE(x.grad().device().is_cpu());
  expect_values(x.grad(), {0, 2, 4, 6});
}

TEST_F(EmulatedDevice, ClearErrors) {
  add_kernel("mul");
  Tensor x = ones({3});
  Tensor y = to(x, dev0);
  // Inputs on two devices: both are named.
  try {
    mul(x, y);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  // An op without a kernel there.
  try {
    exp(y);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exp: no kernel for device cuda:0"), std::string::npos) << e.what();
  }
  // A device that does not exist.
  try {
    to(x, Device(DeviceType::CUDA, 5));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:5 does not exist (2 cuda devices)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pin_memory(y), Error);  // not a CPU tensor
  EXPECT_THROW(pin_memory(x), Error);  // the emulated backend has no pinned memory
}

TEST_F(EmulatedDevice, ValuesAreReadThroughAHostCopy) {
  Tensor y = to(arange(3.0), dev0);
  const int copies = backend_.copies;
  EXPECT_EQ(to(full({}, 2.5), dev0).item<double>(), 2.5);
  EXPECT_EQ(y.to_string(), "tensor([0., 1., 2.], device='cuda:0')");
  EXPECT_EQ(to(ones({2}, {.dtype = DType::Float64}), dev0).to_string(),
            "tensor([1., 1.], device='cuda:0', dtype=meshflow.float64)");
  EXPECT_GT(backend_.copies, copies);
}

TEST_F(EmulatedDevice, ViewsRunOnEveryDevice) {
  Tensor y = to(arange(6.0), dev0);
  Tensor v = transpose(reshape(y, {2, 3}), 0, 1);
  EXPECT_EQ(v.device(), dev0);
  EXPECT_TRUE(v.shares_storage(y));
}

TEST_F(EmulatedDevice, CoverageListsWhatEachDeviceLacks) {
  auto missing = OpRegistry::instance().validate();
  auto has = [](const std::vector<std::string>& names, const std::string& op) {
    return std::find(names.begin(), names.end(), op) != names.end();
  };
  const auto& cpu = missing[size_t(DeviceType::CPU)];
  EXPECT_TRUE(cpu.empty()) << cpu.front();
  const auto& cuda = missing[size_t(DeviceType::CUDA)];
  EXPECT_TRUE(std::is_sorted(cuda.begin(), cuda.end()));
  EXPECT_FALSE(has(cuda, "to_device"));  // the copy is the backend's verb
  EXPECT_FALSE(has(cuda, "transpose"));  // a view
  EXPECT_TRUE(has(cuda, "mul"));
  add_kernel("mul");
  EXPECT_FALSE(has(OpRegistry::instance().validate()[size_t(DeviceType::CUDA)], "mul"));
}

TEST_F(EmulatedDevice, ModuleToMovesParametersInPlace) {
  nn::Linear lin(3, 2);
  Tensor weight = lin.weight();
  Tensor before = clone(weight.detach());
  lin.to(dev0);
  EXPECT_EQ(lin.weight().device(), dev0);
  EXPECT_EQ(lin.bias().device(), dev0);
  EXPECT_TRUE(lin.weight().is_same(weight));  // the same parameter object, moved
  lin.to(Device());
  EXPECT_TRUE(lin.weight().device().is_cpu());
  expect_values(lin.weight(), values(before));
}

TEST_F(EmulatedDevice, GraphsRunOnTheDeviceOfTheirValues) {
  for (const char* op : {"mul", "add", "relu", "copy"}) add_kernel(op);
  Tensor w = to(testing::random_tensor({4, 3}, 1, -1, 1, DType::Float32), dev0);
  Tensor b = to(testing::random_tensor({3}, 2, -1, 1, DType::Float32), dev0);
  Tensor x = to(testing::random_tensor({4, 3}, 3, -1, 1, DType::Float32), dev0);
  graph::Graph g;
  {
    graph::Tracer tracer;
    Tensor px = tracer.add_inputs({x})[0];
    g = tracer.finish({relu(add(mul(px, w), b))});
  }
  const int64_t before = memory_stats(dev0).allocated_bytes;
  graph::Executable exe(std::move(g));
  EXPECT_GT(memory_stats(dev0).allocated_bytes, before);  // the arena is the device's memory
  for (uint32_t seed : {5u, 6u}) {
    Tensor xs = testing::random_tensor({4, 3}, seed, -1, 1, DType::Float32);
    Tensor got = exe.run({to(xs, dev0)})[0];
    EXPECT_EQ(got.device(), dev0);
    const Tensor host_w = to(w, Device()), host_b = to(b, Device());
    testing::expect_close(to(got, Device()), relu(add(mul(xs, host_w), host_b)), 0, 0);
  }
  // An input on another device than the graph's is refused.
  try {
    exe.run({testing::random_tensor({4, 3}, 7, -1, 1, DType::Float32)});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 0 is on cpu but the graph was compiled for cuda:0"),
              std::string::npos) << e.what();
  }
}

TEST(HostEvents, TimeStampsOfTheCpuBackend) {
  Backend& cpu = get_backend(DeviceType::CPU);
  auto start = cpu.create_event(0, true);
  auto end = cpu.create_event(0, true);
  EXPECT_THROW(start->elapsed_ms(*end), Error);  // not recorded yet
  const Stream stream = cpu.current_stream(0);
  start->record(stream);
  end->record(stream);
  EXPECT_TRUE(end->query());
  EXPECT_GE(start->elapsed_ms(*end), 0.0);
  auto untimed = cpu.create_event(0, false);
  untimed->record(stream);
  EXPECT_THROW(start->elapsed_ms(*untimed), Error);
  EXPECT_EQ(cpu.current_stream(0), (Stream{Device(), 0}));
}

}  // namespace
}  // namespace mf

namespace mf {
namespace {

// A backend folder's kernel may be registered before its op (static
// initialisers run in any order): the op gets it when it is added.
TEST(OpRegistryKernels, AKernelMayComeBeforeItsOp) {
  OpRegistry& registry = OpRegistry::instance();
  registry.set_kernel("test_kernel_first", DeviceType::CPU,
                      [](const TensorList& in, TensorList& out, const Attrs&) { copy_(out[0], in[0]); });
  try {
    registry.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel was registered for unknown op 'test_kernel_first'"),
              std::string::npos) << e.what();
  }
  registry.add(OpDef{
      .name = "test_kernel_first",
      .inputs = {"input"},
      .infer = [](const TensorList& in, const Attrs&) {
        return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
      },
      .differentiable = false,
      .sbp = sbp::broadcast_only(),
  });
  const auto missing = registry.validate();
  const auto& cpu = missing[size_t(DeviceType::CPU)];
  EXPECT_EQ(std::find(cpu.begin(), cpu.end(), "test_kernel_first"), cpu.end());
  Tensor x = arange(4.0);
  testing::expect_values(dispatch::apply_one(registry.get("test_kernel_first"), {x}), {0, 1, 2, 3});
}

TEST_F(EmulatedDevice, SharedElementwiseTableRunsOverAnotherBackendsLoops) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  const Tensor a = random_tensor({3, 1, 5}, 1, -2, 2), b = random_tensor({4, 5}, 2, -2, 2);
  const Tensor m = random_tensor({6, 7}, 3, -2, 2), c = random_tensor({2, 3, 4}, 4, -2, 2);
  // Broadcast, transposed, permuted (three dims that do not merge) and
  // sliced operands, against the CPU kernels.
  expect_close(back(add(on(a), on(b))), add(a, b));
  expect_close(back(mul(transpose(on(m), 0, 1), transpose(on(m), 0, 1))), mul(transpose(m, 0, 1), transpose(m, 0, 1)));
  expect_close(back(exp(permute(on(c), {2, 0, 1}))), exp(permute(c, {2, 0, 1})), 1e-6, 1e-6);
  expect_close(back(gelu(slice(on(m), 1, 1, 6, 2), "tanh")), gelu(slice(m, 1, 1, 6, 2), "tanh"), 1e-6, 1e-6);
  expect_close(back(gelu(on(m))), gelu(m), 1e-6, 1e-6);
  expect_close(back(lgamma(transpose(on(m), 0, 1))), lgamma(transpose(m, 0, 1)), 0, 0);
  expect_close(back(digamma(on(m))), digamma(m), 0, 0);
  expect_close(back(polygamma(3, on(m))), polygamma(3, m), 0, 0);
  expect_close(back(clamp(on(m), Scalar(-0.5), Scalar(0.5))), clamp(m, Scalar(-0.5), Scalar(0.5)));
  expect_close(back(pow(on(m), Scalar(3))), pow(m, Scalar(3)), 1e-6, 1e-6);
  expect_close(back(maximum(on(a), on(b))), maximum(a, b));
  // Bool results, bool and integer inputs.
  const Tensor above = gt(a, b);  // on the CPU
  EXPECT_EQ(back(gt(on(a), on(b))).dtype(), DType::Bool);
  expect_close(to(back(gt(on(a), on(b))), DType::Float32), to(above, DType::Float32));
  expect_close(to(back(bitwise_not(on(above))), DType::Float32), to(bitwise_not(above), DType::Float32));
  const Tensor i = to(mul(random_tensor({5, 4}, 5, -9, 9), 1.0), DType::Int64);
  const Tensor j = add(to(random_tensor({4}, 6, 1, 4), DType::Int64), to(ones({4}), DType::Int64));
  expect_close(to(back(div(on(i), on(j), "floor")), DType::Float64), to(div(i, j, "floor"), DType::Float64), 0, 0);
  expect_close(to(back(remainder(on(neg(i)), on(j))), DType::Float64), to(remainder(neg(i), j), DType::Float64), 0, 0);
  // Selection, with a broadcast condition and a one-element branch or value.
  expect_close(back(where(on(gt(a, 0.0)), on(b), Scalar(0.5))), where(gt(a, 0.0), b, Scalar(0.5)));
  expect_close(back(where(on(above), on(a), on(b))), where(above, a, b));
  expect_close(back(masked_fill(on(m), on(gt(m, 0.3)), Scalar(-7.0))), masked_fill(m, gt(m, 0.3), Scalar(-7.0)));
  // Copies: within a dtype (transposed), between dtypes (to float16, bool
  // and int64, from bool), broadcast into a strided destination.
  expect_close(back(contiguous(transpose(on(m), 0, 1))), contiguous(transpose(m, 0, 1)));
  expect_close(to(back(to(on(m), DType::Float16)), DType::Float32), to(to(m, DType::Float16), DType::Float32));
  expect_close(to(back(to(on(m), DType::Bool)), DType::Float32), to(to(m, DType::Bool), DType::Float32));
  expect_close(to(back(to(on(mul(m, 4.0)), DType::Int64)), DType::Float64), to(to(mul(m, 4.0), DType::Int64), DType::Float64), 0, 0);
  expect_close(back(to(on(above), DType::Float32)), to(above, DType::Float32));
  Tensor dst = on(zeros({7, 6})), host_dst = zeros({7, 6});
  Tensor dst_t = transpose(dst, 0, 1), host_dst_t = transpose(host_dst, 0, 1);
  const Tensor row = random_tensor({1, 7}, 7, -1, 1);
  copy_(dst_t, on(row));
  copy_(host_dst_t, row);
  expect_close(back(dst), host_dst);
  // Fills and ranges made on the device.
  const TensorOptions device_f32{.dtype = DType::Float32, .device = dev0};
  expect_close(back(full({2, 3}, Scalar(2.5), device_f32)), full({2, 3}, Scalar(2.5)));
  expect_close(back(arange(Scalar(1.0), Scalar(4.0), Scalar(0.5), DType::Float64, dev0)),
               arange(Scalar(1.0), Scalar(4.0), Scalar(0.5), DType::Float64), 0, 0);
  expect_close(to(back(arange(Scalar(-3), Scalar(20), Scalar(4), DType::Int32, dev0)), DType::Float64),
               to(arange(Scalar(-3), Scalar(20), Scalar(4), DType::Int32), DType::Float64), 0, 0);
  expect_close(back(linspace(-1.0, 2.0, 7, device_f32)), linspace(-1.0, 2.0, 7, {.dtype = DType::Float32}), 0, 0);
  expect_close(back(eye(3, 4, device_f32)), eye(3, 4, {.dtype = DType::Float32}));
  expect_close(to(back(empty({5}, {.dtype = DType::Bool, .device = dev0})), DType::Float32), zeros({5}));
}

TEST_F(EmulatedDevice, SharedReductionTableRunsOverAnotherBackendsLoops) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  GeometryReducer::plans.clear();
  auto as_f64 = [](const Tensor& t) { return to(t, DType::Float64); };
  // One long line: a block per output, the range cut into chunks.
  const Tensor big = random_tensor({200000}, 11, -1, 1);
  expect_close(back(sum(on(big))), sum(big), 1e-3, 1e-5);
  expect_close(back(mean(on(big))), mean(big), 1e-6, 1e-5);
  expect_close(back(var(on(big))), var(big), 1e-6, 1e-5);
  expect_close(back(logsumexp(on(big), {0})), logsumexp(big, {0}), 1e-5, 1e-5);
  expect_close(back(amax(on(big))), amax(big), 0, 0);
  expect_close(as_f64(back(argmax(on(big)))), as_f64(argmax(big)), 0, 0);
  // A tall (N, 3) reduced over N: a thread per output, in chunks.
  const Tensor tall = random_tensor({40000, 3}, 12, -1, 1);
  expect_close(back(sum(on(tall), {0})), sum(tall, {0}), 1e-3, 1e-5);
  expect_close(back(std(on(tall), {0})), std(tall, {0}), 1e-6, 1e-5);
  const ValuesIndices tall_max = max(on(tall), 0), tall_max_cpu = max(tall, 0);
  expect_close(back(tall_max.values), tall_max_cpu.values, 0, 0);
  expect_close(as_f64(back(tall_max.indices)), as_f64(tall_max_cpu.indices), 0, 0);
  // Rows of 100 (a warp per output), transposed and permuted layouts.
  const Tensor wide = random_tensor({50, 100}, 13, -2, 2);
  expect_close(back(sum(on(wide), {1})), sum(wide, {1}), 1e-5, 1e-5);
  expect_close(back(norm(on(wide), 3.0, {1})), norm(wide, 3.0, {1}), 1e-5, 1e-5);
  expect_close(back(norm(transpose(on(wide), 0, 1), 2.0, {0}, true)), norm(transpose(wide, 0, 1), 2.0, {0}, true), 1e-5, 1e-5);
  expect_close(back(norm(on(wide), INFINITY)), norm(wide, INFINITY), 0, 0);
  expect_close(as_f64(back(argmin(transpose(on(wide), 0, 1), 0))), as_f64(argmin(transpose(wide, 0, 1), 0)), 0, 0);
  expect_close(as_f64(back(argmax(transpose(on(wide), 0, 1)))), as_f64(argmax(transpose(wide, 0, 1))), 0, 0);
  // (permuted on the device: a copy to it would make the view dense)
  const Tensor cube_base = random_tensor({4, 5, 6}, 14, -1, 1), cube = permute(cube_base, {2, 0, 1});
  const Tensor cube_dev = permute(on(cube_base), {2, 0, 1});
  expect_close(back(sum(cube_dev, {0, 2})), sum(cube, {0, 2}), 1e-5, 1e-5);
  expect_close(back(amin(cube_dev, {1})), amin(cube, {1}), 0, 0);
  expect_close(back(prod(cube_dev, 1)), prod(cube, 1), 1e-6, 1e-5);
  const Tensor block = random_tensor({4, 5, 6}, 17, -1, 1);  // reduced dims 0 and 2 do not merge
  expect_close(back(var(on(block), {0, 2})), var(block, {0, 2}), 1e-6, 1e-5);
  // A broadcast reduced dim (Note [Broadcast reduced dims]): its copies.
  const Tensor row = random_tensor({1, 7}, 15, -1, 1);
  expect_close(back(sum(expand(on(row), {1000, 7}), {0})), sum(expand(row, {1000, 7}), {0}), 1e-4, 1e-5);
  expect_close(as_f64(back(argmax(expand(on(row), {1000, 7}), 0))), as_f64(zeros({7})), 0, 0);
  // Ties keep the first position; NaN wins.
  const Tensor ties = from_vector({1, 3, 3, 0, 2, 2, 5, 5}, {2, 4});
  expect_close(as_f64(back(argmax(on(ties), 1))), from_vector({1, 2}, {2}, {.dtype = DType::Float64}), 0, 0);
  // ... across the lanes of a warp (positions 33 and 64 are lanes 1 and 0)
  // and against the identity (all -inf).
  std::vector<double> spaced(100, 0.0);
  spaced[33] = spaced[64] = 5.0;
  expect_close(as_f64(back(argmax(on(from_vector(spaced, {100}))))), from_vector({33}, {}, {.dtype = DType::Float64}), 0, 0);
  expect_close(as_f64(back(argmax(on(full({3, 40}, Scalar(-INFINITY))), 1))), as_f64(zeros({3})), 0, 0);
  const Tensor with_nan = from_vector({1, NAN, 3, NAN}, {4});
  expect_close(as_f64(back(argmax(on(with_nan)))), from_vector({1}, {}, {.dtype = DType::Float64}), 0, 0);
  // Integer, bool and empty reductions.
  const Tensor ints = to(mul(random_tensor({6, 9}, 16, -50, 50), 1.0), DType::Int8);
  expect_close(as_f64(back(sum(on(ints), {1}))), as_f64(sum(ints, {1})), 0, 0);
  const Tensor flags = gt(wide, 1.5);
  expect_close(as_f64(back(any(on(flags), 1))), as_f64(any(flags, 1)), 0, 0);
  expect_close(as_f64(back(all(on(flags), 0))), as_f64(all(flags, 0)), 0, 0);
  expect_close(back(sum(on(zeros({3, 0})), {1})), zeros({3}), 0, 0);
  expect_close(back(norm(on(zeros({3, 0})), -1.0, {1})), zeros({3}), 0, 0);
  // The plans above used every kernel shape.
  bool chunked_block = false, chunked_thread = false, warp = false;
  for (const ReducePlan& p : GeometryReducer::plans) {
    chunked_block |= p.group == kReduceBlockThreads && p.chunks > 1;
    chunked_thread |= p.group == 1 && p.chunks > 1;
    warp |= p.group == 32;
  }
  EXPECT_TRUE(chunked_block && chunked_thread && warp);
}

TEST_F(EmulatedDevice, ComposedSoftmaxAndNormsRunOverAnotherBackendsLoops) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  composed_kernels::register_all<GeometryLoops, GeometryReducer>(DeviceType::CUDA);
  auto run_op = [](const char* name, const TensorList& in, const Attrs& attrs) {
    return dispatch::apply(dispatch::op(name), in, attrs);
  };
  const Tensor x = random_tensor({3, 5, 4}, 21, -3, 3), g = random_tensor({3, 5, 4}, 22, -1, 1);
  for (int64_t dim : {0, 1, 2}) {
    expect_close(back(softmax(on(x), dim)), softmax(x, dim), 1e-6, 1e-5);
    expect_close(back(log_softmax(on(x), dim)), log_softmax(x, dim), 1e-6, 1e-5);
    const Tensor y = softmax(x, dim), ly = log_softmax(x, dim);
    const Attrs at = Attrs().set("dim", dim);
    expect_close(back(run_op("softmax_backward", {on(g), on(y)}, at)[0]), run_op("softmax_backward", {g, y}, at)[0], 1e-6, 1e-5);
    expect_close(back(run_op("log_softmax_backward", {on(g), on(ly)}, at)[0]), run_op("log_softmax_backward", {g, ly}, at)[0],
                 1e-6, 1e-5);
  }
  // A transposed input, float16, and a 0-d tensor.
  expect_close(back(softmax(transpose(on(x), 0, 2), 1)), softmax(transpose(x, 0, 2), 1), 1e-6, 1e-5);
  const Tensor h = to(x, DType::Float16);
  expect_close(to(back(log_softmax(on(h), 2)), DType::Float32), to(log_softmax(h, 2), DType::Float32), 2e-3, 2e-3);
  expect_close(back(softmax(on(full({}, Scalar(2.0))), 0)), full({}, Scalar(1.0)), 0, 0);

  // layer_norm and group_norm with and without affine parameters, and their
  // fused backward ops (dx, dweight, dbias).
  const Tensor w = random_tensor({5, 4}, 23, 0.5, 1.5), b = random_tensor({5, 4}, 24, -1, 1);
  const Tensor cw = random_tensor({6}, 25, 0.5, 1.5), cb = random_tensor({6}, 26, -1, 1);
  const Tensor img = random_tensor({2, 6, 3, 2}, 27, -2, 2), gimg = random_tensor({2, 6, 3, 2}, 28, -1, 1);
  const Attrs ln = Attrs().set("normalized_ndim", int64_t(2)).set("eps", 1e-5);
  const Attrs gn = Attrs().set("num_groups", int64_t(3)).set("eps", 1e-5);
  for (auto [op, input, grad, weight, bias, attrs] :
       {std::tuple{"layer_norm", x, g, w, b, ln}, std::tuple{"layer_norm", x, g, Tensor(), Tensor(), ln},
        std::tuple{"group_norm", img, gimg, cw, cb, gn}}) {
    const TensorList cpu = run_op(op, {input, weight, bias}, attrs);
    const TensorList dev = run_op(op, {on(input), weight.defined() ? on(weight) : weight, bias.defined() ? on(bias) : bias}, attrs);
    for (size_t k = 0; k < 3; ++k) expect_close(back(dev[k]), cpu[k], 1e-5, 1e-5);
    const std::string backward = std::string(op) + "_backward";
    Attrs battrs = attrs;
    battrs.set("need_input", true).set("need_affine", weight.defined());
    const TensorList cpu_grads = run_op(backward.c_str(), {grad, input, cpu[1], cpu[2], weight}, battrs);
    const TensorList dev_grads = run_op(backward.c_str(), {on(grad), on(input), dev[1], dev[2], weight.defined() ? on(weight) : weight}, battrs);
    for (size_t k = 0; k < (weight.defined() ? 3 : 1); ++k) expect_close(back(dev_grads[k]), cpu_grads[k], 1e-5, 1e-5);
  }
}

// A column-major BLAS emulated on the host (float64), called as the CUDA
// backend calls cuBLAS (backend/cuda/kernels/gemm.cpp): one strided batch,
// or a call per matrix. op(X)(i, j) of a column-major X with leading dim ld.
void emulated_blas_matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  const Tensor buffer = make_empty({gemm_scratch_bytes(a, b)}, DType::UInt8, a.device());
  Scratch taken({buffer});
  const GemmPlan plan = plan_gemm(a, b, out, elementwise_kernels::copy_cast<GeometryLoops>, taken);
  const double* ap = static_cast<const double*>(plan.a.tensor.data_ptr());
  const double* bp = static_cast<const double*>(plan.b.tensor.data_ptr());
  double* cp = static_cast<double*>(out.data_ptr());
  auto at = [](const double* x, bool transposed, int64_t ld, int64_t i, int64_t j) {
    return transposed ? x[j + i * ld] : x[i + j * ld];
  };
  auto call = [&](int64_t first, int64_t count, int64_t stride_a, int64_t stride_b) {
    for (int64_t t = 0; t < count; ++t) {
      const double* bm = bp + plan.b.offsets[size_t(first)] + t * stride_b;
      const double* am = ap + plan.a.offsets[size_t(first)] + t * stride_a;
      double* cm = cp + (first + t) * plan.n * plan.m;
      for (int64_t i = 0; i < plan.m; ++i)
        for (int64_t j = 0; j < plan.n; ++j) {
          double sum = 0;
          for (int64_t p = 0; p < plan.k; ++p)
            sum += at(bm, plan.b.transposed, plan.b.ld, i, p) * at(am, plan.a.transposed, plan.a.ld, p, j);
          cm[i + j * plan.m] = sum;
        }
    }
  };
  if (plan.strided) call(0, plan.count, plan.stride_a, plan.stride_b);
  else for (int64_t i = 0; i < plan.count; ++i) call(i, 1, 0, 0);
}

TEST_F(EmulatedDevice, BlasPlansMultiplyEveryLayout) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  OpRegistry::instance().set_kernel("matmul", DeviceType::CUDA, [](const TensorList& in, TensorList& out, const Attrs&) {
    emulated_blas_matmul(in[0], in[1], out[0]);
  });
  auto f64 = [](const Shape& s, uint32_t seed) { return random_tensor(s, seed, -1, 1, DType::Float64); };
  // The views are taken on the device (a copy to it would make them dense).
  using View = std::function<Tensor(const Tensor&)>;
  const View same = [](const Tensor& t) { return t; };
  const View t01 = [](const Tensor& t) { return transpose(t, 0, 1); };
  auto check = [&](const Tensor& a, const View& va, const Tensor& b, const View& vb) {
    expect_close(back(matmul(va(on(a)), vb(on(b)))), matmul(va(a), vb(b)), 1e-12, 1e-12);
  };
  const Tensor a = f64({4, 5}, 31), b = f64({5, 3}, 32);
  check(a, same, b, same);
  check(f64({5, 4}, 33), t01, b, same);                                 // a transposed: op T
  check(a, same, f64({3, 5}, 34), t01);                                 // b transposed
  check(f64({2, 3, 5, 4}, 35), [](const Tensor& t) { return transpose(t, 2, 3); }, f64({5, 4}, 43),
        same);                                                          // b broadcast over a batch
  check(f64({3, 2, 4, 5}, 36), [](const Tensor& t) { return permute(t, {1, 0, 2, 3}); }, f64({2, 3, 5, 3}, 37),
        same);                                                          // uneven batch offsets
  check(f64({8, 10}, 38), [](const Tensor& t) { return slice(slice(t, 0, 0, 8, 2), 1, 0, 10, 2); }, b,
        same);                                                          // neither layout: a dense copy
  check(f64({4, 1}, 39), same, f64({1, 3}, 40), same);                  // k = 1, free strides
  check(f64({1, 5}, 41), same, f64({3, 5}, 42), t01);                   // n = 1
}

TEST_F(EmulatedDevice, LayoutKernelsRunOverAnotherBackendsLoops) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  layout_kernels::register_all<GeometryLoops>(DeviceType::CUDA, true);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);  // the backward's sum
  const Tensor x = random_tensor({3, 4, 5}, 51, -1, 1);
  const Tensor xt = transpose(on(x), 0, 2);  // a strided input, made on the device
  expect_close(back(flip(xt, {0, 2})), flip(transpose(x, 0, 2), {0, 2}), 0, 0);
  expect_close(back(roll(xt, {2, -1}, {0, 1})), roll(transpose(x, 0, 2), {2, -1}, {0, 1}), 0, 0);
  expect_close(back(pad(xt, {1, -1, 2, 0}, 0.5)), pad(transpose(x, 0, 2), {1, -1, 2, 0}, 0.5), 0, 0);
  expect_close(back(tril(xt, -1)), tril(transpose(x, 0, 2), -1), 0, 0);
  expect_close(back(triu(on(x), 1)), triu(x, 1), 0, 0);
  expect_close(back(cat({xt, on(random_tensor({5, 4, 3}, 52, -1, 1))}, 1)),
               cat({transpose(x, 0, 2), random_tensor({5, 4, 3}, 52, -1, 1)}, 1), 0, 0);
  // slice_backward through autograd: the gradient of a strided slice.
  Tensor leaf = on(x).detach();
  leaf.requires_grad_(true);
  sum(slice(leaf, 2, 1, 5, 2)).backward();
  Tensor host_leaf = x.detach();
  host_leaf.requires_grad_(true);
  sum(slice(host_leaf, 2, 1, 5, 2)).backward();
  expect_close(back(leaf.grad()), host_leaf.grad(), 0, 0);
}

TEST_F(EmulatedDevice, IndexKernelsRunOverAnotherBackendsLoops) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  index_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  scan_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  layout_kernels::register_all<GeometryLoops>(DeviceType::CUDA, true);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  auto ints = [](std::vector<double> v, const Shape& shape) {
    return to(from_vector(v, shape), DType::Int64);
  };
  const Tensor x = random_tensor({3, 4, 5}, 61, -1, 1);
  const Tensor xt = transpose(x, 0, 2);  // (5, 4, 3)
  const Tensor dxt = transpose(on(x), 0, 2);
  // gather with a strided input and a transposed index
  const Tensor gi = ints({4, 0, 2, 1, 1, 3, 0, 0, 2, 4, 3, 1}, {3, 2, 2});
  expect_close(back(gather(dxt, 0, transpose(on(gi), 0, 2))), gather(xt, 0, transpose(gi, 0, 2)), 0, 0);
  expect_close(back(gather(on(x), 2, on(gi))), gather(x, 2, gi), 0, 0);
  // index_select along each dim, float32 and int32 data
  const Tensor sel = ints({2, 0, 2, 1}, {4});
  for (int64_t d = 0; d < 3; ++d)
    expect_close(back(index_select(dxt, d, on(sel))), index_select(xt, d, sel), 0, 0);
  const Tensor xi = to(mul(x, Scalar(100)), DType::Int32);
  expect_close(back(index_select(on(xi), 1, on(sel))), index_select(xi, 1, sel), 0, 0);
  // embedding: int64 and int32 indices, a transposed weight
  const Tensor w = transpose(random_tensor({6, 7}, 62, -1, 1), 0, 1);  // (7, 6)
  const Tensor idx = ints({6, 0, 3, 3, 1, 5}, {2, 3});
  expect_close(back(embedding(on(idx), transpose(on(transpose(w, 0, 1)), 0, 1))), embedding(idx, w), 0, 0);
  expect_close(back(embedding(on(to(idx, DType::Int32)), on(w))), embedding(to(idx, DType::Int32), w), 0, 0);
  // one_hot
  const Tensor classes = ints({2, 0, 4, 4, 1, 3}, {3, 2});
  expect_close(back(one_hot(transpose(on(classes), 0, 1), 5)), one_hot(transpose(classes, 0, 1), 5), 0, 0);
  // scatter (distinct indices: which of two writes lands is unspecified),
  // scatter of a value, scatter_add with repeats, index_add
  const Tensor perm = ints({3, 1, 0, 2, 0, 2, 3, 1, 1, 0, 2, 3}, {3, 4});
  const Tensor src = random_tensor({3, 4}, 63, -1, 1);
  const Tensor base = random_tensor({3, 5}, 64, -1, 1);
  expect_close(back(scatter(on(base), 1, on(perm), on(src))), scatter(base, 1, perm, src), 0, 0);
  expect_close(back(scatter(on(base), 1, on(perm), Scalar(2.5))), scatter(base, 1, perm, Scalar(2.5)), 0, 0);
  const Tensor rep = ints({1, 1, 0, 2, 0, 0, 4, 4, 4, 3, 3, 1}, {3, 4});
  expect_close(back(scatter_add(on(base), 1, on(rep), on(src))), scatter_add(base, 1, rep, src), 1e-15, 0);
  const Tensor expanded = expand(ints({2, 0, 1}, {3, 1}), {3, 4});
  const Tensor col = expand(random_tensor({3, 1}, 65, -1, 1), {3, 4});
  expect_close(back(scatter_add(on(base), 1, expand(on(ints({2, 0, 1}, {3, 1})), {3, 4}),
                                expand(on(random_tensor({3, 1}, 65, -1, 1)), {3, 4}))),
               scatter_add(base, 1, expanded, col), 1e-15, 0);
  const Tensor ib = to(mul(base, Scalar(10)), DType::Int16);
  expect_close(back(scatter_add(on(ib), 1, on(rep), on(to(mul(src, Scalar(10)), DType::Int16)))),
               scatter_add(ib, 1, rep, to(mul(src, Scalar(10)), DType::Int16)), 0, 0);
  const Tensor hb = to(base, DType::Float16), hs = to(src, DType::Float16);
  expect_close(back(scatter_add(on(hb), 1, on(rep), on(hs))), scatter_add(hb, 1, rep, hs), 2e-3, 0);
  const Tensor rows = ints({1, 4, 1}, {3});
  const Tensor add_src = random_tensor({3, 3}, 66, -1, 1);
  expect_close(back(index_add(on(base), 1, on(rows), on(add_src))), index_add(base, 1, rows, add_src), 1e-15, 0);
  // cumsum forward and reverse (its backward), cumprod and its backward
  for (int64_t d = 0; d < 3; ++d) {
    expect_close(back(cumsum(dxt, d)), cumsum(xt, d), 1e-15, 1e-15);
    expect_close(back(cumprod(dxt, d)), cumprod(xt, d), 1e-15, 1e-15);
  }
  expect_close(back(cumsum(on(xi), 1)), cumsum(xi, 1), 0, 0);
  // Gradients through the device's kernels: gather, index_select and
  // embedding push back; cumsum and cumprod scan back.
  auto grads = [&](const Tensor& input, const std::function<Tensor(const Tensor&)>& f) {
    Tensor leaf = input.detach();
    leaf.requires_grad_(true);
    sum(mul(f(leaf), f(leaf))).backward();
    return leaf.grad();
  };
  const std::vector<std::function<Tensor(const Tensor&)>> fns = {
      [&](const Tensor& t) { return gather(t, 2, t.device() == dev0 ? on(gi) : gi); },
      [&](const Tensor& t) { return index_select(t, 1, t.device() == dev0 ? on(sel) : sel); },
      [&](const Tensor& t) { return cumsum(t, 1); },
      [&](const Tensor& t) { return cumprod(t, 2); },
      [&](const Tensor& t) { return diagonal(t, 1, 0, 2); },
  };
  for (const auto& f : fns) expect_close(back(grads(on(x), f)), grads(x, f), 1e-14, 1e-14);
  const Tensor table = random_tensor({7, 6}, 67, -1, 1);
  auto table_grad = [&](const Tensor& t, const Tensor& i) {
    Tensor leaf = t.detach();
    leaf.requires_grad_(true);
    sum(mul(embedding(i, leaf, 3), embedding(i, leaf, 3))).backward();
    return leaf.grad();
  };
  expect_close(back(table_grad(on(table), on(idx))), table_grad(table, idx), 1e-14, 0);
  // Advanced indexing: tensors (broadcast together, one negative) around
  // slices, with the result's dims moved first or kept in place, and
  // index_put_ assigning and accumulating.
  {
    const Tensor i0 = ints({2, -1, 0}, {3, 1}), i1 = ints({1, 3}, {2});
    const std::vector<std::vector<TensorIndex>> plans = {
        {i0, Slice{}, i1}, {Slice{}, i0, i1}, {Slice{1, 3}, i1}, {Ellipsis{}, ints({4, 0}, {2})}, {1, Slice{}, i1}};
    for (const auto& plan : plans) {
      std::vector<TensorIndex> dev_plan;
      for (const auto& e : plan)
        dev_plan.push_back(std::holds_alternative<Tensor>(e) ? TensorIndex(on(std::get<Tensor>(e))) : e);
      const Tensor want = index(x, plan);
      expect_close(back(index(on(x), dev_plan)), want, 0, 0);
      const Tensor value = random_tensor(want.sizes(), 69, -1, 1);
      for (const bool accumulate : {false, true}) {
        if (!accumulate && plan.size() == 3 && std::holds_alternative<Tensor>(plan[0])) continue;  // repeats: unspecified
        Tensor host = add(x, Scalar(0)), dev = on(x);
        index_put_(host, plan, value, accumulate);
        index_put_(dev, dev_plan, on(value), accumulate);
        expect_close(back(dev), host, 1e-15, 0);
      }
    }
    // The gradient of an advanced index accumulates into zeros.
    Tensor leaf = on(x).detach();
    leaf.requires_grad_(true);
    sum(mul(index(leaf, {on(i0), Slice{}, on(i1)}), index(leaf, {on(i0), Slice{}, on(i1)}))).backward();
    Tensor host_leaf = x.detach();
    host_leaf.requires_grad_(true);
    sum(mul(index(host_leaf, {i0, Slice{}, i1}), index(host_leaf, {i0, Slice{}, i1}))).backward();
    expect_close(back(leaf.grad()), host_leaf.grad(), 1e-15, 0);
    EXPECT_THROW(index(on(x), {on(ints({3}, {1}))}), IndexError);
  }
  // A bad index is an IndexError naming the op, whatever the device.
  EXPECT_THROW(gather(on(x), 2, on(ints({0, 5}, {1, 1, 2}))), IndexError);  // NOLINT
  EXPECT_THROW(index_select(on(x), 0, on(ints({-1}, {1}))), IndexError);
  EXPECT_THROW(embedding(on(ints({7}, {1})), on(w)), IndexError);
  EXPECT_THROW(scatter_add(on(base), 1, on(ints({5}, {1, 1})), on(src)), IndexError);
  EXPECT_THROW(index_add(on(base), 0, on(ints({3}, {1})), on(random_tensor({1, 5}, 68))), IndexError);
  EXPECT_THROW(one_hot(on(ints({5}, {1})), 5), IndexError);
  try {
    gather(on(x), 2, on(ints({0, 5}, {1, 1, 2})));
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("gather: index 5 is out of bounds for dimension 2 with size 5"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(EmulatedDevice, ClassLossesRunOverAnotherBackendsLoops) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  composed_kernels::register_all<GeometryLoops, GeometryReducer>(DeviceType::CUDA);
  index_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  layout_kernels::register_all<GeometryLoops>(DeviceType::CUDA, true);
  loss_kernels::register_all<GeometryLoops, GeometryReducer>(DeviceType::CUDA);
  // (N, C, d) logits: the functional layer hands the ops a strided (M, C).
  const Tensor logits = random_tensor({4, 5, 3}, 71, -3, 3);
  const Tensor target = to(from_vector({0, 4, 2, -100, 1, 3, 3, 0, 4, 2, -100, 1}, {4, 3}), DType::Int64);
  const Tensor weight = random_tensor({5}, 72, 0.5, 2);
  for (const std::string reduction : {"none", "sum", "mean"}) {
    for (const bool weighted : {false, true}) {
      for (const double smoothing : {0.0, 0.2}) {
        SCOPED_TRACE(reduction + (weighted ? " weighted" : "") + " smoothing " + std::to_string(smoothing));
        const Tensor w = weighted ? weight : Tensor();
        auto run = [&](const Tensor& x, const Tensor& t, const Tensor& wt, bool create_graph) {
          Tensor leaf = x.detach();
          leaf.requires_grad_(true);
          Tensor loss = cross_entropy(leaf, t, wt, -100, reduction, smoothing);
          Tensor g = autograd::grad({sum(mul(loss, loss))}, {leaf}, {}, {}, create_graph)[0];
          return TensorList{loss.detach(), g.detach()};
        };
        for (const bool create_graph : {false, true}) {
          const TensorList host = run(logits, target, w, create_graph);
          const TensorList dev = run(on(logits), on(target), weighted ? on(w) : Tensor(), create_graph);
          expect_close(back(dev[0]), host[0], 1e-12, 1e-12);
          expect_close(back(dev[1]), host[1], 1e-12, 1e-12);
        }
        auto run_nll = [&](const Tensor& x, const Tensor& t, const Tensor& wt) {
          Tensor leaf = x.detach();
          leaf.requires_grad_(true);
          Tensor loss = nll_loss(leaf, t, wt, -100, reduction);
          sum(mul(loss, loss)).backward();
          return TensorList{loss.detach(), leaf.grad()};
        };
        const TensorList host = run_nll(logits, target, w);
        const TensorList dev = run_nll(on(logits), on(target), weighted ? on(w) : Tensor());
        expect_close(back(dev[0]), host[0], 1e-12, 1e-12);
        expect_close(back(dev[1]), host[1], 1e-12, 1e-12);
      }
    }
  }
  // The pointwise losses, with broadcasting, weights and every reduction.
  const Tensor a = random_tensor({3, 4}, 74, -2, 2), b = random_tensor({4}, 75, -2, 2);
  const Tensor t = random_tensor({3, 4}, 76, 0, 1), pw = random_tensor({4}, 77, 0.5, 2);
  for (const std::string reduction : {"none", "sum", "mean"}) {
    expect_close(back(mse_loss(transpose(on(transpose(a, 0, 1)), 0, 1), on(b), reduction)), mse_loss(a, b, reduction),
                 1e-14, 1e-14);
    expect_close(back(binary_cross_entropy_with_logits(on(a), on(t), Tensor(), Tensor(), reduction)),
                 binary_cross_entropy_with_logits(a, t, Tensor(), Tensor(), reduction), 1e-14, 1e-14);
    expect_close(back(binary_cross_entropy_with_logits(on(a), on(t), on(b), on(pw), reduction)),
                 binary_cross_entropy_with_logits(a, t, b, pw, reduction), 1e-14, 1e-14);
    expect_close(back(binary_cross_entropy_with_logits(on(a), on(t), Tensor(), on(pw), reduction)),
                 binary_cross_entropy_with_logits(a, t, Tensor(), pw, reduction), 1e-14, 1e-14);
  }
  // float32 logits; a target out of range is an IndexError.
  const Tensor x32 = to(reshape(permute(logits, {0, 2, 1}), {12, 5}), DType::Float32);
  const Tensor flat = reshape(target, {12});
  expect_close(back(cross_entropy(on(x32), on(flat), Tensor(), -100, "none")),
               cross_entropy(x32, flat, Tensor(), -100, "none"), 1e-6, 1e-6);
  const Tensor bad = to(from_vector({0, 5}, {2}), DType::Int64);
  EXPECT_THROW(cross_entropy(on(random_tensor({2, 5}, 73)), on(bad)), IndexError);
  EXPECT_THROW(nll_loss(on(random_tensor({2, 5}, 73)), on(bad)), IndexError);
}

TEST_F(EmulatedDevice, GradScalingRunsOnTheDevice) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  amp_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  const Tensor g = to(random_tensor({4, 6}, 81, -100, 100), DType::Float32);
  for (const bool poisoned : {false, true}) {
    Tensor host = contiguous(poisoned ? where(eq(reshape(arange(24.0), {4, 6}), Scalar(13)), to(full({}, INFINITY), DType::Float32), g) : g);
    host = add(host, Scalar(0));  // a copy of its own
    Tensor dev = transpose(on(transpose(host, 0, 1)), 0, 1);  // a strided gradient on the device
    Tensor host_found = zeros({1}), dev_found = on(zeros({1}));
    const Tensor inv = full({1}, 0.125);
    amp::non_finite_check_and_unscale_({host}, host_found, inv);
    amp::non_finite_check_and_unscale_({dev}, dev_found, on(inv));
    const Tensor got = back(dev);
    expect_close(where(isfinite(got), got, Scalar(-1)), where(isfinite(host), host, Scalar(-1)), 0, 0);
    expect_close(to(isinf(got), DType::Float64), to(isinf(host), DType::Float64), 0, 0);
    expect_values(back(dev_found), {poisoned ? 1.0 : 0.0});
    // Three updates: grow at the interval unless found_inf, else back off.
    Tensor host_scale = full({1}, 1024.0), dev_scale = on(full({1}, 1024.0));
    Tensor host_tracker = zeros({1}, {.dtype = DType::Int32}), dev_tracker = on(zeros({1}, {.dtype = DType::Int32}));
    for (int i = 0; i < 3; ++i) {
      amp::update_scale_(host_scale, host_tracker, host_found, 2.0, 0.5, 2);
      amp::update_scale_(dev_scale, dev_tracker, dev_found, 2.0, 0.5, 2);
      expect_close(back(dev_scale), host_scale, 0, 0);
      expect_close(back(dev_tracker), host_tracker, 0, 0);
    }
  }
  // The scaler keeps its scale and flags on the loss's device.
  amp::GradScaler scaler;
  const Tensor scaled = scaler.scale(on(full({}, 2.0)));
  EXPECT_EQ(scaler.scale_tensor().device(), dev0);
  expect_values(back(scaled), {2.0 * 65536.0});
}

TEST_F(EmulatedDevice, RandomOpsDrawTheCpusValues) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  index_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  random_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  // Each draw twice from one seed: on the device, then on the CPU.
  auto both = [&](const std::function<Tensor(Device)>& draw) {
    manual_seed(1234);
    Tensor dev = back(draw(dev0));
    manual_seed(1234);
    return TensorList{dev, draw(Device())};
  };
  const std::vector<std::function<Tensor(Device)>> draws = {
      [](Device d) { return rand({5, 7}, {.device = d}); },
      [](Device d) { return rand({3, 5}, {.dtype = DType::Float64, .device = d}); },
      [](Device d) { return rand({9}, {.dtype = DType::BFloat16, .device = d}); },
      [](Device d) { return randn({5, 7}, {.device = d}); },
      [](Device d) { return randn({4, 3}, {.dtype = DType::Float64, .device = d}); },
      [](Device d) { return randint(-3, 9, {6, 5}, {.dtype = DType::Int64, .device = d}); },
      [](Device d) { return randint(0, int64_t(1) << 40, {7}, {.dtype = DType::Int64, .device = d}); },
      [](Device d) { return bernoulli(zeros({6, 6}, {.device = d}), 0.3); },
      [](Device d) { return bernoulli(zeros({5}, {.dtype = DType::Float64, .device = d}), 0.6); },
      [](Device d) { return bernoulli(to(random_tensor({4, 6}, 91, 0, 1), d)); },
      [](Device d) {  // a strided fill
        Tensor t = transpose(zeros({4, 6}, {.device = d}), 0, 1);
        uniform_(t, -2.0, 3.0);
        return t;
      },
      [](Device d) { return dropout(to(random_tensor({7, 9}, 92, -1, 1), d), 0.35); },
      [](Device d) { return randperm(37, d); },
      [](Device d) { return multinomial(to(random_tensor({3, 6}, 94, 0, 1), d), 9, true); },
      [](Device d) { return multinomial(transpose(to(random_tensor({6, 3}, 95, 0, 1), d), 0, 1), 4, false); },
      // gamma samples (Note [Gamma sampling]): shapes below and above 1, 0 and NaN; a strided input
      [](Device d) {
        Tensor a = random_tensor({5, 8}, 96, 0.02, 6);
        a = where(eq(reshape(arange(40.0), {5, 8}), Scalar(3)), zeros({}), a);
        a = where(eq(reshape(arange(40.0), {5, 8}), Scalar(11)), full({}, NAN), a);
        return standard_gamma(transpose(to(contiguous(transpose(a, 0, 1)), d), 0, 1));
      },
      [](Device d) { return standard_gamma(to(to(random_tensor({33}, 97, 0.1, 3), DType::Float32), d)); },
  };
  // Integers, [0, 1) uniforms and masks are exact; normals, scaled
  // uniforms and gamma samples may round differently on a device (fused
  // multiply-adds, the math library).
  const std::set<size_t> rounded = {3, 4, 10, 15, 16};
  for (size_t k = 0; k < draws.size(); ++k) {
    SCOPED_TRACE(k);
    const TensorList r = both(draws[k]);
    const double tol = rounded.count(k) ? 1e-6 : 0;
    expect_close(r[0], r[1], tol, tol);
  }
  // dropout's mask and its backward
  auto dropout_grad = [&](Device d) {
    manual_seed(99);
    Tensor leaf = to(random_tensor({6, 5}, 93, -1, 1), d).detach();
    leaf.requires_grad_(true);
    sum(mul(dropout(leaf, 0.5), dropout(leaf, 0.5))).backward();
    return back(leaf.grad());
  };
  expect_close(dropout_grad(dev0), dropout_grad(Device()), 0, 0);
  EXPECT_THROW(bernoulli(to(full({3}, 1.5), dev0)), Error);
  EXPECT_THROW(standard_gamma(to(full({3}, -0.5), dev0)), ValueError);
  // the gamma sample's gradient in the concentration, broadcast
  const Tensor a = random_tensor({4, 1}, 98, 0.05, 30), x = random_tensor({1, 6}, 99, 0.01, 40);
  // (the test's loops and the library are compiled apart: contractions may differ)
  expect_close(back(standard_gamma_grad(to(a, dev0), to(x, dev0))), standard_gamma_grad(a, x), 1e-12, 1e-12);
  EXPECT_THROW(multinomial(to(zeros({2, 3}), dev0), 1, true), ValueError);
}

TEST_F(EmulatedDevice, ResamplingRunsOverAnotherBackendsLoops) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  resample_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  // Forward and gradient of f on the device against the CPU; the device's
  // input is strided (made on the device).
  auto check = [&](const Tensor& x, const std::function<Tensor(const Tensor&)>& f, double tol) {
    auto run = [&](const Tensor& input) {
      Tensor leaf = input.detach();
      leaf.requires_grad_(true);
      Tensor y = f(leaf);
      sum(mul(y, y)).backward();
      return TensorList{y.detach(), leaf.grad()};
    };
    const TensorList host = run(x);
    const TensorList dev = run(transpose(on(contiguous(transpose(x, -1, -2))), -1, -2));
    expect_close(back(dev[0]), host[0], tol, tol);
    expect_close(back(dev[1]), host[1], tol, tol);
  };
  const Tensor x4 = random_tensor({2, 3, 5, 4}, 101, -1, 1), x3 = random_tensor({2, 3, 6}, 102, -1, 1);
  const Tensor x5 = random_tensor({1, 2, 3, 4, 3}, 103, -1, 1);
  auto up = [](std::string mode, Shape size, bool align = false) {
    return [mode, size, align](const Tensor& t) {
      InterpolateOptions o;
      o.size = size;
      o.mode = mode;
      if (mode != "nearest" && mode != "nearest-exact") o.align_corners = align;
      return interpolate(t, o);
    };
  };
  check(x4, up("nearest", {7, 9}), 1e-14);
  check(x4, up("nearest-exact", {3, 9}), 1e-14);
  check(x4, up("bilinear", {7, 3}), 1e-14);
  check(x4, up("bilinear", {8, 6}, true), 1e-14);
  check(x4, up("bicubic", {9, 7}), 1e-14);
  check(x3, up("linear", {11}), 1e-14);
  check(x5, up("trilinear", {5, 3, 6}), 1e-14);
  check(x5, up("nearest", {6, 8, 5}), 1e-14);
  for (const std::string mode : {"reflect", "replicate", "circular"}) {
    check(x4, [mode](const Tensor& t) { return pad(t, {2, 1, -1, 3}, mode, std::nullopt); }, 1e-14);
    check(x3, [mode](const Tensor& t) { return pad(t, {3, 2}, mode, std::nullopt); }, 1e-14);
  }
  // Integer nearest upsampling copies elements.
  const Tensor xi = to(mul(x4, Scalar(50)), DType::Int32);
  expect_close(back(up("nearest", {7, 9})(on(xi))), up("nearest", {7, 9})(xi), 0, 0);
}

TEST_F(EmulatedDevice, PoolingRunsOverAnotherBackendsLoops) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  pool_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  // Forward, gradient and the gradient's gradient (max pools gather) of f.
  auto check = [&](const Tensor& x, const std::function<Tensor(const Tensor&)>& f) {
    auto run = [&](const Tensor& input) {
      Tensor leaf = input.detach();
      leaf.requires_grad_(true);
      Tensor y = f(leaf);
      Tensor g = autograd::grad({sum(mul(y, y))}, {leaf}, {}, {}, true)[0];
      Tensor gg = autograd::grad({sum(mul(g, g))}, {leaf})[0];
      return TensorList{y.detach(), g.detach(), gg};
    };
    const TensorList host = run(x);
    const TensorList dev = run(transpose(on(contiguous(transpose(x, -1, -2))), -1, -2));
    for (size_t k = 0; k < 3; ++k) expect_close(back(dev[k]), host[k], 1e-13, 1e-13);
  };
  Tensor x4 = random_tensor({2, 3, 7, 6}, 111, -1, 1);
  x4 = where(eq(reshape(arange(252.0), {2, 3, 7, 6}), Scalar(40)), Scalar(NAN), x4);  // a NaN wins its windows
  const Tensor x5 = random_tensor({1, 2, 5, 4, 6}, 112, -1, 1);
  check(x4, [](const Tensor& t) { return max_pool2d(t, {.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 1}}); });
  check(x4, [](const Tensor& t) {
    return max_pool2d(t, {.kernel_size = {2, 2}, .padding = {1, 0}, .dilation = {2, 3}, .ceil_mode = true});
  });
  check(x4, [](const Tensor& t) { return avg_pool2d(t, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}); });
  check(x4, [](const Tensor& t) {
    return avg_pool2d(t, {.kernel_size = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true,
                          .count_include_pad = false});
  });
  check(x4, [](const Tensor& t) { return adaptive_avg_pool2d(t, {3, 4}); });
  check(x4, [](const Tensor& t) { return adaptive_max_pool2d(t, {4, 5}); });
  check(x5, [](const Tensor& t) { return max_pool3d(t, {.kernel_size = {2, 3, 2}, .padding = {1, 1, 0}}); });
  check(x5, [](const Tensor& t) { return avg_pool3d(t, {.kernel_size = {2, 2, 3}, .stride = {1, 2, 2}}); });
  check(x5, [](const Tensor& t) { return adaptive_avg_pool3d(t, {2, std::nullopt, 4}); });
  const TensorList host = max_pool2d_with_indices(x4, {.kernel_size = {2, 2}});
  const TensorList dev = max_pool2d_with_indices(on(x4), {.kernel_size = {2, 2}});
  expect_close(back(dev[1]), host[1], 0, 0);
}

TEST_F(EmulatedDevice, BatchNormRunsOverAnotherBackendsLoops) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  index_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  composed_kernels::register_all<GeometryLoops, GeometryReducer>(DeviceType::CUDA);
  const Tensor x = random_tensor({4, 3, 5, 2}, 121, -2, 3);
  const Tensor w = random_tensor({3}, 122, 0.5, 1.5), b = random_tensor({3}, 123, -1, 1);
  for (const bool training : {true, false}) {
    for (const bool affine : {true, false}) {
      SCOPED_TRACE(std::string(training ? "training" : "eval") + (affine ? " affine" : ""));
      auto run = [&](Device d) {
        auto put = [&](const Tensor& t) { return d == dev0 ? on(t) : t; };
        Tensor leaf = put(x).detach(), weight = affine ? put(w).detach() : Tensor(), bias = affine ? put(b).detach() : Tensor();
        leaf.requires_grad_(true);
        if (affine) weight.requires_grad_(true), bias.requires_grad_(true);
        Tensor rm = put(random_tensor({3}, 124, -1, 1)), rv = put(random_tensor({3}, 125, 0.5, 2));
        // a strided input on the device
        Tensor input = d == dev0 ? transpose(contiguous(transpose(leaf, 1, 3)), 1, 3) : leaf;
        Tensor y = batch_norm(input, rm, rv, weight, bias, training, 0.1, 1e-5);
        sum(mul(y, mul(y, y))).backward();
        TensorList r{y.detach(), leaf.grad(), rm, rv};
        if (affine) r.push_back(weight.grad()), r.push_back(bias.grad());
        return r;
      };
      const TensorList host = run(Device()), dev = run(dev0);
      for (size_t k = 0; k < host.size(); ++k) expect_close(back(dev[k]), host[k], 1e-12, 1e-12);
    }
  }
}

// The three device paths of fused attention: the row walks (Note [Device
// attention]), the tiles (Note [Tiled attention]) and the batched GEMMs
// (Note [Attention by batched GEMMs]), each registered alone.
enum class AttentionPath { RowWalks, Tiles, BatchedGemms };

class FusedAttention : public EmulatedDevice, public ::testing::WithParamInterface<AttentionPath> {
 protected:
  void register_kernels() {
    elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
    reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
    switch (GetParam()) {
      case AttentionPath::RowWalks: attention_kernels::register_all<GeometryLoops>(DeviceType::CUDA); break;
      case AttentionPath::Tiles: attention_tiles::register_all<GeometryLoops>(DeviceType::CUDA); break;
      case AttentionPath::BatchedGemms:
        attention_gemm::register_all<GeometryLoops, emulated::HostBatchedGemm>(DeviceType::CUDA);
        break;
    }
  }
};

TEST_P(FusedAttention, RunsOverAnotherBackendsLoops) {
  register_kernels();
  // (B, H, L, E) queries against S keys; k is strided on the device.
  const Tensor q = random_tensor({2, 3, 5, 4}, 131, -1, 1), k = random_tensor({2, 3, 6, 4}, 132, -1, 1);
  const Tensor v = random_tensor({2, 3, 6, 3}, 133, -1, 1);
  Tensor bool_mask = gt(random_tensor({5, 6}, 134, 0, 1), Scalar(0.3));
  bool_mask = logical_or(bool_mask, eq(reshape(arange(30.0), {5, 6}), reshape(mul(arange(5.0), Scalar(7)), {5, 1})));
  const Tensor add_mask = random_tensor({1, 3, 5, 6}, 135, -2, 0);
  struct Case {
    Tensor mask;
    double dropout;
    bool causal;
  };
  for (const Case& c : std::vector<Case>{{Tensor(), 0.0, false}, {Tensor(), 0.0, true}, {bool_mask, 0.0, false},
                                         {add_mask, 0.0, false}, {Tensor(), 0.3, false}, {bool_mask, 0.25, false},
                                         {Tensor(), 0.2, true}}) {
    SCOPED_TRACE(std::to_string(c.dropout) + (c.causal ? " causal" : "") + (c.mask.defined() ? " masked" : ""));
    auto run = [&](Device d) {
      auto put = [&](const Tensor& t) { return d == dev0 ? on(t) : t; };
      TensorList leaves{put(q).detach(), put(k).detach(), put(v).detach()};
      for (auto& t : leaves) t.requires_grad_(true);
      const Tensor kk = d == dev0 ? transpose(contiguous(transpose(leaves[1], 2, 3)), 2, 3) : leaves[1];
      manual_seed(5);
      Tensor y = scaled_dot_product_attention(leaves[0], kk, leaves[2], c.mask.defined() ? put(c.mask) : Tensor(),
                                              c.dropout, c.causal);
      sum(mul(y, y)).backward();
      return TensorList{y.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
    };
    const TensorList host = run(Device()), dev = run(dev0);
    for (size_t i = 0; i < host.size(); ++i) expect_close(back(dev[i]), host[i], 1e-12, 1e-12);
  }
}

// One call of fused_attention: its inputs and attributes.
struct AttentionCall {
  std::string name;
  Tensor q, k, v, mask;
  Attrs attrs;
};

// Calls over several tiles of each path: query and key counts that are no
// multiples of the tile sizes, L != S, E != Ev, head dims of 128 (the
// smallest tiles), causal, bool and additive masks and dropout; a bool
// mask with a fully masked row when `fully_masked_row`.
std::vector<AttentionCall> tiled_attention_calls(DType dtype, bool fully_masked_row) {
  std::vector<AttentionCall> calls;
  struct Sizes {
    Shape batch;
    int64_t L, S, E, Ev;
  };
  uint32_t seed = 140;
  for (const Sizes& z : {Sizes{{2, 2}, 70, 150, 5, 3}, Sizes{{}, 37, 80, 128, 100}}) {
    auto with = [&](int64_t rows, int64_t cols) {
      Shape s = z.batch;
      s.push_back(rows), s.push_back(cols);
      return random_tensor(s, seed++, -1, 1, dtype);
    };
    const Tensor q = with(z.L, z.E), k = with(z.S, z.E), v = with(z.S, z.Ev);
    // A key in every row, but row 3 when asked for none.
    Tensor bool_mask = logical_or(gt(random_tensor({z.L, z.S}, seed++, 0, 1), Scalar(0.6)),
                                  eq(reshape(arange(double(z.S)), {1, z.S}), reshape(arange(double(z.L)), {z.L, 1})));
    if (fully_masked_row) bool_mask = logical_and(bool_mask, ne(reshape(arange(double(z.L)), {z.L, 1}), Scalar(3)));
    const Tensor add_mask = random_tensor({z.L, z.S}, seed++, -3, 0, dtype);
    const std::string sizes = "L " + std::to_string(z.L) + " S " + std::to_string(z.S) + " E " +
                              std::to_string(z.E) + " Ev " + std::to_string(z.Ev);
    struct Kind {
      const char* name;
      Tensor mask;
      bool causal;
      double dropout;
    };
    for (const Kind& kind : {Kind{"plain", Tensor(), false, 0.0}, Kind{"causal", Tensor(), true, 0.0},
                             Kind{"bool mask", bool_mask, false, 0.0}, Kind{"additive mask", add_mask, false, 0.0},
                             Kind{"dropout", Tensor(), false, 0.3}, Kind{"bool mask, dropout", bool_mask, false, 0.2},
                             Kind{"causal, dropout", Tensor(), true, 0.25}})
      calls.push_back({sizes + ", " + kind.name, q, k, v, kind.mask,
                       Attrs{{"scale", 0.4}, {"is_causal", kind.causal}, {"dropout_p", kind.dropout},
                             {"seed", int64_t(1234)}, {"offset", int64_t(8)}}});
  }
  return calls;
}

// fused_attention and its backward called on the device against the CPU's
// kernels, for float32, float64 and bfloat16 (the public function composes
// small 16-bit calls from other ops, so the ops are called directly here).
TEST_P(FusedAttention, MatchesTheCpuOverSeveralTiles) {
  register_kernels();
  const int64_t block_programs = GeometryLoops::block_programs;
  static const OpDef& forward = dispatch::op("fused_attention");
  static const OpDef& backward = dispatch::op("fused_attention_backward");
  for (const DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    const double tol = dtype == DType::Float64 ? 1e-12 : dtype == DType::Float32 ? 2e-5 : 2e-2;
    for (const AttentionCall& c : tiled_attention_calls(dtype, false)) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + c.name);
      auto put = [&](const Tensor& t) { return t.defined() ? on(t) : t; };
      // k strided on the device
      const Tensor k_dev = transpose(contiguous(transpose(on(c.k), -1, -2)), -1, -2);
      const TensorList host = dispatch::apply(forward, {c.q, c.k, c.v, c.mask}, c.attrs);
      const TensorList dev = dispatch::apply(forward, {on(c.q), k_dev, on(c.v), put(c.mask)}, c.attrs);
      expect_close(back(dev[0]), host[0], tol, tol);
      expect_close(back(dev[1]), host[1], tol, tol);
      const Tensor go = random_tensor(host[0].sizes(), 150, -1, 1, dtype);
      const TensorList host_grads =
          dispatch::apply(backward, {go, c.q, c.k, c.v, c.mask, host[0], host[1]}, c.attrs);
      const TensorList dev_grads = dispatch::apply(
          backward, {on(go), on(c.q), k_dev, on(c.v), put(c.mask), on(host[0]), on(host[1])}, c.attrs);
      for (size_t i = 0; i < 3; ++i) expect_close(back(dev_grads[i]), host_grads[i], tol, tol);
    }
  }
  // The tiles ran as block programs; the other paths run none.
  if (GetParam() == AttentionPath::Tiles) EXPECT_GT(GeometryLoops::block_programs, block_programs);
  else EXPECT_EQ(GeometryLoops::block_programs, block_programs);
}

// Heads wider than a tile's State keep the row walks on the tiled path.
TEST_P(FusedAttention, WideHeadsAgainstTheCpu) {
  register_kernels();
  const int64_t block_programs = GeometryLoops::block_programs;
  const Tensor q = random_tensor({2, 9, 4}, 151, -1, 1), k = random_tensor({2, 11, 4}, 152, -1, 1);
  const Tensor v = random_tensor({2, 11, 130}, 153, -1, 1);
  auto run = [&](Device d) {
    auto put = [&](const Tensor& t) { return d == dev0 ? on(t) : t; };
    TensorList leaves{put(q).detach(), put(k).detach(), put(v).detach()};
    for (auto& t : leaves) t.requires_grad_(true);
    Tensor y = scaled_dot_product_attention(leaves[0], leaves[1], leaves[2], Tensor(), 0.0, true);
    sum(mul(y, y)).backward();
    return TensorList{y.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
  };
  const TensorList host = run(Device()), dev = run(dev0);
  for (size_t i = 0; i < host.size(); ++i) expect_close(back(dev[i]), host[i], 1e-12, 1e-12);
  EXPECT_EQ(GeometryLoops::block_programs, block_programs);
}

INSTANTIATE_TEST_SUITE_P(EmulatedDevice, FusedAttention,
                         ::testing::Values(AttentionPath::RowWalks, AttentionPath::Tiles, AttentionPath::BatchedGemms),
                         [](const ::testing::TestParamInfo<AttentionPath>& info) {
                           switch (info.param) {
                             case AttentionPath::RowWalks: return "RowWalks";
                             case AttentionPath::Tiles: return "Tiles";
                             case AttentionPath::BatchedGemms: break;
                           }
                           return "BatchedGemms";
                         });

// Note [Block programs]: in phase 1 a thread reads what its neighbour wrote
// to shared memory in phase 0 and its own State from phase 0; blocks may
// run different numbers of phases, and shared memory lasts across them.
struct NeighbourSums {
  struct State {
    double own;
  };
  double* out;
  int threads;
  int64_t phases(int64_t block) const { return 2 + block % 2; }
  void run(int64_t phase, int64_t block, int thread, State& state, char* shared) const {
    double* s = reinterpret_cast<double*>(shared);
    double& o = out[block * threads + thread];
    if (phase == 0) state.own = double(block * 100 + thread), s[thread] = state.own;
    else if (phase == 1) o = state.own + s[(thread + 1) % threads];
    else o += s[thread];
  }
};

TEST_F(EmulatedDevice, BlockProgramsSeeTheWritesOfEarlierPhases) {
  constexpr int kThreads = 5;
  std::vector<double> out(3 * kThreads, 0.0);
  GeometryLoops::run_blocks(dev0, 3, kThreads, kThreads * int64_t(sizeof(double)), NeighbourSums{out.data(), kThreads});
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < kThreads; ++t)
      EXPECT_EQ(out[size_t(b * kThreads + t)],
                (b * 100 + t) + (b * 100 + (t + 1) % kThreads) + (b % 2 ? b * 100 + t : 0))
          << "block " << b << ", thread " << t;
}

// Note [Tiled attention]: the tiles' forward takes each row's keys in the
// row walk's order with its update, so out and lse equal the row walk's
// bit for bit (a fully masked row's NaN outputs too).
TEST_F(EmulatedDevice, TiledAttentionForwardEqualsTheRowWalksBitForBit) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  static const OpDef& forward = dispatch::op("fused_attention");
  auto bytes_of = [](const Tensor& t) {
    const Tensor c = contiguous(back(t));
    const char* p = static_cast<const char*>(c.data_ptr());
    return std::string(p, p + c.numel() * int64_t(c.element_size()));
  };
  for (const DType dtype : {DType::Float32, DType::Float64}) {
    for (const AttentionCall& c : tiled_attention_calls(dtype, true)) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + c.name);
      const TensorList inputs{on(c.q), on(c.k), on(c.v), c.mask.defined() ? on(c.mask) : Tensor()};
      attention_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
      const TensorList rows = dispatch::apply(forward, inputs, c.attrs);
      attention_tiles::register_all<GeometryLoops>(DeviceType::CUDA);
      const int64_t block_programs = GeometryLoops::block_programs;
      const TensorList tiles = dispatch::apply(forward, inputs, c.attrs);
      EXPECT_EQ(GeometryLoops::block_programs, block_programs + 1);
      EXPECT_TRUE(bytes_of(tiles[0]) == bytes_of(rows[0])) << "out differs";
      EXPECT_TRUE(bytes_of(tiles[1]) == bytes_of(rows[1])) << "lse differs";
      if (c.name.find("bool mask") != std::string::npos) {  // the fully masked row: NaN, as in the row walk
        EXPECT_TRUE(std::isnan(values(back(tiles[0]))[size_t(3 * c.v.size(-1))]));
      }
    }
  }
}

TEST_F(EmulatedDevice, SortingAndReducingScattersRunOverAnotherBackendsLoops) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  index_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  layout_kernels::register_all<GeometryLoops>(DeviceType::CUDA, true);
  sort_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  // Ties (rounded values) and NaNs, along a strided dim.
  Tensor x = div(round(mul(random_tensor({4, 9, 3}, 141, -2, 2), Scalar(2))), Scalar(2));
  x = where(eq(reshape(arange(108.0), {4, 9, 3}), Scalar(17)), Scalar(NAN), x);
  const Tensor dx = transpose(on(contiguous(transpose(x, 1, 2))), 1, 2);
  for (const bool descending : {false, true}) {
    for (int64_t d = 0; d < 3; ++d) {
      const ValuesIndices host = sort(x, d, descending), dev = sort(dx, d, descending);
      expect_close(back(dev.values), host.values, 0, 0);
      expect_close(back(dev.indices), host.indices, 0, 0);
    }
    for (const bool sorted : {true, false}) {
      const ValuesIndices host = topk(x, 4, 1, descending, sorted), dev = topk(dx, 4, 1, descending, sorted);
      expect_close(back(dev.values), host.values, 0, 0);
      expect_close(back(dev.indices), host.indices, 0, 0);
    }
  }
  // scatter_reduce: every reduction, with and without self, repeated places.
  auto ints = [](std::vector<double> v, const Shape& shape) { return to(from_vector(v, shape), DType::Int64); };
  const Tensor index = ints({1, 1, 0, 3, 0, 0, 2, 2, 3, 1, 3, 1}, {3, 4});
  const Tensor src = random_tensor({3, 4}, 142, -2, 2), self = random_tensor({3, 5}, 143, -2, 2);
  for (const std::string reduce : {"sum", "prod", "mean", "amax", "amin"}) {
    for (const bool include_self : {true, false}) {
      SCOPED_TRACE(reduce + (include_self ? " with self" : ""));
      expect_close(back(scatter_reduce(on(self), 1, on(index), on(src), reduce, include_self)),
                   scatter_reduce(self, 1, index, src, reduce, include_self), 1e-14, 1e-14);
      const Tensor si = to(mul(self, Scalar(3)), DType::Int32), ss = to(mul(src, Scalar(3)), DType::Int32);
      expect_close(back(scatter_reduce(on(si), 1, on(index), on(ss), reduce, include_self)),
                   scatter_reduce(si, 1, index, ss, reduce, include_self), 0, 0);
    }
  }
  EXPECT_THROW(scatter_reduce(on(self), 1, on(ints({5}, {1, 1})), on(src), "amax", true), IndexError);
  // as_strided's gradient over overlapping windows.
  auto grad_of = [&](Device d) {
    Tensor leaf = (d == dev0 ? on(x) : x).detach();
    leaf = where(isnan(leaf), Scalar(0.5), leaf);
    leaf.requires_grad_(true);
    Tensor windows = as_strided(leaf, {5, 4}, {3, 2}, 1);
    sum(mul(windows, windows)).backward();
    return back(leaf.grad());
  };
  expect_close(grad_of(dev0), grad_of(Device()), 1e-14, 1e-14);
}

TEST_F(EmulatedDevice, MaskSizedOpsRunOverAnotherBackendsLoops) {
  // Note [Device mask kernels]: shape inference counts with the device's
  // reduction, then chunks are counted, scanned and written; the emulated
  // walks visit the chunks in reverse order.
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  layout_kernels::register_all<GeometryLoops>(DeviceType::CUDA, true);
  mask_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  // About a third true, 10500 elements (41 chunks), read transposed.
  const Tensor x = random_tensor({3, 700, 5}, 151, -1, 1);
  const Tensor mask = gt(x, Scalar(0.3));
  const Tensor xt = transpose(x, 0, 2), mt = transpose(mask, 0, 2);
  const Tensor dxt = transpose(on(x), 0, 2), dmt = transpose(on(mask), 0, 2);
  expect_close(back(nonzero(dmt)), nonzero(mt), 0, 0);
  expect_close(back(masked_select(dxt, dmt)), masked_select(xt, mt), 0, 0);
  // Non-zero values of other dtypes, a NaN included (it is non-zero).
  Tensor sparse = where(mask, x, Scalar(0));
  sparse = where(eq(reshape(arange(10500.0), {3, 700, 5}), Scalar(7)), Scalar(NAN), sparse);
  for (const DType dtype : {DType::Float32, DType::BFloat16, DType::Int32}) {
    const Tensor v = to(mul(sparse, Scalar(4)), dtype);
    expect_close(back(nonzero(on(v))), nonzero(v), 0, 0);
    expect_close(back(masked_select(on(v), on(mask))), masked_select(v, mask), 0, 0);
  }
  // An expanded (broadcast) mask: counted once per copy.
  const Tensor row = gt(random_tensor({5}, 152, -1, 1), Scalar(0));
  expect_close(back(masked_select(on(x), on(row))), masked_select(x, row), 0, 0);
  expect_close(back(nonzero(expand(on(row), {3, 700, 5}))), nonzero(expand(row, {3, 700, 5})), 0, 0);
  // The gradient (masked_select_backward) through a transposed mask.
  auto grad_of = [&](Device d) {
    Tensor leaf = (d == dev0 ? on(x) : x).detach();
    leaf.requires_grad_(true);
    const Tensor selected = masked_select(transpose(leaf, 0, 2), d == dev0 ? dmt : mt);
    sum(mul(selected, selected)).backward();
    return back(leaf.grad());
  };
  expect_close(grad_of(dev0), grad_of(Device()), 0, 0);
  // Nothing true, everything true, a scalar, an empty tensor.
  expect_close(back(nonzero(on(zeros({4, 3})))), nonzero(zeros({4, 3})), 0, 0);
  EXPECT_EQ(nonzero(on(zeros({4, 3}))).sizes(), (Shape{0, 2}));
  const Tensor all = gt(x, Scalar(-2));
  expect_close(back(masked_select(on(x), on(all))), reshape(x, {-1}), 0, 0);
  expect_close(back(nonzero(on(scalar_tensor(Scalar(2.0))))), nonzero(scalar_tensor(Scalar(2.0))), 0, 0);
  EXPECT_EQ(nonzero(on(zeros({0, 3}))).sizes(), (Shape{0, 2}));
}

TEST_F(EmulatedDevice, RecurrentLayersRunOverAnotherBackendsLoops) {
  // Note [Device recurrent layers]: every mode, both directions, a (T, B, I)
  // and a packed sequence, forward and every gradient, against the CPU's
  // OpenBLAS kernels in float64.
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  layout_kernels::register_all<GeometryLoops>(DeviceType::CUDA, true);
  rnn_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  const int64_t hidden = 6, in_size = 5, batch = 3;
  uint64_t seed = 160;
  for (const std::string mode : {"rnn_tanh", "rnn_relu", "lstm", "gru"}) {
    const int64_t g = rnn_gate_count(mode) * hidden;
    for (const bool packed : {false, true}) {
      for (const bool reverse : {false, true}) {
        SCOPED_TRACE(mode + (packed ? " packed" : "") + (reverse ? " reverse" : ""));
        const Shape batch_sizes = packed ? Shape{3, 3, 2, 1} : Shape{};
        const Shape x_shape = packed ? Shape{9, in_size} : Shape{4, batch, in_size};
        std::vector<Tensor> host{random_tensor(x_shape, ++seed, -1, 1, DType::Float64),
                                 random_tensor({batch, hidden}, ++seed, -1, 1, DType::Float64),
                                 random_tensor({batch, hidden}, ++seed, -1, 1, DType::Float64),
                                 random_tensor({g, in_size}, ++seed, -0.5, 0.5, DType::Float64),
                                 random_tensor({g, hidden}, ++seed, -0.5, 0.5, DType::Float64),
                                 random_tensor({g}, ++seed, -0.5, 0.5, DType::Float64),
                                 random_tensor({g}, ++seed, -0.5, 0.5, DType::Float64)};
        const Tensor weights_y = random_tensor(packed ? Shape{9, hidden} : Shape{4, batch, hidden}, ++seed, -1, 1,
                                               DType::Float64);
        const Tensor weights_h = random_tensor({batch, hidden}, ++seed, -1, 1, DType::Float64);
        auto run = [&](bool device) {
          std::vector<Tensor> leaves;
          for (const Tensor& t : host) {
            Tensor leaf = (device ? on(t) : t).detach();
            leaf.requires_grad_(true);
            leaves.push_back(leaf);
          }
          const bool lstm = mode == "lstm";
          const RnnLayerOutput r = rnn_layer(leaves[0], leaves[1], lstm ? leaves[2] : Tensor(), leaves[3], leaves[4],
                                             leaves[5], leaves[6], mode, reverse, batch_sizes);
          auto w = [&](const Tensor& t) { return device ? on(t) : t; };
          Tensor loss = add(sum(mul(r.output, w(weights_y))), sum(mul(r.h_n, w(weights_h))));
          if (lstm) loss = add(loss, sum(mul(r.c_n, w(weights_h))));
          loss.backward();
          std::vector<Tensor> results{back(r.output), back(r.h_n)};
          if (lstm) results.push_back(back(r.c_n));
          for (size_t k = 0; k < leaves.size(); ++k)
            if (k != 2 || lstm) results.push_back(back(leaves[k].grad()));
          return results;
        };
        const std::vector<Tensor> want = run(false), got = run(true);
        ASSERT_EQ(want.size(), got.size());
        for (size_t k = 0; k < want.size(); ++k) {
          SCOPED_TRACE("result " + std::to_string(k));
          expect_close(got[k], want[k], 1e-12, 1e-12);
        }
      }
    }
  }
}

// Each column k of v (..., rows, cols), float64, times the sign of its
// largest-magnitude element: eigen- and singular vectors compared up to sign.
Tensor signed_columns(const Tensor& v) {
  Tensor c = clone(contiguous(v));
  double* p = static_cast<double*>(c.data_ptr());
  const int64_t rows = c.size(-2), cols = c.size(-1), count = c.numel() / std::max<int64_t>(rows * cols, 1);
  for (int64_t b = 0; b < count; ++b)
    for (int64_t k = 0; k < cols; ++k) {
      double* m = p + b * rows * cols;
      int64_t at = 0;
      for (int64_t r = 1; r < rows; ++r)
        if (std::fabs(m[r * cols + k]) > std::fabs(m[at * cols + k])) at = r;
      if (m[at * cols + k] < 0)
        for (int64_t r = 0; r < rows; ++r) m[r * cols + k] = -m[r * cols + k];
    }
  return c;
}

TEST_F(EmulatedDevice, LinearAlgebraRunsOverAnotherBackendsLoops) {
  // Note [Device linear algebra]: one walk per matrix of the batch, against
  // the CPU's LAPACK in float64; the matrices are read through transposed
  // and broadcast strides on the device.
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  layout_kernels::register_all<GeometryLoops>(DeviceType::CUDA, true);
  linalg_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  auto f64 = [](const Shape& s, uint32_t seed) { return random_tensor(s, seed, -1, 1, DType::Float64); };
  auto mT = [](const Tensor& t) { return transpose(t, -1, -2); };
  const double tol = 1e-11;
  // LU: det, slogdet, inv, solve (B broadcast over A's batch).
  const Tensor a = f64({2, 3, 5, 5}, 171);
  const Tensor da = mT(on(a)), ha = mT(a);
  expect_close(back(linalg::det(da)), linalg::det(ha), tol, tol);
  const linalg::SlogdetResult got = linalg::slogdet(da), want = linalg::slogdet(ha);
  expect_close(back(got.sign), want.sign, 0, 0);
  expect_close(back(got.logabsdet), want.logabsdet, tol, tol);
  expect_close(back(linalg::inv(da)), linalg::inv(ha), tol, tol);
  const Tensor b = f64({3, 5, 2}, 172);
  expect_close(back(linalg::solve(da, on(b))), linalg::solve(ha, b), tol, tol);
  expect_close(back(linalg::solve(on(a), on(f64({5}, 173)))), linalg::solve(a, f64({5}, 173)), tol, tol);
  // A zero matrix (batch element 5): det 0, and inv names it, as on the CPU.
  Tensor singular = clone(a);
  Tensor zero_row = select(select(singular, 0, 1), 0, 2);
  copy_(zero_row, zeros({5}, {.dtype = DType::Float64}));
  expect_close(back(linalg::det(on(singular))), linalg::det(singular), tol, tol);
  std::string cpu_message, device_message;
  try { linalg::inv(singular); } catch (const LinAlgError& e) { cpu_message = e.what(); }
  try { linalg::inv(on(singular)); } catch (const LinAlgError& e) { device_message = e.what(); }
  EXPECT_NE(cpu_message.find("(Batch element 5)"), std::string::npos) << cpu_message;
  EXPECT_EQ(device_message, cpu_message);
  // Cholesky, both factors, of A A^T + 5 I; a matrix that is not positive-definite.
  const Tensor spd = add(matmul(a, mT(a)), mul(eye(5, std::nullopt, {.dtype = DType::Float64}), Scalar(5)));
  for (const bool upper : {false, true})
    expect_close(back(linalg::cholesky(on(spd), upper)), linalg::cholesky(spd, upper), tol, tol);
  EXPECT_THROW(linalg::cholesky(on(a)), LinAlgError);
  // QR of tall, wide and square matrices in every mode: LAPACK's signs.
  for (const Shape& shape : {Shape{2, 7, 4}, Shape{3, 4, 7}, Shape{5, 5}}) {
    const Tensor m = f64(shape, 174);
    for (const std::string mode : {"reduced", "complete", "r"}) {
      SCOPED_TRACE(shape_str(shape) + " " + mode);
      const linalg::QRResult d = linalg::qr(mT(on(contiguous(mT(m)))), mode), h = linalg::qr(m, mode);
      expect_close(back(d.R), h.R, tol, tol);
      if (mode != "r") expect_close(back(d.Q), h.Q, tol, tol);
    }
  }
  // SVD: the values exactly, the vectors up to sign, and full bases.
  for (const Shape& shape : {Shape{2, 6, 4}, Shape{3, 4, 6}, Shape{4, 4}}) {
    const Tensor m = f64(shape, 175);
    expect_close(back(linalg::svdvals(on(m))), linalg::svdvals(m), tol, tol);
    for (const bool full : {false, true}) {
      SCOPED_TRACE(shape_str(shape) + (full ? " full" : " reduced"));
      const linalg::SVDResult d = linalg::svd(on(m), full), h = linalg::svd(m, full);
      expect_close(back(d.S), h.S, tol, tol);
      const int64_t k = h.S.size(-1);
      // The first k columns of U and rows of Vh pair up: one sign each.
      const Tensor du = back(d.U), dv = back(d.Vh);
      const Tensor flip = sign(sum(mul(narrow(du, -1, 0, k), narrow(h.U, -1, 0, k)), {-2}));
      expect_close(mul(narrow(du, -1, 0, k), unsqueeze(flip, -2)), narrow(h.U, -1, 0, k), 1e-10, 1e-10);
      expect_close(mul(narrow(dv, -2, 0, k), unsqueeze(flip, -1)), narrow(h.Vh, -2, 0, k), 1e-10, 1e-10);
      const Tensor eye_u = eye(du.size(-1), std::nullopt, {.dtype = DType::Float64});
      const Tensor eye_v = eye(dv.size(-2), std::nullopt, {.dtype = DType::Float64});
      expect_close(matmul(mT(du), du), expand(eye_u, matmul(mT(du), du).sizes()), 1e-12, 0);
      expect_close(matmul(dv, mT(dv)), expand(eye_v, matmul(dv, mT(dv)).sizes()), 1e-12, 0);
    }
  }
  // A rank-1 matrix: its zero singular values' vectors are completed.
  const Tensor rank1 = matmul(f64({6, 1}, 176), f64({1, 4}, 177));
  const linalg::SVDResult r1 = linalg::svd(on(rank1), true);
  const Tensor u1 = back(r1.U), v1 = back(r1.Vh);
  expect_close(matmul(mT(u1), u1), eye(6, std::nullopt, {.dtype = DType::Float64}), 1e-12, 0);
  expect_close(matmul(mul(narrow(u1, -1, 0, 4), unsqueeze(back(r1.S), -2)), v1), rank1, 1e-12, 0);
  EXPECT_THROW(linalg::svd(on(full({3, 3}, Scalar(NAN), {.dtype = DType::Float64}))), LinAlgError);
  // eigh reads one triangle of a matrix that is not symmetric.
  const Tensor g = f64({2, 6, 6}, 178);
  for (const std::string uplo : {"L", "U"}) {
    SCOPED_TRACE(uplo);
    const linalg::EighResult d = linalg::eigh(on(g), uplo), h = linalg::eigh(g, uplo);
    expect_close(back(d.eigenvalues), h.eigenvalues, tol, tol);
    expect_close(signed_columns(back(d.eigenvectors)), signed_columns(h.eigenvectors), 1e-10, 1e-10);
    expect_close(back(linalg::eigvalsh(on(g), uplo)), h.eigenvalues, tol, tol);
  }
  // Entries whose squares over- or underflow, as the CPU; a NaN gives NaN
  // values and vectors (the CPU's syevd gives NaNs or fails to converge).
  for (const double scale : {1e200, 1e-200}) {
    const Tensor gs = mul(g, Scalar(scale)), ms = mul(f64({5, 3}, 179), Scalar(scale));
    expect_close(back(linalg::eigvalsh(on(gs))), linalg::eigvalsh(gs), 0, 1e-11);
    expect_close(back(linalg::svdvals(on(ms))), linalg::svdvals(ms), 0, 1e-11);
  }
  Tensor with_nan = clone(select(g, 0, 0));
  Tensor corner = select(select(with_nan, 0, 3), 0, 1);
  copy_(corner, scalar_tensor(Scalar(NAN), DType::Float64));
  for (const double v : values(back(linalg::eigvalsh(on(with_nan))))) EXPECT_TRUE(std::isnan(v));
  for (const double v : values(back(linalg::eigh(on(with_nan)).eigenvectors))) EXPECT_TRUE(std::isnan(v));
  // float32 runs in float32.
  const Tensor a32 = to(spd, DType::Float32);
  expect_close(back(linalg::inv(on(a32))), linalg::inv(a32), 1e-5, 1e-5);
  expect_close(back(linalg::eigvalsh(on(a32))), linalg::eigvalsh(a32), 1e-4, 1e-5);
  // Empty matrices and batches.
  expect_close(back(linalg::det(on(zeros({2, 0, 0}, {.dtype = DType::Float64})))),
               linalg::det(zeros({2, 0, 0}, {.dtype = DType::Float64})), 0, 0);
  EXPECT_EQ(linalg::inv(on(zeros({0, 3, 3}, {.dtype = DType::Float64}))).sizes(), (Shape{0, 3, 3}));
}

TEST_F(EmulatedDevice, HostStagedOpsRunTheirCpuKernels) {
  // Note [Host-staged kernels]: the collectives (a world of one) and the
  // sharded embeddings' ops run their CPU kernels over host copies; the
  // results land on the device.
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  layout_kernels::register_all<GeometryLoops>(DeviceType::CUDA, true);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  host_staged::register_all(DeviceType::CUDA);
  namespace d = distributed;
  const Tensor x = random_tensor({4, 3}, 181, -1, 1);
  const Tensor dx = transpose(on(transpose(x, 0, 1)), 0, 1);  // read through strides
  auto check = [&](const Tensor& got, const Tensor& want) {
    EXPECT_EQ(got.device(), dev0);
    expect_close(back(got), want, 0, 0);
  };
  check(d::comm_all_reduce(dx, {0}), x);
  check(d::all_reduce_sum(dx, {0}), x);
  check(d::comm_all_gather(dx, {0}, {4}), x);
  check(d::comm_reduce_scatter(dx, {0}, {4}), x);
  check(d::comm_all_to_all(dx, {0}, {4}, {4}), x);
  // Point to point needs another rank; on the device both reach the communicator.
  for (const std::function<void()>& call : std::vector<std::function<void()>>{
           [&] { d::comm_send(dx, 0, 5); }, [&] { d::comm_recv({4, 3}, DType::Float64, 0, 5, dev0); }}) {
    try {
      call();
      ADD_FAILURE() << "a send to this rank was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("must be another rank"), std::string::npos) << e.what();
    }
  }
  // An embedding on the device and its twin on the host: the same rows,
  // gradients and update.
  using namespace one_embedding;
  auto make = [] {
    auto t = std::make_shared<TableSet>(4, DType::Float32, std::vector<Initializer>{{}, {}}, 7);
    return std::make_pair(t, register_table_set(t));
  };
  const auto [device_tables, device_id] = make();
  const auto [host_tables, host_id] = make();
  const Tensor ids = from_vector(std::vector<double>{3, 9, 3, 1, 12}, {5}, {.dtype = DType::Int64});
  const Tensor tables = from_vector(std::vector<double>{0, 1, 0, 0, 1}, {5}, {.dtype = DType::Int64});
  const Tensor weight = random_tensor({5, 4}, 182, -1, 1, DType::Float32);
  auto step = [&](int64_t id, Device where) {
    Tensor shadow = zeros({1}, {.dtype = DType::Float32, .device = where});
    shadow.requires_grad_(true);
    const Tensor rows = lookup(shadow, to(ids, where), to(tables, where), id);
    EXPECT_EQ(rows.device(), where);
    sum(mul(rows, to(weight, where))).backward();
    UpdateRule rule;
    rule.kind = UpdateRule::Kind::Adam;
    apply_update(shadow, id, rule);
    NoGradGuard no_grad;
    return back(lookup(shadow, to(ids, where), to(tables, where), id));
  };
  expect_close(step(device_id, dev0), step(host_id, Device()), 0, 0);
  EXPECT_EQ(device_tables->num_rows(), host_tables->num_rows());
}

TEST_F(EmulatedDevice, ConvolutionsRunOverAnotherBackendsLoops) {
  elementwise_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  reduce_kernels::register_all<GeometryReducer>(DeviceType::CUDA);
  conv_kernels::register_all<GeometryLoops>(DeviceType::CUDA);
  // Output, and the gradients of x, weight and bias, of f(x, w, b).
  auto check = [&](const Tensor& x, const Tensor& w, const Tensor& b,
                   const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f) {
    auto run = [&](Device d) {
      TensorList leaves;
      for (const Tensor& t : {x, w, b}) {
        Tensor leaf = (d == dev0 ? on(t) : t).detach();
        leaf.requires_grad_(true);
        leaves.push_back(leaf);
      }
      // a strided input on the device
      const Tensor input = d == dev0 ? transpose(contiguous(transpose(leaves[0], 1, 2)), 1, 2) : leaves[0];
      Tensor y = f(input, leaves[1], leaves[2]);
      sum(mul(y, y)).backward();
      return TensorList{y.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
    };
    const TensorList host = run(Device()), dev = run(dev0);
    for (size_t k = 0; k < host.size(); ++k) expect_close(back(dev[k]), host[k], 1e-11, 1e-11);
  };
  const Tensor x = random_tensor({2, 4, 7, 6}, 151, -1, 1);
  check(x, random_tensor({6, 2, 3, 2}, 152, -1, 1), random_tensor({6}, 153, -1, 1),
        [](const Tensor& a, const Tensor& w, const Tensor& b) {
          return conv2d(a, w, b, {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}, .groups = 2});
        });
  check(x, random_tensor({4, 3, 3, 3}, 154, -1, 1), random_tensor({3}, 155, -1, 1),
        [](const Tensor& a, const Tensor& w, const Tensor& b) {
          return conv_transpose2d(a, w, b, {.stride = {2, 2}, .padding = {1, 0}, .output_padding = {1, 1}});
        });
  const Tensor x5 = random_tensor({1, 2, 4, 5, 3}, 156, -1, 1);
  check(x5, random_tensor({3, 2, 2, 3, 2}, 157, -1, 1), random_tensor({3}, 158, -1, 1),
        [](const Tensor& a, const Tensor& w, const Tensor& b) {
          return conv3d(a, w, b, {.stride = {1, 2, 1}, .padding = {1, 1, 0}});
        });
}

}  // namespace
}  // namespace mf

namespace mf {
namespace {

using emulated::EmulatedBackend;
using emulated::GeometryLoops;
using emulated::GeometryReducer;
using testing::random_tensor;

// Note [Kernel scratch]: a kernel with a ScratchFn is a leaf. Each call the
// public functions below make of such an op is replayed straight into its
// emulated-device kernel, with the outputs and the scratch allocated first
// as a caller does: the kernel must allocate nothing on the device, and
// must give what the dispatcher's call of the same op gives.
TEST(KernelScratch, KernelsWithScratchAllocateNothing) {
  EmulatedBackend backend;
  Backend* previous = replace_backend(DeviceType::CUDA, &backend);
  constexpr DeviceType kCuda = DeviceType::CUDA;
  struct Kept {
    std::string op;
    KernelFn kernel;
    ScratchFn scratch;
  };
  std::vector<Kept> kept;
  for (const OpDef* op : OpRegistry::instance().all())
    if (op->name != "to_device") kept.push_back({op->name, op->kernels[size_t(kCuda)], op->scratch[size_t(kCuda)]});
  elementwise_kernels::register_all<GeometryLoops>(kCuda);
  layout_kernels::register_all<GeometryLoops>(kCuda, true);
  reduce_kernels::register_all<GeometryReducer>(kCuda);
  composed_kernels::register_all<GeometryLoops, GeometryReducer>(kCuda);
  index_kernels::register_all<GeometryLoops>(kCuda);
  mask_kernels::register_all<GeometryLoops>(kCuda);
  random_kernels::register_all<GeometryLoops>(kCuda);
  pool_kernels::register_all<GeometryLoops>(kCuda);
  sort_kernels::register_all<GeometryLoops>(kCuda);
  attention_tiles::register_all<GeometryLoops>(kCuda);  // the row walks for heads wider than a tile
  linalg_kernels::register_all<GeometryLoops>(kCuda);
  loss_kernels::register_all<GeometryLoops, GeometryReducer>(kCuda);
  rnn_kernels::register_all<GeometryLoops>(kCuda);
  resample_kernels::register_all<GeometryLoops>(kCuda);
  const Device dev{kCuda, 0};
  auto on = [&](const Tensor& t) { return to(t, dev); };
  auto f64 = [](const Shape& s, uint32_t seed) { return random_tensor(s, seed, -1, 1, DType::Float64); };

  GeometryReducer::plans.clear();
  std::vector<dispatch::RecordedCall> calls;
  {
    dispatch::CallRecorder recorder;
    const Tensor a = transpose(on(f64({3, 4, 4}, 1)), -1, -2);
    linalg::inv(a);
    linalg::det(a);
    linalg::solve(a, on(f64({3, 4, 2}, 2)));
    linalg::qr(on(f64({5, 3}, 3)), "complete");
    linalg::svd(on(f64({2, 4, 3}, 4)), false);
    linalg::svdvals(on(f64({3, 5}, 5)));
    linalg::eigh(on(add(f64({4, 4}, 6), transpose(f64({4, 4}, 6), 0, 1))));
    const Tensor x = transpose(on(random_tensor({6, 700}, 7, -1, 1)), 0, 1);
    const Tensor mask = gt(x, Scalar(0.2));
    nonzero(mask);
    Tensor leaf = x.detach();
    leaf.requires_grad_(true);
    sum(masked_select(leaf, mask)).backward();
    topk(x, 3, 0, true, false);
    Tensor strided = transpose(on(zeros({5, 4})), 0, 1);
    uniform_(strided, -1.0, 1.0);
    randperm(20, dev);
    const Tensor rows = on(from_vector({2, 0, 3}, {3}, {.dtype = DType::Int64}));
    Tensor table = on(random_tensor({5, 4}, 8, -1, 1));
    index(table, {rows});
    index_put_(table, {rows}, on(ones({3, 4})), true);
    scatter_reduce(on(zeros({2, 5})), 1, on(from_vector({0, 4, 4, 1}, {2, 2}, {.dtype = DType::Int64})),
                   on(ones({2, 2})), "mean", false);
    Tensor windows_of = on(random_tensor({12}, 9, -1, 1)).detach();
    windows_of.requires_grad_(true);
    sum(as_strided(windows_of, {3, 4}, {2, 1}, 1)).backward();
    Tensor q = on(random_tensor({1, 2, 3, 4}, 10, -1, 1)).detach();
    q.requires_grad_(true);
    sum(scaled_dot_product_attention(q, q, q, Tensor(), 0.0, true)).backward();
    Tensor wide = on(random_tensor({1, 2, 3, 130}, 26, -1, 1)).detach();
    wide.requires_grad_(true);
    sum(scaled_dot_product_attention(q, q, wide, Tensor(), 0.0, false)).backward();
    Tensor image = on(random_tensor({1, 2, 6, 6}, 11, -1, 1)).detach();
    image.requires_grad_(true);
    sum(max_pool2d(transpose(image, 2, 3), {.kernel_size = {2, 2}})).backward();
    sum(avg_pool2d(image, {.kernel_size = {3, 3}})).backward();
    // Reductions: chunked (partials in scratch), strided, cast, two-pass,
    // over the flattened input; and what is built on them.
    const Tensor big = on(random_tensor({3, 40000}, 12, -1, 1));
    sum(big, {1});
    sum(transpose(big, 0, 1), {0});
    sum(on(ones({4, 5}, {.dtype = DType::Int32})), {1});
    var(big, {1});
    logsumexp(big, {1});
    argmax(transpose(big, 0, 1));
    Tensor logits = on(random_tensor({6, 5}, 13, -2, 2)).detach();
    logits.requires_grad_(true);
    sum(mul(log_softmax(logits, 1), softmax(logits, 0))).backward();
    Tensor feature = on(random_tensor({4, 6, 3}, 14, -1, 1)).detach();
    feature.requires_grad_(true);
    sum(layer_norm(transpose(feature, 1, 2), {6}, on(random_tensor({6}, 15, 0.5, 1.5)),
                   on(random_tensor({6}, 16, -1, 1)))).backward();
    sum(group_norm(feature, 2, on(ones({6})), on(zeros({6})))).backward();
    sum(batch_norm(feature, on(zeros({6})), on(ones({6})), on(ones({6})), on(zeros({6})), true)).backward();
    const Tensor target = on(from_vector({0, 4, 2, -100, 1, 3}, {6}, {.dtype = DType::Int64}));
    sum(cross_entropy(logits, target, on(random_tensor({5}, 17, 0.5, 2)), -100, "mean", 0.1)).backward();
    sum(nll_loss(log_softmax(logits, 1), target)).backward();
    mse_loss(logits, on(zeros({6, 5})));
    binary_cross_entropy_with_logits(logits, on(ones({6, 5})));
    // A recurrent layer and resampling, forward and backward.
    Tensor seq = on(random_tensor({4, 2, 3}, 18, -1, 1, DType::Float64)).detach();
    seq.requires_grad_(true);
    auto f64_leaf = [&](const Shape& shape, uint32_t seed) {
      Tensor t = on(random_tensor(shape, seed, -0.5, 0.5, DType::Float64)).detach();
      t.requires_grad_(true);
      return t;
    };
    const RnnLayerOutput r = rnn_layer(seq, f64_leaf({2, 5}, 19), f64_leaf({2, 5}, 20), f64_leaf({20, 3}, 21),
                                       f64_leaf({20, 5}, 22), f64_leaf({20}, 23), f64_leaf({20}, 24), "lstm");
    sum(r.output).backward();
    Tensor small = on(random_tensor({1, 2, 3, 4}, 25, -1, 1)).detach();
    small.requires_grad_(true);
    sum(interpolate(small, {.size = Shape{5, 7}, .mode = "bilinear"})).backward();
    calls = std::move(recorder.calls);
  }
  // The partials of a reduction cut into chunks were among the pieces.
  EXPECT_TRUE(std::any_of(GeometryReducer::plans.begin(), GeometryReducer::plans.end(),
                          [](const ReducePlan& p) { return p.chunks > 1; }));
  std::set<std::string> covered;
  for (const dispatch::RecordedCall& call : calls) {
    const OpDef& op = *call.op;
    const ScratchFn& scratch = op.scratch[size_t(kCuda)];
    if (!scratch) continue;  // an in-place call is replayed out of place
    SCOPED_TRACE(op.name);
    const std::vector<TensorMeta> metas = dispatch::infer(op, call.inputs, call.attrs);
    TensorList out;
    for (const TensorMeta& m : metas) out.push_back(make_empty(m.sizes, m.dtype, m.device));
    out.push_back(make_empty({scratch(call.inputs, metas, call.attrs)}, DType::UInt8, dev));
    const int64_t before = memory_stats(dev).num_allocations;
    op.kernels[size_t(kCuda)](call.inputs, out, call.attrs);
    EXPECT_EQ(memory_stats(dev).num_allocations, before) << op.name << " allocated on the device";
    out.pop_back();
    const TensorList want = dispatch::apply(op, call.inputs, call.attrs);
    ASSERT_EQ(want.size(), out.size());
    for (size_t i = 0; i < out.size(); ++i) expect_close(to(out[i], Device()), to(want[i], Device()), 0, 0);
    covered.insert(op.name);
  }
  for (const char* name : {"linalg_inv", "linalg_det", "linalg_solve", "linalg_qr", "linalg_svd", "linalg_svdvals",
                           "linalg_eigh", "nonzero", "masked_select", "masked_select_backward", "topk", "randperm",
                           "index", "index_put", "scatter_reduce", "as_strided_backward", "fused_attention",
                           "fused_attention_backward", "max_pool2d_scatter", "avg_pool2d_backward", "uniform", "sum", "var",
                           "logsumexp", "argmax", "softmax", "log_softmax", "softmax_backward", "log_softmax_backward",
                           "layer_norm", "layer_norm_backward", "group_norm", "group_norm_backward", "batch_norm",
                           "batch_norm_backward", "cross_entropy", "cross_entropy_backward", "nll_loss",
                           "nll_loss_backward", "mse_loss", "binary_cross_entropy_with_logits", "rnn_layer",
                           "rnn_layer_backward", "upsample_linear", "upsample_linear_backward"})
    EXPECT_TRUE(covered.count(name)) << name << " was not replayed";
  calls.clear();
  for (const OpDef* op : OpRegistry::instance().all())
    if (op->name != "to_device") OpRegistry::instance().set_kernel(op->name, kCuda, KernelFn());
  for (const Kept& k : kept) OpRegistry::instance().set_kernel(k.op, kCuda, k.kernel, k.scratch);
  replace_backend(DeviceType::CUDA, previous);
}

}  // namespace
}  // namespace mf
