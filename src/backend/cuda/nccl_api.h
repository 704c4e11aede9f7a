// NCCL, opened on first use (Note [Lazily loaded CUDA libraries] in
// libraries.h).
#pragma once

#include <nccl.h>

namespace mf::cuda {

struct NcclApi {
  decltype(&::ncclGetUniqueId) get_unique_id;
  decltype(&::ncclCommInitRank) comm_init_rank;
  decltype(&::ncclCommAbort) comm_abort;
  decltype(&::ncclCommGetAsyncError) comm_async_error;
  decltype(&::ncclGetErrorString) error_string;
  decltype(&::ncclAllReduce) all_reduce;
  decltype(&::ncclBroadcast) broadcast;
  decltype(&::ncclReduce) reduce;
  decltype(&::ncclAllGather) all_gather;
  decltype(&::ncclReduceScatter) reduce_scatter;
  decltype(&::ncclSend) send;
  decltype(&::ncclRecv) recv;
  decltype(&::ncclGroupStart) group_start;
  decltype(&::ncclGroupEnd) group_end;
};

// The library's entry points, or nullptr where it cannot be opened.
const NcclApi* nccl();
// Throws DistributedError naming `what` and NCCL's reason.
void check_nccl(ncclResult_t result, const char* what);

}  // namespace mf::cuda
