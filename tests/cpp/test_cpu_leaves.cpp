// Note [Kernel scratch] on the CPU: the kernels of the losses, pools,
// softmax, the normalisations, the scans, resampling, embedding,
// as_strided's gradient, dropout, the matrix products, the convolutions,
// the recurrent layers, the random ops and cat are leaves. Each call the public
// functions below make of such an op is replayed straight into its CPU
// kernel, once with the recorded (contiguous) inputs and once with the same
// values laid out non-contiguously, with the outputs and the scratch its
// ScratchFn asks for allocated first as a caller does: the kernel must not
// call the CPU allocator, must give what the dispatcher's call of the same
// op gives, and must give the same bits for both layouts.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "meshflow/backend.h"
#include "meshflow/dispatch.h"
#include "meshflow/meshflow.h"
#include "meshflow/ops/conv.h"
#include "meshflow/ops/linalg.h"
#include "meshflow/ops/resample.h"
#include "meshflow/ops/rnn.h"
#include "test_util.h"

namespace mf {
namespace {

using testing::random_tensor;

// The ops whose CPU kernels take their working memory from their scratch.
const std::set<std::string>& leaf_ops() {
  static const std::set<std::string> ops = {
      "nll_loss", "nll_loss_backward", "cross_entropy", "cross_entropy_backward", "cross_entropy_target_terms",
      "mse_loss", "binary_cross_entropy_with_logits",
      "max_pool2d", "max_pool3d", "avg_pool2d", "avg_pool3d", "avg_pool2d_backward", "avg_pool3d_backward",
      "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_avg_pool2d_backward", "adaptive_avg_pool3d_backward",
      "adaptive_max_pool2d", "max_pool2d_scatter", "max_pool2d_gather",
      "softmax", "log_softmax", "softmax_backward", "log_softmax_backward",
      "layer_norm", "group_norm", "layer_norm_backward", "group_norm_backward",
      "cumsum", "cumprod", "cumprod_backward",
      "upsample_nearest", "upsample_nearest_exact", "upsample_linear", "upsample_linear_backward",
      "upsample_bicubic2d", "upsample_bicubic2d_backward", "reflection_pad", "reflection_pad_backward",
      "replication_pad", "circular_pad",
      "embedding", "embedding_backward", "as_strided_backward", "dropout", "dropout_backward",
      "batch_norm", "batch_norm_backward",
      "matmul", "addmm", "conv2d", "conv2d_backward", "conv3d", "conv3d_backward", "conv_transpose2d",
      "rnn_layer", "rnn_layer_backward", "cat",
      "uniform", "normal", "random_int", "bernoulli_scalar", "bernoulli", "randperm", "multinomial",
      "standard_gamma",
      "linalg_det", "linalg_slogdet", "linalg_inv", "linalg_solve", "linalg_cholesky", "linalg_qr", "linalg_svd",
      "linalg_svdvals", "linalg_eigh", "linalg_eigvalsh"};
  return ops;
}

// The same values as t in a layout that is not contiguous where t has two
// elements along some dim: the dims reversed in memory, or every other
// element of a 1-d tensor.
Tensor strided_copy(const Tensor& t) {
  if (!t.defined() || t.dim() == 0) return t.defined() ? clone(t) : t;
  if (t.dim() == 1) {
    Tensor base = zeros({t.numel(), 2}, {.dtype = t.dtype()});
    Tensor v = select(base, 1, 0);
    copy_(v, t);
    return v;
  }
  Shape reversed;
  for (int64_t d = t.dim(); d-- > 0;) reversed.push_back(d);
  return permute(clone(permute(t, reversed)), reversed);
}

TensorList copies(const TensorList& inputs, bool strided) {
  TensorList out;
  for (const Tensor& t : inputs) out.push_back(!t.defined() ? t : strided ? strided_copy(t) : clone(t));
  return out;
}

::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << "shapes or dtypes differ";
  const Tensor ca = contiguous(a), cb = contiguous(b);
  if (std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.numel()) * ca.element_size()) != 0)
    return ::testing::AssertionFailure() << "values differ";
  return ::testing::AssertionSuccess();
}

Tensor leaf(const Shape& shape, uint32_t seed, DType dtype = DType::Float32) {
  Tensor t = random_tensor(shape, seed, -1, 1, dtype);
  t.requires_grad_(true);
  return t;
}

