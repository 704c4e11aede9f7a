// The NCCL communicator (Note [NCCL collectives]).
#include "backend/cuda/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "backend/cuda/cuda_runtime.h"
#include "backend/cuda/nccl_api.h"
#include "distributed/checked_communicator.h"
#include "meshflow/dispatch.h"

namespace mf::cuda {

std::optional<ncclDataType_t> nccl_type(DType dtype) {
  switch (dtype) {
    case DType::Int8: return ncclInt8;
    case DType::UInt8: return ncclUint8;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    default: return std::nullopt;
  }
}

namespace {

using distributed::ReduceOp;
using distributed::Work;

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Prod: return ncclProd;
  }
  return ncclSum;
}

ncclDataType_t type_of(const Tensor& t, const char* op) {
  const auto type = nccl_type(t.dtype());
  MF_CHECK(type.has_value(), TypeError, op, ": NCCL has no type for ", dtype_name(t.dtype()));
  return *type;
}

const NcclApi& api() { return *nccl(); }

// The bytes of rows [first, first + rows) of a contiguous t.
char* rows_at(const Tensor& t, int64_t first) {
  return static_cast<char*>(t.data_ptr()) + first * distributed::row_numel(t) * int64_t(t.element_size());
}
size_t row_count(const Tensor& t, int64_t rows) { return size_t(rows * distributed::row_numel(t)); }

// ncclGroupStart ... ncclGroupEnd for the scope.
class Grouped {
 public:
  Grouped() { check_nccl(api().group_start(), "ncclGroupStart"); }
  ~Grouped() noexcept(false) {
    if (std::uncaught_exceptions() == 0) check_nccl(api().group_end(), "ncclGroupEnd");
    else (void)api().group_end();
  }
  Grouped(const Grouped&) = delete;
  Grouped& operator=(const Grouped&) = delete;
};

// A send or receive queued on a stream: done when its event is.
class StreamWork final : public Work {
 public:
  StreamWork(int device, cudaStream_t stream, Tensor keep) : keep_(std::move(keep)) {
    DeviceGuard guard(device);
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(event_, stream), "cudaEventRecord");
  }
  ~StreamWork() override {
    (void)cudaEventSynchronize(event_);  // the tensor stays alive until the transfer is done
    (void)cudaEventDestroy(event_);
  }
  void wait() override { check_cuda(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  bool is_completed() override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check_cuda(status, "cudaEventQuery");
    return true;
  }

 private:
  cudaEvent_t event_{};
  Tensor keep_;
};

class NcclCommunicator final : public distributed::CheckedCommunicator {
 public:
  NcclCommunicator(std::vector<int> world_ranks, int rank, int device, ncclComm_t comm)
      : world_ranks_(std::move(world_ranks)), rank_(rank), device_(device), comm_(comm) {}
  // The NCCL communicator itself is left to the process's exit (groups are
  // cached for its life, and NCCL may not be torn down after CUDA is).
  ~NcclCommunicator() override { stop_queue(); }

  int rank() const override { return rank_; }
  int size() const override { return int(world_ranks_.size()); }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  std::string backend() const override { return "nccl"; }

 protected:
  DeviceType tensor_device_type() const override { return DeviceType::CUDA; }
  int max_tag() const override { return 0; }

