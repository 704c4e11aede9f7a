// NCCL, opened on first use (Note [Lazily loaded CUDA libraries] in
// libraries.h).
#include "backend/cuda/nccl_api.h"

#include <optional>

#include "backend/cuda/libraries.h"
#include "meshflow/error.h"

namespace mf::cuda {

const NcclApi* nccl() {
  static const std::optional<NcclApi> api = []() -> std::optional<NcclApi> {
    void* lib = nullptr;
    try {
      lib = library::open({"libnccl.so.2", "libnccl.so"}, "NCCL");
    } catch (const Error&) {
      return std::nullopt;  // the collectives stay host-staged (Note [NCCL collectives])
    }
    NcclApi a{};
    auto bind = [lib](const char* name, auto& fn) { library::bind(lib, "NCCL", name, fn); };
    bind("ncclGetUniqueId", a.get_unique_id);
    bind("ncclCommInitRank", a.comm_init_rank);
    bind("ncclCommAbort", a.comm_abort);
    bind("ncclCommGetAsyncError", a.comm_async_error);
    bind("ncclGetErrorString", a.error_string);
    bind("ncclAllReduce", a.all_reduce);
    bind("ncclBroadcast", a.broadcast);
    bind("ncclReduce", a.reduce);
    bind("ncclAllGather", a.all_gather);
    bind("ncclReduceScatter", a.reduce_scatter);
    bind("ncclSend", a.send);
    bind("ncclRecv", a.recv);
    bind("ncclGroupStart", a.group_start);
    bind("ncclGroupEnd", a.group_end);
    return a;
  }();
  return api ? &*api : nullptr;
}

void check_nccl(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) [[likely]]
    return;
  throw DistributedError(detail::concat("cuda: ", what, " failed (NCCL: ", nccl()->error_string(result), ")"));
}

}  // namespace mf::cuda
