// The communication ops of boxing; Note [Communication ops] in comm_ops.h.
// Their CPU kernels: backend/cpu/kernels/comm.cpp.
#include "distributed/comm_ops.h"

#include <algorithm>
#include <numeric>

#include "meshflow/dispatch.h"
#include "meshflow/distributed/boxing.h"
#include "meshflow/distributed/communicator.h"

namespace mf::distributed {
namespace {

Shape as_shape(const std::vector<int>& v) { return Shape(v.begin(), v.end()); }

// This rank's position in the op's group.
size_t group_index(const char* op, const Attrs& attrs) {
  const Shape& g = attrs.get_shape("group");
  auto it = std::find(g.begin(), g.end(), int64_t(get_rank()));
  MF_CHECK(it != g.end(), ValueError, op, ": rank ", get_rank(), " is not in the group ", shape_str(g));
  return size_t(it - g.begin());
}

// The shape of `in` with `rows` rows.
std::vector<TensorMeta> with_rows(const char* op, const Tensor& in, int64_t rows) {
  MF_CHECK(in.dim() >= 1, ShapeError, op, ": the input needs a dim 0 (rows), got a 0-d tensor");
  Shape shape = in.sizes();
  shape[0] = rows;
  return {{shape, in.dtype(), in.device()}};
}

int64_t sum(const Shape& counts) { return std::accumulate(counts.begin(), counts.end(), int64_t(0)); }

MF_REGISTER_OP(OpDef{
    .name = "comm_all_reduce",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .differentiable = false,
    .collective = true,
});

MF_REGISTER_OP(OpDef{
    .name = "all_reduce_sum",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs&) {
      return std::vector<TensorMeta>{{in[0].sizes(), in[0].dtype(), in[0].device()}};
    },
    .backward = [](const BackwardContext& ctx) {
      static const OpDef& op = dispatch::op("all_reduce_sum");
      return TensorList{dispatch::apply_one(op, {ctx.grad_outputs[0]}, ctx.attrs)};
    },
    .collective = true,
});

MF_REGISTER_OP(OpDef{
    .name = "comm_all_gather",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return with_rows("comm_all_gather", in[0], sum(attrs.get_shape("counts")));
    },
    .differentiable = false,
    .collective = true,
});

MF_REGISTER_OP(OpDef{
    .name = "comm_reduce_scatter",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      const Shape& counts = attrs.get_shape("counts");
      return with_rows("comm_reduce_scatter", in[0], counts.at(group_index("comm_reduce_scatter", attrs)));
    },
    .differentiable = false,
    .collective = true,
});

MF_REGISTER_OP(OpDef{
    .name = "comm_all_to_all",
    .inputs = {"input"},
    .infer = [](const TensorList& in, const Attrs& attrs) {
      return with_rows("comm_all_to_all", in[0], sum(attrs.get_shape("recv_counts")));
    },
    .differentiable = false,
    .collective = true,
});

MF_REGISTER_OP(OpDef{
    .name = "comm_send",
    .inputs = {"input"},
    .infer = [](const TensorList&, const Attrs&) { return std::vector<TensorMeta>{}; },
    .differentiable = false,
    .collective = true,
});

MF_REGISTER_OP(OpDef{
    .name = "comm_recv",
    .inputs = {},
    .infer = [](const TensorList&, const Attrs& attrs) {
      // "device" (optional): where the received tensor lives, the host by default.
      return std::vector<TensorMeta>{{attrs.get_shape("shape"), attrs.get_dtype("dtype"),
                                      attrs.has("device") ? attrs.get_device("device") : Device()}};
    },
    .differentiable = false,
    .collective = true,
});

}  // namespace

Tensor comm_all_reduce(const Tensor& t, const std::vector<int>& group) {
  static const OpDef& all_reduce = dispatch::op("comm_all_reduce");
  return dispatch::apply_one(all_reduce, {t}, {{"group", as_shape(group)}});
}

Tensor all_reduce_sum(const Tensor& t, const std::vector<int>& group) {
  static const OpDef& op = dispatch::op("all_reduce_sum");
  return dispatch::apply_one(op, {t}, {{"group", as_shape(group)}});
}

Tensor comm_all_gather(const Tensor& in, const std::vector<int>& group, const std::vector<int64_t>& counts) {
  static const OpDef& all_gather = dispatch::op("comm_all_gather");
  return dispatch::apply_one(all_gather, {in}, {{"group", as_shape(group)}, {"counts", Shape(counts)}});
}

Tensor comm_reduce_scatter(const Tensor& in, const std::vector<int>& group, const std::vector<int64_t>& counts) {
  static const OpDef& reduce_scatter = dispatch::op("comm_reduce_scatter");
  return dispatch::apply_one(reduce_scatter, {in}, {{"group", as_shape(group)}, {"counts", Shape(counts)}});
}

Tensor comm_all_to_all(const Tensor& in, const std::vector<int>& group, const std::vector<int64_t>& send_counts,
                       const std::vector<int64_t>& recv_counts) {
  static const OpDef& all_to_all = dispatch::op("comm_all_to_all");
  return dispatch::apply_one(all_to_all, {in}, {{"group", as_shape(group)}, {"send_counts", Shape(send_counts)},
                                                {"recv_counts", Shape(recv_counts)}});
}

void comm_send(const Tensor& t, int dst, int tag) {
  static const OpDef& send = dispatch::op("comm_send");
  dispatch::apply(send, {t}, {{"dst", dst}, {"tag", tag}});
}

Tensor comm_recv(const Shape& shape, DType dtype, int src, int tag, Device device) {
  static const OpDef& recv = dispatch::op("comm_recv");
  Attrs attrs{{"shape", shape}, {"dtype", dtype}, {"src", src}, {"tag", tag}};
  if (!device.is_cpu()) attrs.set("device", device);
  return dispatch::apply_one(recv, {}, attrs);
}

}  // namespace mf::distributed
