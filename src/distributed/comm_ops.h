// The collectives of boxing as ops.
//
// Note [Communication ops]
// Boxing (boxing.cpp) moves data between ranks only through the ops below
// (OpDef::collective). Eagerly, dispatch runs their CPU kernels, which call
// the communicator of the op's group at once; while a graph is traced, the
// lazy layer records them as nodes like any other op, so a traced global
// op becomes its boxing's communication nodes, the local copies, slices and
// zero fills around them (ordinary ops), and the local op. One boxing
// code path serves both modes. A group is named by its world ranks in
// ascending order (the communicator's rank order), the attr "group"; the
// kernel looks its communicator up (world().subgroup, created on first use
// by all members, in program order). Inputs and outputs are local tensors;
// outputs are fresh tensors (all_reduce copies its input into its output
// and reduces there), so a node never writes memory another node owns,
// which lets the graph executor run it on its communication thread
// (Note [Overlapping communication] in meshflow/graph/executor.h).
#pragma once

#include <vector>

#include "meshflow/tensor.h"

namespace mf::distributed {

// The sum over the group of every rank's t.
Tensor comm_all_reduce(const Tensor& t, const std::vector<int>& group);
// The same sum, differentiable: the gradient of each rank's t is the sum
// of every rank's output gradient (the derivative of the ranks' summed
// losses). For statistics shared by local tensors (SyncBatchNorm).
Tensor all_reduce_sum(const Tensor& t, const std::vector<int>& group);
// The rows (dim 0) of every rank's in, concatenated in group order; counts:
// the rows of each rank.
Tensor comm_all_gather(const Tensor& in, const std::vector<int>& group, const std::vector<int64_t>& counts);
// This rank's counts[r] rows of the sum over the group of every rank's in.
Tensor comm_reduce_scatter(const Tensor& in, const std::vector<int>& group, const std::vector<int64_t>& counts);
// Rows send_counts[r] of in go to group rank r; recv_counts[r] rows come
// from it (Communicator::all_to_all).
Tensor comm_all_to_all(const Tensor& in, const std::vector<int>& group, const std::vector<int64_t>& send_counts,
                       const std::vector<int64_t>& recv_counts);
// Point to point between world ranks (a placement change).
void comm_send(const Tensor& t, int dst, int tag);

// The matching receive of comm_send; device: where the received tensor lives.
Tensor comm_recv(const Shape& shape, DType dtype, int src, int tag, Device device = Device());

}  // namespace mf::distributed