  void run_all_reduce(Tensor& t, ReduceOp op) override {
    Call call(*this, t, "all_reduce");
    check_nccl(api().all_reduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), type_of(t, "all_reduce"), nccl_op(op),
                                comm_, call.stream),
               "ncclAllReduce");
  }
  void run_broadcast(Tensor& t, int root) override {
    Call call(*this, t, "broadcast");
    check_nccl(api().broadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), type_of(t, "broadcast"), root, comm_,
                               call.stream),
               "ncclBroadcast");
  }
  void run_all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override {
    Call call(*this, out, "all_gather");
    const ncclDataType_t type = type_of(in, "all_gather");
    if (even(counts)) {
      check_nccl(api().all_gather(in.data_ptr(), out.data_ptr(), row_count(in, counts[0]), type, comm_, call.stream),
                 "ncclAllGather");
      return;
    }
    const std::vector<int64_t> offsets = distributed::row_offsets(counts);
    Grouped group;
    for (int r = 0; r < size(); ++r) {
      if (counts[size_t(r)] == 0) continue;
      char* dst = rows_at(out, offsets[size_t(r)]);
      check_nccl(api().broadcast(r == rank_ ? in.data_ptr() : dst, dst, row_count(out, counts[size_t(r)]), type, r,
                                 comm_, call.stream),
                 "ncclBroadcast");
    }
  }
  void run_reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts, ReduceOp op) override {
    Call call(*this, out, "reduce_scatter");
    const ncclDataType_t type = type_of(in, "reduce_scatter");
    if (even(counts)) {
      check_nccl(api().reduce_scatter(in.data_ptr(), out.data_ptr(), row_count(out, counts[0]), type, nccl_op(op),
                                      comm_, call.stream),
                 "ncclReduceScatter");
      return;
    }
    const std::vector<int64_t> offsets = distributed::row_offsets(counts);
    Grouped group;
    for (int r = 0; r < size(); ++r) {
      if (counts[size_t(r)] == 0) continue;
      // recvbuff is read on the root only.
      check_nccl(api().reduce(rows_at(in, offsets[size_t(r)]), out.data_ptr(), row_count(in, counts[size_t(r)]), type,
                              nccl_op(op), r, comm_, call.stream),
                 "ncclReduce");
    }
  }
  void run_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                      const std::vector<int64_t>& recv_counts) override {
    Call call(*this, out, "all_to_all");
    const ncclDataType_t type = type_of(in, "all_to_all");
    const std::vector<int64_t> send_at = distributed::row_offsets(send_counts);
    const std::vector<int64_t> recv_at = distributed::row_offsets(recv_counts);
    const size_t own = size_t(rank_);
    if (send_counts[own] > 0)
      check_cuda(cudaMemcpyAsync(rows_at(out, recv_at[own]), rows_at(in, send_at[own]),
                                 row_count(in, send_counts[own]) * in.element_size(), cudaMemcpyDeviceToDevice,
                                 call.stream),
                 "cudaMemcpyAsync");
    Grouped group;
    for (int r = 0; r < size(); ++r) {
      if (r == rank_) continue;
      if (send_counts[size_t(r)] > 0)
        check_nccl(api().send(rows_at(in, send_at[size_t(r)]), row_count(in, send_counts[size_t(r)]), type, r, comm_,
                              call.stream),
                   "ncclSend");
      if (recv_counts[size_t(r)] > 0)
        check_nccl(api().recv(rows_at(out, recv_at[size_t(r)]), row_count(out, recv_counts[size_t(r)]), type, r,
                              comm_, call.stream),
                   "ncclRecv");
    }
  }
  void run_send(const Tensor& t, int dst, int) override {
    Call call(*this, t, "send");
    check_nccl(api().send(t.data_ptr(), size_t(t.numel()), type_of(t, "send"), dst, comm_, call.stream), "ncclSend");
  }
  void run_recv(Tensor& t, int src, int) override {
    Call call(*this, t, "recv");
    check_nccl(api().recv(t.data_ptr(), size_t(t.numel()), type_of(t, "recv"), src, comm_, call.stream), "ncclRecv");
  }
  std::shared_ptr<Work> run_isend(const Tensor& t, int dst, int tag) override {
    run_send(t, dst, tag);
    return std::make_shared<StreamWork>(device_, current_stream(device_), t);
  }
  std::shared_ptr<Work> run_irecv(Tensor& t, int src, int tag) override {
    run_recv(t, src, tag);
    return std::make_shared<StreamWork>(device_, current_stream(device_), t);
  }
  // Every member has reached it when a one-element all_reduce completes.
  void run_barrier() override {
    Tensor token = make_empty({1}, DType::Float32, Device(DeviceType::CUDA, device_));
    cudaStream_t stream = nullptr;
    {
      Call call(*this, token, "barrier");
      check_cuda(cudaMemsetAsync(token.data_ptr(), 0, sizeof(float), call.stream), "cudaMemsetAsync");
      check_nccl(api().all_reduce(token.data_ptr(), token.data_ptr(), 1, ncclFloat32, ncclSum, comm_, call.stream),
                 "ncclAllReduce");
      stream = call.stream;
    }  // watched from here: a barrier a rank never reaches is aborted, which ends this wait
    DeviceGuard guard(device_);
    const cudaError_t status = cudaStreamSynchronize(stream);
    if (status != cudaSuccess) check_alive("barrier");
    check_cuda(status, "cudaStreamSynchronize");
    check_alive("barrier");
  }
  std::shared_ptr<distributed::Communicator> create_subgroup(const std::vector<int>& ranks) override {
    std::vector<int> members;
    for (int r : ranks) members.push_back(world_ranks_[size_t(r)]);
    return nccl_group(members, device_);
  }

 private:
  // One call's device and stream: the communicator's GPU, current for the
  // call, and the calling thread's current stream there.
  // A call is watched once queued (Note [NCCL timeouts]).
  struct Call {
    NcclCommunicator& comm;
    const char* name;
    DeviceGuard guard;
    cudaStream_t stream;
    Call(NcclCommunicator& c, const Tensor& t, const char* what)
        : comm(c), name(what), guard(c.device_), stream(current_stream(c.device_)) {
      c.check_alive(what);
      MF_CHECK(t.device().index() == c.device_, ValueError, "nccl: the group's GPU is cuda:", c.device_,
               ", the tensor is on ", t.device().str());
    }
    ~Call() {
      if (std::uncaught_exceptions() == 0) comm.watch(stream, name);
    }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
  };

  // Note [NCCL timeouts]: a collective that a peer never joins would wait
  // on the GPU for ever, and with it every later kernel and any host wait
  // for the stream. Each call records an event after its work; a watchdog
  // thread (one per communicator, started by its first call) checks them in
  // order, and when one has not completed comm_timeout() seconds after it
  // was queued it aborts the NCCL communicator (ncclCommAbort ends its
  // kernels) and every later call on it raises DistributedError naming the
  // collective that timed out, the ranks and the timeout. As with PyTorch's
  // NCCL watchdog, the time counts from when the call was queued, so work
  // queued before it on the stream counts too. Communicators live for the
  // process (nccl_group caches them), so the thread never outlives its own.
  void check_alive(const char* what) {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    MF_CHECK(aborted_.empty(), DistributedError, aborted_, "; ", what, " is refused");
  }

  void watch(cudaStream_t stream, const char* what) noexcept {
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(event, stream) != cudaSuccess) {
      (void)cudaGetLastError();
      if (event) (void)cudaEventDestroy(event);
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(distributed::comm_timeout()));
    std::lock_guard<std::mutex> lock(watch_mutex_);
    watched_.push_back({event, what, deadline});
    if (!watchdog_started_) {
      watchdog_started_ = true;
      std::thread([this] { watchdog(); }).detach();
    }
  }

  void watchdog() {
    (void)cudaSetDevice(device_);
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard<std::mutex> lock(watch_mutex_);
      while (!watched_.empty()) {
        Watched& w = watched_.front();
        const cudaError_t status = cudaEventQuery(w.event);
        if (status == cudaSuccess) {
          (void)cudaEventDestroy(w.event);
          watched_.pop_front();
          continue;
        }
        (void)cudaGetLastError();
        if (status == cudaErrorNotReady && std::chrono::steady_clock::now() < w.deadline) break;
        aborted_ = detail::concat("nccl: ", w.name, " on world ranks ", distributed::format_ranks(world_ranks_),
                                  status == cudaErrorNotReady
                                      ? detail::concat(" did not complete within ", distributed::comm_timeout(),
                                                       " s (a rank did not join it, or joined another call)")
                                      : std::string(" failed on the device"),
                                  "; the communicator was aborted");
        (void)api().comm_abort(comm_);
        for (Watched& left : watched_) (void)cudaEventDestroy(left.event);
        watched_.clear();
        return;
      }
    }
  }

  struct Watched {
    cudaEvent_t event;
    const char* name;
    std::chrono::steady_clock::time_point deadline;
  };
  std::mutex watch_mutex_;
  std::deque<Watched> watched_;
  std::string aborted_;
  bool watchdog_started_ = false;
  static bool even(const std::vector<int64_t>& counts) {
    for (int64_t c : counts)
      if (c != counts[0]) return false;
    return true;
  }

  std::vector<int> world_ranks_;
  int rank_;
  int device_;
  ncclComm_t comm_;
};

}  // namespace