// The calls the public functions make, each op with a non-contiguous input
// somewhere among them.
std::vector<dispatch::RecordedCall> record_calls() {
  dispatch::CallRecorder recorder;
  // Losses, forward and backward; cross_entropy's gradient written with ops
  // (create_graph) calls cross_entropy_target_terms.
  Tensor logits = leaf({6, 5}, 1);
  const Tensor target = from_vector({0, 4, 2, -100, 1, 3}, {6}, {.dtype = DType::Int64});
  const Tensor class_weight = random_tensor({5}, 2, 0.5, 2, DType::Float32);
  sum(cross_entropy(logits, target, class_weight, -100, "mean", 0.1)).backward();
  sum(cross_entropy(logits, target, Tensor(), -100, "none")).backward(Tensor(), false, true);
  sum(nll_loss(log_softmax(logits, 1), target, class_weight)).backward();
  sum(nll_loss(logits, target, Tensor(), -100, "none")).backward();
  mse_loss(logits, random_tensor({6, 5}, 3, -1, 1, DType::Float32));
  mse_loss(logits, random_tensor({5}, 4, -1, 1, DType::Float32), "sum");
  binary_cross_entropy_with_logits(logits, random_tensor({6, 5}, 5, 0, 1, DType::Float32));
  binary_cross_entropy_with_logits(logits, random_tensor({6, 5}, 6, 0, 1, DType::Float32),
                                   random_tensor({6, 5}, 7, 0.5, 2, DType::Float32),
                                   random_tensor({5}, 8, 0.5, 2, DType::Float32));
  binary_cross_entropy_with_logits(logits, random_tensor({6, 5}, 9, 0, 1, DType::Float32), Tensor(),
                                   random_tensor({6, 5}, 10, 0.5, 2, DType::Float32));
  // Pools; the max pools' double backward gathers.
  Tensor image = leaf({2, 3, 6, 6}, 11);
  const Tensor pooled = max_pool2d(image, {.kernel_size = {2, 2}});
  const TensorList g = autograd::grad({sum(mul(pooled, pooled))}, {image}, {}, {}, true);
  sum(mul(g[0], g[0])).backward();
  sum(avg_pool2d(image, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}})).backward();
  sum(avg_pool2d(image, {.kernel_size = {2, 2}, .count_include_pad = false})).backward();
  sum(adaptive_avg_pool2d(image, {4, 5})).backward();
  sum(adaptive_max_pool2d(image, OptionalSizes{4, 4})).backward();
  Tensor volume = leaf({1, 2, 4, 4, 4}, 12);
  sum(max_pool3d(volume, {.kernel_size = {2, 2, 2}})).backward();
  sum(avg_pool3d(volume, {.kernel_size = {2, 2, 2}})).backward();
  sum(adaptive_avg_pool3d(volume, OptionalSizes{3, 3, 2})).backward();
  // Softmax along the last dim and along an inner one.
  Tensor scores = leaf({4, 6, 3}, 13);
  sum(mul(softmax(scores, 2), log_softmax(scores, 1))).backward();
  sum(mul(softmax(scores, 1), log_softmax(scores, 2))).backward();
  // Normalisations.
  Tensor feature = leaf({4, 6, 3}, 14);
  sum(layer_norm(feature, {6, 3}, random_tensor({6, 3}, 15, 0.5, 1.5, DType::Float32),
                 random_tensor({6, 3}, 16, -1, 1, DType::Float32))).backward();
  sum(layer_norm(feature, {3})).backward();
  sum(group_norm(feature, 2, random_tensor({6}, 17, 0.5, 1.5, DType::Float32),
                 random_tensor({6}, 18, -1, 1, DType::Float32))).backward();
  sum(batch_norm(feature, zeros({6}), ones({6}), random_tensor({6}, 19, 0.5, 1.5, DType::Float32),
                 random_tensor({6}, 20, -1, 1, DType::Float32), true)).backward();
  sum(batch_norm(feature, random_tensor({6}, 21, -1, 1, DType::Float32),
                 random_tensor({6}, 22, 0.5, 1.5, DType::Float32), Tensor(), Tensor(), false)).backward();
  // Scans; a scan over many dims that do not merge copies its input.
  Tensor series = leaf({5, 4}, 23, DType::Float64);
  sum(mul(cumsum(series, 0), cumprod(series, 1))).backward();
  cumsum(random_tensor(Shape(14, 2), 24, -1, 1, DType::Float32), 3);
  // Resampling, weighted and not, in float32 and bfloat16.
  Tensor small = leaf({1, 2, 3, 4}, 25);
  sum(interpolate(small, {.size = Shape{5, 7}, .mode = "bilinear"})).backward();
  sum(interpolate(small, {.size = Shape{6, 7}, .mode = "bicubic", .align_corners = true})).backward();
  interpolate(small, {.size = Shape{5, 9}, .mode = "nearest"});
  interpolate(small, {.size = Shape{5, 9}, .mode = "nearest-exact"});
  interpolate(to(small.detach(), DType::BFloat16), {.size = Shape{5, 7}, .mode = "bilinear"});
  sum(pad(small, {1, 2, 2, 1}, "reflect", std::nullopt)).backward();
  pad(small, {1, 2, 2, 1}, "replicate", std::nullopt);
  pad(small, {1, 2, 2, 1}, "circular", std::nullopt);
  // Embedding, as_strided's gradient and dropout.
  Tensor table = leaf({7, 4}, 26);
  const Tensor rows = from_vector({2, 0, 6, 2, 5, 1}, {2, 3}, {.dtype = DType::Int64});
  sum(embedding(rows, table)).backward();
  Tensor flat = leaf({12}, 27);
  sum(as_strided(flat, {3, 4}, {2, 1}, 1)).backward();
  sum(dropout(leaf({6, 5}, 28), 0.3, true)).backward();
  // Matrix products: each library's dtypes, batched and broadcast, integers.
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    Tensor a = leaf({3, 5, 4}, 30, dtype), b = leaf({4, 6}, 31, dtype);
    sum(matmul(a, b)).backward();
    sum(linear(leaf({5, 4}, 32, dtype), leaf({3, 4}, 33, dtype), leaf({3}, 34, dtype))).backward();
  }
  matmul(randint(-5, 5, {2, 3, 4}), randint(-5, 5, {4, 2}));
  sum(matmul(leaf({64, 256}, 35), leaf({256, 96}, 36))).backward();  // large enough to pick a library
  // Convolutions: oneDNN (float32), im2col (float64), the depthwise loops
  // (float64, and a 5x5 kernel's backward), bfloat16's weight gradient by
  // GEMM, 3-d and transposed.
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    Tensor x = leaf({2, 4, 7, 6}, 37, dtype);
    sum(conv2d(x, leaf({4, 2, 3, 3}, 38, dtype), leaf({4}, 39, dtype), {.stride = {2, 1}, .padding = {1, 2},
                                                                          .groups = 2})).backward();
    sum(conv2d(x, leaf({4, 1, 5, 5}, 40, dtype), Tensor(), {.padding = {2, 2}, .groups = 4})).backward();
    sum(conv_transpose2d(x, leaf({4, 3, 3, 3}, 41, dtype), leaf({3}, 42, dtype), {.stride = {2}})).backward();
  }
  sum(conv3d(leaf({1, 2, 4, 5, 4}, 43), leaf({3, 2, 2, 3, 2}, 44), leaf({3}, 45))).backward();
  // Recurrent layers, padded and packed.
  for (const char* mode : {"lstm", "gru"}) {
    const int64_t gates = rnn_gate_count(mode);
    Tensor input = leaf({4, 3, 5}, 46, DType::Float64), h0 = leaf({3, 2}, 47, DType::Float64);
    Tensor c0 = std::string(mode) == "lstm" ? leaf({3, 2}, 48, DType::Float64) : Tensor();
    Tensor w_ih = leaf({gates * 2, 5}, 49, DType::Float64), w_hh = leaf({gates * 2, 2}, 50, DType::Float64);
    Tensor b_ih = leaf({gates * 2}, 51, DType::Float64), b_hh = leaf({gates * 2}, 52, DType::Float64);
    RnnLayerOutput y = rnn_layer(input, h0, c0, w_ih, w_hh, b_ih, b_hh, mode);
    sum(mul(y.output, y.output)).backward();
    y = rnn_layer(leaf({6, 5}, 53, DType::Float64), h0, c0, w_ih, w_hh, b_ih, b_hh, mode, true, {3, 2, 1});
    sum(add(sum(y.output), sum(y.h_n))).backward();
  }
  // cat, along an outer and an inner dim.
  cat({leaf({2, 3}, 54), leaf({1, 3}, 55)}, 0);
  cat({leaf({2, 3}, 56), leaf({2, 1}, 57)}, 1);
  // Random ops, out of place and in place.
  rand({5, 4});
  randn({3, 3}, {.dtype = DType::Float64});
  randint(0, 7, {4, 5});
  bernoulli(zeros({4, 3}), 0.4);
  bernoulli(random_tensor({4, 3}, 58, 0, 1, DType::Float32));
  randperm(9);
  multinomial(random_tensor({3, 6}, 59, 0.1, 1, DType::Float32), 4, false);
  multinomial(random_tensor({3, 6}, 60, 0.1, 1, DType::Float32), 5, true);
  standard_gamma(random_tensor({3, 4}, 61, 0.5, 3, DType::Float32));
  // Linear algebra on LAPACK, batched, float32 and float64.
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor a = random_tensor({3, 4, 4}, 62, -1, 1, dtype);
    const Tensor spd = add(matmul(a, transpose(a, -2, -1)), mul(eye(4, std::nullopt, {.dtype = dtype}), Scalar(4)));
    linalg::det(a);
    linalg::slogdet(a);
    linalg::inv(spd);
    linalg::solve(spd, random_tensor({3, 4, 2}, 63, -1, 1, dtype));
    linalg::cholesky(spd);
    linalg::qr(random_tensor({2, 5, 3}, 64, -1, 1, dtype));
    linalg::svd(random_tensor({2, 4, 3}, 65, -1, 1, dtype), false);
    linalg::svdvals(a);
    linalg::eigh(spd);
    linalg::eigvalsh(spd, "U");
  }
  Tensor written = zeros({4, 6});
  uniform_(written, -1, 1);
  normal_(written);
  return std::move(recorder.calls);
}

