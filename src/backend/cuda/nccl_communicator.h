// Note [NCCL collectives]
// On CUDA tensors the collective ops (comm_all_reduce, all_reduce_sum,
// comm_all_gather, comm_reduce_scatter, comm_all_to_all) run on NCCL,
// behind the Communicator interface (NcclCommunicator, backend() "nccl"):
// - One NCCL communicator per group of world ranks and device: a
//   placement's ranks, the group of each comm op. It is made on first use:
//   the group's members agree on an ncclUniqueId through the MPI world
//   (the subgroup of those members broadcasts its rank 0's id; only they
//   take part), then each joins with its group rank on the tensors' GPU.
//   A process alone (no mpirun) is a group of one, as on the host.
// - Calls are queued on the calling thread's current stream of that GPU:
//   the host returns at once and later work on the stream sees the
//   result, as after any kernel. Every rank issues a group's calls in the
//   same order (program order; graph mode orders its communication nodes).
// - Even all_gather / reduce_scatter counts use NCCL's collectives; uneven
//   ones a group of broadcasts / reduces (one per rank), all_to_all a group
//   of sends and receives (rows to itself: a device copy).
// - send/recv take tag 0 only (NCCL has no tags; messages between two ranks
//   arrive in order); the pipeline's comm_send/comm_recv ops stay
//   host-staged over MPI, whose tags they use.
// - Tensors NCCL has no type for (bool, int16) and machines whose
//   CUDA build finds no libnccl run the collectives host-staged (Note
//   [Host-staged kernels]).
// - A call that a peer never joins is ended after comm_timeout() seconds
//   by a watchdog that aborts the communicator; later calls on it raise
//   DistributedError (Note [NCCL timeouts] in nccl_communicator.cpp).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include <nccl.h>

#include "meshflow/distributed/communicator.h"

namespace mf::cuda {

// NCCL's type for dtype, if it has one.
std::optional<ncclDataType_t> nccl_type(DType dtype);

// The NCCL communicator of `world_ranks` (ascending, this rank among them)
// on CUDA device `device`, made on first use (a collective over those
// ranks). Requires nccl() != nullptr.
std::shared_ptr<distributed::Communicator> nccl_group(const std::vector<int>& world_ranks, int device);

}  // namespace mf::cuda
