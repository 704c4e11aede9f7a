// The CUDA backend's device verbs on a real GPU (Note [CUDA backend]);
// skipped where the backend is not built or sees no device. tools/gpu_check.sh
// runs these on a GPU machine.
#include <functional>

#include "meshflow/backend.h"
#include "meshflow/nn.h"
#include "meshflow/ops/conv.h"
#include "meshflow/ops/creation.h"
#include "meshflow/ops/elementwise.h"
#include "meshflow/ops/linalg.h"
#include "meshflow/ops/resample.h"
#include "meshflow/optim/update.h"
#include "distributed/comm_ops.h"
#include "meshflow/distributed/communicator.h"
#include "test_util.h"

namespace mf {
namespace {
using testing::expect_values;

// f's output and the gradients of sum(f(inputs)^2) with respect to the
// inputs, with the inputs copied to `device` first.
TensorList output_and_grads(const TensorList& inputs, const Device& device,
                            const std::function<Tensor(const TensorList&)>& f) {
  TensorList leaves;
  for (const Tensor& t : inputs) {
    Tensor leaf = to(t, device).detach();
    leaf.requires_grad_(true);
    leaves.push_back(leaf);
  }
  const Tensor y = f(leaves);
  sum(mul(y, y)).backward();
  TensorList out{y.detach()};
  for (const Tensor& leaf : leaves) out.push_back(leaf.grad());
  return out;
}

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

// The CUDA kernels against the CPU's, op by op, on layouts that take each
// kernel path (flat and strided loops; thread, warp and block reductions,
// chunked; the composed softmax and norms; cuBLAS plans).
TEST_F(CudaBackendTest, KernelsMatchTheCpu) {
  auto on = [&](const Tensor& t) { return to(t, dev0); };
  auto back = [](const Tensor& t) { return to(t, Device()); };
  auto f64 = [](const Tensor& t) { return to(t, DType::Float64); };
  const Tensor a = testing::random_tensor({64, 33}, 1, -2, 2, DType::Float32);
  const Tensor b = testing::random_tensor({33, 17}, 2, -2, 2, DType::Float32);
  const Tensor big = testing::random_tensor({300000}, 3, -1, 1, DType::Float32);
  // elementwise: flat, broadcast, transposed (strided), bool results, casts, factories
  testing::expect_close(back(exp(on(a))), exp(a), 1e-5, 1e-5);
  testing::expect_close(back(add(on(a), on(slice(a, 0, 0, 1)))), add(a, slice(a, 0, 0, 1)), 1e-6, 1e-6);
  testing::expect_close(back(gelu(transpose(on(a), 0, 1))), gelu(transpose(a, 0, 1)), 1e-5, 1e-5);
  testing::expect_close(f64(back(gt(on(a), 0.5))), f64(gt(a, 0.5)), 0, 0);
  testing::expect_close(f64(back(to(on(a), DType::BFloat16))), f64(to(a, DType::BFloat16)), 0, 0);
  testing::expect_close(back(where(on(gt(a, 0.0)), on(a), Scalar(0.0))), where(gt(a, 0.0), a, Scalar(0.0)), 0, 0);
  testing::expect_close(back(arange(Scalar(0.0), Scalar(5.0), Scalar(0.25), DType::Float32, dev0)),
                        arange(Scalar(0.0), Scalar(5.0), Scalar(0.25), DType::Float32), 0, 0);
  // reductions
  testing::expect_close(back(sum(on(big))), sum(big), 1e-3, 1e-5);
  testing::expect_close(back(sum(on(a), {0})), sum(a, {0}), 1e-4, 1e-5);
  testing::expect_close(back(var(on(a), {1})), var(a, {1}), 1e-5, 1e-5);
  testing::expect_close(back(logsumexp(on(big), {0})), logsumexp(big, {0}), 1e-4, 1e-5);
  testing::expect_close(f64(back(argmax(on(a), 1))), f64(argmax(a, 1)), 0, 0);
  testing::expect_close(back(amax(on(transpose(a, 0, 1)), {1})), amax(transpose(a, 0, 1), {1}), 0, 0);
  // composed softmax and norms
  testing::expect_close(back(softmax(on(a), 1)), softmax(a, 1), 1e-6, 1e-5);
  testing::expect_close(back(log_softmax(on(a), 0)), log_softmax(a, 0), 1e-5, 1e-5);
  const Tensor w = testing::random_tensor({33}, 4, 0.5, 1.5, DType::Float32);
  testing::expect_close(back(layer_norm(on(a), {33}, on(w), on(w), 1e-5)), layer_norm(a, {33}, w, w, 1e-5), 1e-5, 1e-5);
  // cuBLAS: plain, transposed, batched with a broadcast operand, float16
  testing::expect_close(back(matmul(on(a), on(b))), matmul(a, b), 1e-4, 1e-4);
  testing::expect_close(back(matmul(transpose(on(b), 0, 1), transpose(on(a), 0, 1))),
                        matmul(transpose(b, 0, 1), transpose(a, 0, 1)), 1e-4, 1e-4);
  const Tensor batch = testing::random_tensor({3, 5, 64}, 5, -1, 1, DType::Float32);
  testing::expect_close(back(matmul(on(batch), on(a))), matmul(batch, a), 1e-4, 1e-4);
  const Tensor ah = to(a, DType::Float16), bh = to(b, DType::Float16);
  testing::expect_close(f64(back(matmul(on(ah), on(bh)))), f64(matmul(ah, bh)), 2e-2, 2e-2);
  // AdamW, its step counted on the device; a set found_inf leaves everything as it was.
  for (bool found : {false, true}) {
    Tensor p = clone(a), m = zeros_like(a), v = zeros_like(a), step = zeros({});
    Tensor pd = on(p), md = on(m), vd = on(v), stepd = on(step);
    optim::AdamUpdateArgs args;
    args.weight_decay = 0.01;
    args.found_inf = full({}, Scalar(found ? 1.0 : 0.0));
    for (int k = 0; k < 2; ++k) optim::adamw_update_(p, a, m, v, Tensor(), step, args);
    args.found_inf = on(args.found_inf);
    for (int k = 0; k < 2; ++k) optim::adamw_update_(pd, on(a), md, vd, Tensor(), stepd, args);
    testing::expect_close(back(pd), p, 1e-6, 1e-5);
    testing::expect_close(back(vd), v, 1e-6, 1e-5);
    testing::expect_close(back(stepd), step, 0, 0);
  }
}

// The families of shared walks (indexing, scans, losses, random ops,
// resampling, pooling, batch norm, convolutions, attention, sorting) on the
// GPU against the CPU: forward values and the gradient of sum(f(x)^2),
// in float64 so the sums' order barely shows.
TEST_F(CudaBackendTest, WalkFamiliesMatchTheCpu) {
  auto on = [&](const Tensor& t) { return to(t, dev0); };
  auto back = [](const Tensor& t) { return to(t, Device()); };
  auto check = [&](const Tensor& x, const std::function<Tensor(const Tensor&, Device)>& f) {
    auto run = [&](Device d) {
      Tensor leaf = (d == dev0 ? on(x) : x).detach();
      leaf.requires_grad_(true);
      manual_seed(11);
      Tensor y = f(leaf, d);
      sum(mul(y, y)).backward();
      return TensorList{y.detach(), leaf.grad()};
    };
    const TensorList host = run(Device()), dev = run(dev0);
    testing::expect_close(back(dev[0]), host[0], 1e-9, 1e-9);
    testing::expect_close(back(dev[1]), host[1], 1e-9, 1e-9);
  };
  auto ints = [](std::vector<double> v, const Shape& shape, Device d) {
    return to(to(from_vector(v, shape), DType::Int64), d);
  };
  const Tensor x = testing::random_tensor({2, 3, 8, 6}, 21, -1, 1);
  const Tensor m = testing::random_tensor({6, 5}, 22, -1, 1);
  check(m, [&](const Tensor& t, Device d) { return gather(t, 1, ints({4, 0, 2, 1, 1, 3}, {6, 1}, d)); });
  check(m, [&](const Tensor& t, Device d) { return embedding(ints({5, 0, 3, 3}, {2, 2}, d), t); });
  check(m, [&](const Tensor& t, Device) { return cumsum(t, 0); });
  check(m, [&](const Tensor& t, Device d) { return cross_entropy(t, ints({1, 4, 0, 2, 2, 3}, {6}, d)); });
  check(m, [&](const Tensor& t, Device) { return dropout(t, 0.4); });
  check(m, [&](const Tensor& t, Device) { return sort(t, 1).values; });
  check(x, [&](const Tensor& t, Device) {
    InterpolateOptions o;
    o.size = Shape{11, 9};
    o.mode = "bilinear";
    o.align_corners = false;
    return interpolate(t, o);
  });
  check(x, [&](const Tensor& t, Device) { return max_pool2d(t, {.kernel_size = {3, 2}, .padding = {1, 1}}); });
  check(x, [&](const Tensor& t, Device d) {
    return batch_norm(t, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  });
  check(x, [&](const Tensor& t, Device d) {
    const Tensor w = testing::random_tensor({4, 3, 3, 3}, 23, -1, 1);
    return conv2d(t, d == dev0 ? on(w) : w, Tensor(), {.stride = {2, 1}, .padding = {1, 1}});
  });
  check(x, [&](const Tensor& t, Device) { return scaled_dot_product_attention(t, t, t, Tensor(), 0.0, true); });
  check(m, [&](const Tensor& t, Device) { return masked_select(t, gt(t, Scalar(0))); });
  // Linear algebra (Note [Device linear algebra]): QR keeps LAPACK's signs;
  // values of symmetric and general matrices; a host-staged collective.
  const Tensor sq = add(testing::random_tensor({3, 5, 5}, 25, -1, 1), mul(eye(5, std::nullopt, {.dtype = DType::Float64}),
                                                                          Scalar(3)));
  check(sq, [&](const Tensor& t, Device) { return linalg::inv(t); });
  check(sq, [&](const Tensor& t, Device) { return linalg::slogdet(t).logabsdet; });
  check(m, [&](const Tensor& t, Device) { return linalg::qr(t).R; });
  check(m, [&](const Tensor& t, Device) { return linalg::svdvals(t); });
  check(sq, [&](const Tensor& t, Device) { return linalg::eigvalsh(t); });
  check(m, [&](const Tensor& t, Device) { return distributed::all_reduce_sum(t, {0}); });
  manual_seed(3);
  const Tensor dev_rand = back(rand({1000}, {.device = dev0}));
  manual_seed(3);
  testing::expect_close(dev_rand, rand({1000}), 0, 0);
  // Gamma samples (Note [Gamma sampling]): the CPU's for the same seed;
  // their gradient (the shared elementwise table).
  const Tensor concentration = testing::random_tensor({500}, 24, 0.1, 3);
  manual_seed(4);
  const Tensor dev_gamma = back(standard_gamma(on(concentration)));
  manual_seed(4);
  const Tensor gamma = standard_gamma(concentration);
  testing::expect_close(dev_gamma, gamma, 1e-9, 1e-9);
  testing::expect_close(back(standard_gamma_grad(on(concentration), on(gamma))),
                        standard_gamma_grad(concentration, gamma), 1e-9, 1e-9);
  EXPECT_THROW(gather(on(m), 1, ints({7}, {1, 1}, dev0)), IndexError);
}

// Note [Tiled attention]: (B, H, L, S) weights past the batched GEMMs'
// 2^28 with heads of 64 run the tiled block programs: a causal call and a
// key-padding mask with dropout against the CPU, in float32.
TEST_F(CudaBackendTest, LongSequencesRunTheTiledAttentionAsTheCpu) {
  const Tensor q = testing::random_tensor({1, 2, 12000, 64}, 31, -1, 1, DType::Float32);
  const Tensor k = testing::random_tensor({1, 2, 12000, 64}, 32, -1, 1, DType::Float32);
  const Tensor v = testing::random_tensor({1, 2, 12000, 48}, 33, -1, 1, DType::Float32);
  const Tensor keys_kept = lt(reshape(arange(12000.0), {1, 1, 1, 12000}), Scalar(11500));
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "key padding, dropout");
    auto f = [&](const TensorList& t) {
      manual_seed(9);
      const Tensor mask = causal ? Tensor() : to(keys_kept, t[0].device());
      return scaled_dot_product_attention(t[0], t[1], t[2], mask, causal ? 0.0 : 0.1, causal);
    };
    const TensorList host = output_and_grads({q, k, v}, Device(), f), dev = output_and_grads({q, k, v}, dev0, f);
    for (size_t i = 0; i < host.size(); ++i) testing::expect_close(to(dev[i], Device()), host[i], 1e-4, 1e-3);
  }
}

// Note [cuDNN convolutions]: convolutions cuDNN runs (groups, strides,
// dilation, 3-d, a transposed one with output_padding, a non-contiguous
// input, a misaligned one) and ones it cannot (padding='same' with an even
// kernel) against the CPU: the output and the gradients of x, w and bias,
// in float64 and float32, plus a bfloat16 forward.
TEST_F(CudaBackendTest, CudnnConvolutionsMatchTheCpu) {
  auto on = [&](const Tensor& t) { return to(t, dev0); };
  auto back = [](const Tensor& t) { return to(t, Device()); };
  using ConvFn = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;
  auto check = [&](const Shape& xs, const Shape& ws, int64_t out_channels, DType dtype, double tol, const ConvFn& f) {
    const Tensor x = to(testing::random_tensor(xs, 31, -1, 1), dtype);
    const Tensor w = to(testing::random_tensor(ws, 32, -1, 1), dtype);
    const Tensor b = to(testing::random_tensor({out_channels}, 33, -1, 1), dtype);
    auto run = [&](const Device& device) {
      return output_and_grads({x, w, b}, device, [&](const TensorList& t) { return f(t[0], t[1], t[2]); });
    };
    const TensorList host = run(Device()), dev = run(dev0);
    for (size_t i = 0; i < host.size(); ++i)
      testing::expect_close(to(back(dev[i]), DType::Float64), to(host[i], DType::Float64), tol, tol);
  };
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const double tol = dtype == DType::Float64 ? 1e-9 : 2e-4;
    check({2, 4, 9, 7}, {6, 2, 3, 3}, 6, dtype, tol, [](const Tensor& x, const Tensor& w, const Tensor& b) {
      return conv2d(x, w, b, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}, .groups = 2});
    });
    check({2, 3, 5, 6, 4}, {4, 3, 3, 2, 3}, 4, dtype, tol, [](const Tensor& x, const Tensor& w, const Tensor& b) {
      return conv3d(x, w, b, {.stride = {1, 2, 1}, .padding = {1, 0, 1}});
    });
    check({2, 4, 5, 6}, {4, 3, 3, 3}, 3, dtype, tol, [](const Tensor& x, const Tensor& w, const Tensor& b) {
      return conv_transpose2d(x, w, b, {.stride = {2}, .padding = {1}, .output_padding = {1}});
    });
    check({2, 3, 6, 8}, {5, 3, 3, 3}, 5, dtype, tol, [](const Tensor& x, const Tensor& w, const Tensor& b) {
      return conv2d(transpose(x, 2, 3), w, b, {.padding = {1, 1}});
    });
    check({2, 3, 7, 7}, {5, 3, 4, 2}, 5, dtype, tol, [](const Tensor& x, const Tensor& w, const Tensor& b) {
      return conv2d(x, w, b, {.padding_same = true});
    });
    // A contiguous view 75 elements into its storage: not 16-byte aligned, so copied.
    check({3, 3, 5, 5}, {4, 3, 3, 3}, 4, dtype, tol, [](const Tensor& x, const Tensor& w, const Tensor& b) {
      return conv2d(narrow(x, 0, 1, 2), w, b, {.padding = {1, 1}});
    });
  }
  const Tensor x = testing::random_tensor({4, 8, 12, 12}, 34, -1, 1, DType::Float32);
  const Tensor w = testing::random_tensor({16, 8, 3, 3}, 35, -1, 1, DType::Float32);
  const Tensor xb = to(x, DType::BFloat16), wb = to(w, DType::BFloat16);
  testing::expect_close(to(back(conv2d(on(xb), on(wb), Tensor(), {.padding = {1, 1}})), DType::Float32),
                        conv2d(to(xb, DType::Float32), to(wb, DType::Float32), Tensor(), {.padding = {1, 1}}), 0.1,
                        2e-2);
}