TEST(KernelScratch, CpuKernelsAllocateNothing) {
  const std::vector<dispatch::RecordedCall> calls = record_calls();
  const Device cpu;
  std::set<std::string> covered, covered_strided;
  for (const dispatch::RecordedCall& call : calls) {
    const OpDef& op = *call.op;
    if (!leaf_ops().count(op.name)) continue;
    SCOPED_TRACE(op.name + " on " + (call.inputs.empty() || !call.inputs[0].defined()
                                         ? std::string("no input")
                                         : std::string(dtype_name(call.inputs[0].dtype())) + " " +
                                               shape_str(call.inputs[0].sizes())));
    const KernelFn& kernel = op.kernels[size_t(DeviceType::CPU)];
    const ScratchFn& scratch = op.scratch[size_t(DeviceType::CPU)];
    ASSERT_TRUE(kernel);
    // cat needs no working memory, so it has no ScratchFn.
    ASSERT_TRUE(scratch || op.name == "cat") << op.name << " has no CPU ScratchFn";
    TensorList results[2];
    for (bool strided : {false, true}) {
      SCOPED_TRACE(strided ? "non-contiguous inputs" : "recorded inputs");
      const TensorList inputs = copies(call.inputs, strided);
      const std::vector<TensorMeta> metas = dispatch::infer(op, inputs, call.attrs);
      // An in-place call writes its first input, which may be strided.
      TensorList out;
      if (call.inplace) out.push_back(inputs[0]);
      else
        for (const TensorMeta& m : metas) out.push_back(make_empty(m.sizes, m.dtype, m.device));
      const int64_t bytes = scratch ? scratch(inputs, metas, call.attrs) : 0;
      if (scratch) out.push_back(make_empty({bytes}, DType::UInt8, cpu));
      const int64_t before = memory_stats(cpu).num_allocations;
      kernel(inputs, out, call.attrs);
      EXPECT_EQ(memory_stats(cpu).num_allocations, before) << op.name << " allocated on the CPU";
      if (scratch) out.pop_back();
      // The dispatcher's call, on inputs of the same values (the kernel may
      // have written some, as batch_norm's running statistics).
      TensorList want;
      if (call.inplace) {
        const TensorList written = copies(call.inputs, strided);
        dispatch::apply_inplace(op, written, call.attrs);
        want = {written[0]};
      } else {
        want = dispatch::apply(op, copies(call.inputs, strided), call.attrs);
      }
      ASSERT_EQ(want.size(), out.size());
      for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(same_bits(out[i], want[i])) << "output " << i;
      results[strided] = out;
      bool any_strided = false;
      for (const Tensor& t : inputs) any_strided = any_strided || (t.defined() && !t.is_contiguous());
      if (strided && any_strided && bytes > 0) covered_strided.insert(op.name);
    }
    for (size_t i = 0; i < results[0].size(); ++i)
      EXPECT_TRUE(same_bits(results[0][i], results[1][i])) << "output " << i << " depends on the inputs' layout";
    covered.insert(op.name);
  }
  for (const std::string& name : leaf_ops()) EXPECT_TRUE(covered.count(name)) << name << " was not replayed";
  // Most replays copied some input into the scratch (the rest read their
  // strided inputs in place, or take scratch only for other layouts).
  EXPECT_GE(covered.size(), leaf_ops().size());
  EXPECT_GE(covered_strided.size(), size_t(65));
}

}  // namespace
}  // namespace mf