std::shared_ptr<distributed::Communicator> nccl_group(const std::vector<int>& world_ranks, int device) {
  MF_CHECK(nccl() != nullptr, Error, "nccl: the NCCL library (libnccl.so.2) cannot be opened");
  static std::mutex mutex;
  // Never destroyed (see ~NcclCommunicator).
  static auto& groups = *new std::map<std::pair<std::vector<int>, int>, std::shared_ptr<NcclCommunicator>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(world_ranks, device);
  if (auto it = groups.find(key); it != groups.end()) return it->second;
  // The members agree on an id through the host group of the same ranks.
  std::shared_ptr<distributed::Communicator> host = distributed::world().subgroup(world_ranks);
  Tensor id = make_empty({int64_t(sizeof(ncclUniqueId))}, DType::UInt8);
  std::memset(id.data_ptr(), 0, sizeof(ncclUniqueId));
  if (host->rank() == 0) check_nccl(api().get_unique_id(static_cast<ncclUniqueId*>(id.data_ptr())), "ncclGetUniqueId");
  host->broadcast(id, 0);
  ncclUniqueId unique_id;
  std::memcpy(&unique_id, id.data_ptr(), sizeof(unique_id));
  ncclComm_t comm = nullptr;
  {
    DeviceGuard guard(device);
    check_nccl(api().comm_init_rank(&comm, host->size(), unique_id, host->rank()), "ncclCommInitRank");
  }
  auto group = std::make_shared<NcclCommunicator>(world_ranks, host->rank(), device, comm);
  groups.emplace(std::move(key), group);
  return group;
}

namespace {
// Note [Device groups]: CUDA tensors' groups are NCCL's where it opens.
[[maybe_unused]] const bool kRegistered = [] {
  distributed::register_device_groups(DeviceType::CUDA, [](const std::vector<int>& ranks, int device) {
    return nccl() != nullptr ? nccl_group(ranks, device) : nullptr;
  });
  return true;
}();
}  // namespace

}  // namespace mf::cuda