// Note [NCCL collectives] on a group of one (multi-rank groups need a GPU
// per rank): the collective ops against their input, with a non-contiguous
// input, a dtype NCCL has no type for (host-staged), and the group's own
// calls through Note [Device groups].
TEST_F(CudaBackendTest, NcclCollectivesOnAGroupOfOne) {
  auto on = [&](const Tensor& t) { return to(t, dev0); };
  auto back = [](const Tensor& t) { return to(t, Device()); };
  const Tensor a = testing::random_tensor({6, 5}, 41, -1, 1, DType::Float32);
  const Tensor at = transpose(a, 0, 1);
  testing::expect_close(back(distributed::comm_all_reduce(on(a), {0})), a, 0, 0);
  testing::expect_close(back(distributed::all_reduce_sum(on(a), {0})), a, 0, 0);
  testing::expect_close(back(distributed::comm_all_gather(transpose(on(a), 0, 1), {0}, {5})), at, 0, 0);
  testing::expect_close(back(distributed::comm_reduce_scatter(on(a), {0}, {6})), a, 0, 0);
  testing::expect_close(back(distributed::comm_all_to_all(transpose(on(a), 0, 1), {0}, {5}, {5})), at, 0, 0);
  const Tensor mask = gt(a, Scalar(0));
  testing::expect_close(to(back(distributed::comm_all_reduce(on(mask), {0})), DType::Float64),
                        to(mask, DType::Float64), 0, 0);
  std::shared_ptr<distributed::Communicator> group = distributed::device_group({0}, dev0);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->backend(), "nccl");
  Tensor t = on(a);
  group->all_reduce(t, distributed::ReduceOp::Max);
  group->broadcast(t, 0);
  group->all_reduce_async(t)->wait();
  group->barrier();
  testing::expect_close(back(t), a, 0, 0);
  Tensor host = clone(a);
  EXPECT_THROW(group->all_reduce(host), ValueError);  // a host tensor in a CUDA group
  EXPECT_THROW(group->send(t, 0, 0), ValueError);     // no peer in a group of one
}

