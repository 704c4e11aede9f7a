// The CUDA kernels of the collective ops on NCCL (Note [NCCL collectives]),
// and host-staged where NCCL cannot carry the call.
#include "backend/common/host_staged.h"
#include "backend/common/scratch.h"
#include "backend/cuda/nccl_api.h"
#include "backend/cuda/nccl_communicator.h"
#include "meshflow/op_def.h"

namespace mf::cuda {

void copy_cast(Tensor& dst, const Tensor& src);  // elementwise.cu

namespace {

std::vector<int> group_of(const Attrs& attrs) {
  const Shape& g = attrs.get_shape("group");
  return std::vector<int>(g.begin(), g.end());
}

bool on_nccl(const Tensor& input) { return nccl() != nullptr && nccl_type(input.dtype()).has_value(); }

// Which collective a kernel runs.
enum class Kind { AllReduce, AllGather, ReduceScatter, AllToAll };

// The communicator reads contiguous memory: a copy in the scratch when the
// input is not (all_reduce works in place on its contiguous output).
int64_t scratch_bytes(Kind kind, const TensorList& in) {
  if (kind == Kind::AllReduce || !on_nccl(in[0])) return 0;
  ScratchLayout layout("collective");
  return add_dense(layout, in[0]).bytes();
}

void run(Kind kind, const TensorList& in, TensorList& out, const Attrs& attrs) {
  Scratch taken(out);
  Tensor& y = out[0];
  std::shared_ptr<distributed::Communicator> comm = nccl_group(group_of(attrs), in[0].device().index());
  if (kind == Kind::AllReduce) {
    copy_cast(y, in[0]);
    comm->all_reduce(y);
    return;
  }
  Tensor x = in[0];
  if (!x.is_contiguous()) {
    x = taken.take(in[0].sizes(), in[0].dtype());
    copy_cast(x, in[0]);
  }
  switch (kind) {
    case Kind::AllGather: comm->all_gather(x, y, attrs.get_shape("counts")); break;
    case Kind::ReduceScatter: comm->reduce_scatter(x, y, attrs.get_shape("counts")); break;
    case Kind::AllToAll: comm->all_to_all(x, attrs.get_shape("send_counts"), y, attrs.get_shape("recv_counts")); break;
    case Kind::AllReduce: break;
  }
}

}  // namespace

// Sets the NCCL kernels over the host-staged ones (host_staged.cpp calls it
// after host_staged::register_all): each falls back to the host-staged
// kernel where NCCL cannot carry the input.
void register_nccl_collectives() {
  auto& registry = OpRegistry::instance();
  for (auto [name, kind] : {std::pair{"comm_all_reduce", Kind::AllReduce}, std::pair{"all_reduce_sum", Kind::AllReduce},
                            std::pair{"comm_all_gather", Kind::AllGather},
                            std::pair{"comm_reduce_scatter", Kind::ReduceScatter},
                            std::pair{"comm_all_to_all", Kind::AllToAll}}) {
    KernelFn staged = host_staged::kernel(name);
    registry.set_kernel(
        name, DeviceType::CUDA,
        [staged, kind](const TensorList& in, TensorList& out, const Attrs& attrs) {
          if (on_nccl(in[0])) return run(kind, in, out, attrs);
          TensorList outputs(out.begin(), out.end() - 1);  // without the (empty) scratch
          staged(in, outputs, attrs);
        },
        [kind](const TensorList& in, const std::vector<TensorMeta>&, const Attrs&) { return scratch_bytes(kind, in); });
  }
}

}  // namespace mf::cuda