// Note [cuBLASLt epilogues]: linear's addmm with the bias epilogue (float32
// and bfloat16, a transposed input) and the addmms it leaves to cuBLAS (a
// bias that is not 16-byte aligned, beta != 1, a broadcast 2-d t) against
// the CPU, with their gradients.
TEST_F(CudaBackendTest, CublasLtBiasEpilogueMatchesTheCpu) {
  auto on = [&](const Tensor& t) { return to(t, dev0); };
  auto back = [](const Tensor& t) { return to(t, Device()); };
  auto f64 = [](const Tensor& t) { return to(t, DType::Float64); };
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    const double tol = dtype == DType::Float32 ? 1e-4 : 3e-2;
    const Tensor x = to(testing::random_tensor({64, 33}, 51, -1, 1, DType::Float32), dtype);
    const Tensor w = to(testing::random_tensor({17, 33}, 52, -1, 1, DType::Float32), dtype);
    const Tensor b = to(testing::random_tensor({18}, 53, -1, 1, DType::Float32), dtype);
    const Tensor bias = slice(b, 0, 0, 17), shifted = slice(b, 0, 1, 18);  // shifted: 2 or 4 bytes in
    testing::expect_close(f64(back(linear(on(x), on(w), on(bias)))), f64(linear(x, w, bias)), tol, tol);
    testing::expect_close(f64(back(linear(on(x), on(w), slice(on(b), 0, 1, 18)))), f64(linear(x, w, shifted)), tol,
                          tol);
    const Tensor xt = transpose(to(testing::random_tensor({33, 64}, 54, -1, 1, DType::Float32), dtype), 0, 1);
    testing::expect_close(f64(back(linear(on(xt), on(w), on(bias)))), f64(linear(xt, w, bias)), tol, tol);
    testing::expect_close(f64(back(addmm(on(bias), on(x), transpose(on(w), 0, 1), 0.5))),
                          f64(addmm(bias, x, transpose(w, 0, 1), 0.5)), tol, tol);
    const Tensor t2 = to(testing::random_tensor({1, 17}, 55, -1, 1, DType::Float32), dtype);
    testing::expect_close(f64(back(addmm(on(t2), on(x), transpose(on(w), 0, 1)))),
                          f64(addmm(t2, x, transpose(w, 0, 1))), tol, tol);
  }
  // Gradients through the epilogue's forward, in float32.
  const Tensor x = testing::random_tensor({8, 5}, 56, -1, 1, DType::Float32);
  const Tensor w = testing::random_tensor({3, 5}, 57, -1, 1, DType::Float32);
  const Tensor b = testing::random_tensor({3}, 58, -1, 1, DType::Float32);
  auto run = [&](const Device& device) {
    return output_and_grads({x, w, b}, device, [](const TensorList& t) { return linear(t[0], t[1], t[2]); });
  };
  const TensorList host = run(Device()), dev = run(dev0);
  for (size_t i = 0; i < host.size(); ++i) testing::expect_close(back(dev[i]), host[i], 1e-5, 1e-5);
}

}  // namespace
}  // namespace mf
