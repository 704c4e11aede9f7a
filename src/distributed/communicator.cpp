// The argument checks shared by every backend, the single-process
// communicator, and the choice of the world group.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>
#include <sstream>

#include "distributed/checked_communicator.h"
#include "distributed/job_thread.h"

namespace mf::distributed {

std::vector<int64_t> row_offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  return offsets;
}

int64_t row_numel(const Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Prod: return "prod";
  }
  return "?";
}

namespace {

// "[0, 1, 2]"
template <typename T>
std::string format_list(const std::vector<T>& values) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
  os << "]";
  return os.str();
}

}  // namespace

std::string format_ranks(const std::vector<int>& ranks) { return format_list(ranks); }

namespace {

std::string format_counts(const std::vector<int64_t>& counts) { return format_list(counts); }

void check_tensor(const char* op, const char* arg, const Tensor& t, DeviceType type) {
  MF_CHECK(t.defined(), ValueError, op, ": ", arg, " is an undefined tensor");
  MF_CHECK(t.device().type() == type, ValueError, op, ": ", arg, " must be a ", device_type_name(type),
           " tensor for this group, got device ", t.device().str());
  MF_CHECK(t.is_contiguous(), ValueError, op, ": ", arg,
           " must be contiguous (call .contiguous() first), got a tensor of shape ", shape_str(t.sizes()));
}

void check_same_dtype(const char* op, const Tensor& in, const Tensor& out) {
  MF_CHECK(in.dtype() == out.dtype(), TypeError, op, ": input and output must have the same dtype, got ",
           dtype_name(in.dtype()), " and ", dtype_name(out.dtype()));
}

// counts: one per rank, none negative; returns their sum.
int64_t check_counts(const char* op, const char* arg, const std::vector<int64_t>& counts, int size) {
  MF_CHECK(int64_t(counts.size()) == size, ValueError, op, ": ", arg, " must have one entry per rank (", size,
           "), got ", counts.size(), " entries ", format_counts(counts));
  for (int64_t c : counts)
    MF_CHECK(c >= 0, ValueError, op, ": ", arg, " must not be negative, got ", format_counts(counts));
  return std::accumulate(counts.begin(), counts.end(), int64_t(0));
}

void check_rows(const char* op, const char* arg, const Tensor& t, int64_t rows, const char* why) {
  MF_CHECK(t.dim() >= 1, ShapeError, op, ": ", arg, " must have at least one dimension (rows along dim 0), got a 0-d tensor");
  MF_CHECK(t.size(0) == rows, ShapeError, op, ": ", arg, ".shape[0] must be ", why, " (", rows, "), got shape ",
           shape_str(t.sizes()));
}

void check_row_shapes(const char* op, const Tensor& in, const Tensor& out) {
  bool same = in.dim() == out.dim();
  for (int64_t d = 1; same && d < in.dim(); ++d) same = in.size(d) == out.size(d);
  MF_CHECK(same, ShapeError, op, ": input and output must agree beyond dim 0, got shapes ",
           shape_str(in.sizes()), " and ", shape_str(out.sizes()));
}

void check_peer(const char* op, const char* arg, int peer, const Communicator& comm) {
  MF_CHECK(peer >= 0 && peer < comm.size(), ValueError, op, ": ", arg, " must be a rank of the group (0 to ",
           comm.size() - 1, "), got ", peer);
}

}  // namespace

void CheckedCommunicator::check_all_reduce(const Tensor& t) {
  check_tensor("all_reduce", "tensor", t, tensor_device_type());
}

void CheckedCommunicator::check_broadcast(const Tensor& t, int root) {
  check_tensor("broadcast", "tensor", t, tensor_device_type());
  check_peer("broadcast", "root", root, *this);
}

void CheckedCommunicator::check_all_gather(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts) {
  check_tensor("all_gather", "input", in, tensor_device_type());
  check_tensor("all_gather", "output", out, tensor_device_type());
  check_same_dtype("all_gather", in, out);
  int64_t total = check_counts("all_gather", "counts", counts, size());
  check_rows("all_gather", "input", in, counts[size_t(rank())], "counts[rank]");
  check_rows("all_gather", "output", out, total, "sum(counts)");
  check_row_shapes("all_gather", in, out);
}

void CheckedCommunicator::check_reduce_scatter(const Tensor& in, const Tensor& out,
                                               const std::vector<int64_t>& counts) {
  check_tensor("reduce_scatter", "input", in, tensor_device_type());
  check_tensor("reduce_scatter", "output", out, tensor_device_type());
  check_same_dtype("reduce_scatter", in, out);
  int64_t total = check_counts("reduce_scatter", "counts", counts, size());
  check_rows("reduce_scatter", "input", in, total, "sum(counts)");
  check_rows("reduce_scatter", "output", out, counts[size_t(rank())], "counts[rank]");
  check_row_shapes("reduce_scatter", in, out);
}

void CheckedCommunicator::check_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts,
                                           const Tensor& out, const std::vector<int64_t>& recv_counts) {
  check_tensor("all_to_all", "input", in, tensor_device_type());
  check_tensor("all_to_all", "output", out, tensor_device_type());
  check_same_dtype("all_to_all", in, out);
  int64_t sent = check_counts("all_to_all", "send_counts", send_counts, size());
  int64_t received = check_counts("all_to_all", "recv_counts", recv_counts, size());
  check_rows("all_to_all", "input", in, sent, "sum(send_counts)");
  check_rows("all_to_all", "output", out, received, "sum(recv_counts)");
  check_row_shapes("all_to_all", in, out);
  MF_CHECK(send_counts[size_t(rank())] == recv_counts[size_t(rank())], ValueError,
           "all_to_all: this rank's rows to itself must match: send_counts[", rank(), "] = ",
           send_counts[size_t(rank())], " but recv_counts[", rank(), "] = ", recv_counts[size_t(rank())]);
}

void CheckedCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  check_all_reduce(t);
  drain();
  run_all_reduce(t, op);
}

void CheckedCommunicator::broadcast(Tensor& t, int root) {
  check_broadcast(t, root);
  drain();
  run_broadcast(t, root);
}

void CheckedCommunicator::all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) {
  check_all_gather(in, out, counts);
  drain();
  run_all_gather(in, out, counts);
}

void CheckedCommunicator::reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                                         ReduceOp op) {
  check_reduce_scatter(in, out, counts);
  drain();
  run_reduce_scatter(in, out, counts, op);
}

void CheckedCommunicator::all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                                     const std::vector<int64_t>& recv_counts) {
  check_all_to_all(in, send_counts, out, recv_counts);
  drain();
  run_all_to_all(in, send_counts, out, recv_counts);
}

// --- Note [Asynchronous collectives] ------------------------------------------

namespace {
class QueuedWork final : public Work {
 public:
  QueuedWork(std::shared_future<void> done, TensorList keep) : done_(std::move(done)), keep_(std::move(keep)) {}
  // A Work dropped unwaited still completes on the queue; its error is dropped.
  void wait() override { done_.get(); }
  bool is_completed() override { return done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }

 private:
  std::shared_future<void> done_;
  TensorList keep_;  // alive until the collective ran
};
}  // namespace

std::shared_ptr<Work> CheckedCommunicator::enqueue(std::function<void()> run, TensorList keep) {
  std::lock_guard<std::mutex> lock(queue_mutex_);
  if (!queue_) queue_ = std::make_unique<JobThread>("collectives");
  last_ = queue_->submit(std::move(run)).share();
  return std::make_shared<QueuedWork>(last_, std::move(keep));
}

void CheckedCommunicator::drain() {
  std::shared_future<void> last;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (!queue_) return;
    last = last_;
  }
  if (last.valid()) last.wait();
}

void CheckedCommunicator::stop_queue() {
  std::unique_ptr<JobThread> queue;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queue = std::move(queue_);
  }
  queue.reset();  // runs what is queued, then joins
}

CheckedCommunicator::~CheckedCommunicator() { stop_queue(); }

std::shared_ptr<Work> CheckedCommunicator::all_reduce_async(Tensor& t, ReduceOp op) {
  check_all_reduce(t);
  return enqueue([this, t, op]() mutable { run_all_reduce(t, op); }, {t});
}

std::shared_ptr<Work> CheckedCommunicator::broadcast_async(Tensor& t, int root) {
  check_broadcast(t, root);
  return enqueue([this, t, root]() mutable { run_broadcast(t, root); }, {t});
}

std::shared_ptr<Work> CheckedCommunicator::all_gather_async(const Tensor& in, Tensor& out,
                                                            const std::vector<int64_t>& counts) {
  check_all_gather(in, out, counts);
  return enqueue([this, in, out, counts]() mutable { run_all_gather(in, out, counts); }, {in, out});
}

std::shared_ptr<Work> CheckedCommunicator::reduce_scatter_async(const Tensor& in, Tensor& out,
                                                                const std::vector<int64_t>& counts, ReduceOp op) {
  check_reduce_scatter(in, out, counts);
  return enqueue([this, in, out, counts, op]() mutable { run_reduce_scatter(in, out, counts, op); }, {in, out});
}

std::shared_ptr<Work> CheckedCommunicator::all_to_all_async(const Tensor& in, const std::vector<int64_t>& send_counts,
                                                            Tensor& out, const std::vector<int64_t>& recv_counts) {
  check_all_to_all(in, send_counts, out, recv_counts);
  return enqueue([this, in, send_counts, out, recv_counts]() mutable {
    run_all_to_all(in, send_counts, out, recv_counts);
  }, {in, out});
}

std::shared_ptr<Work> CheckedCommunicator::barrier_async() {
  return enqueue([this] { run_barrier(); }, {});
}

void CheckedCommunicator::check_point_to_point(const char* name, const Tensor& t, int peer, int tag) {
  const bool sends = name[0] == 'i' ? name[1] == 's' : name[0] == 's';
  const char* arg = sends ? "dst" : "src";
  check_tensor(name, "tensor", t, tensor_device_type());
  check_peer(name, arg, peer, *this);
  MF_CHECK(peer != rank(), ValueError, name, ": ", arg, " must be another rank, got this rank (", peer, ")");
  MF_CHECK(tag >= 0 && tag <= max_tag(), ValueError, name, ": tag must be in [0, ", max_tag(), "], got ", tag);
}

void CheckedCommunicator::send(const Tensor& t, int dst, int tag) {
  check_point_to_point("send", t, dst, tag);
  drain();
  run_send(t, dst, tag);
}

void CheckedCommunicator::recv(Tensor& t, int src, int tag) {
  check_point_to_point("recv", t, src, tag);
  drain();
  run_recv(t, src, tag);
}

std::shared_ptr<Work> CheckedCommunicator::isend(const Tensor& t, int dst, int tag) {
  check_point_to_point("isend", t, dst, tag);
  return run_isend(t, dst, tag);
}

std::shared_ptr<Work> CheckedCommunicator::irecv(Tensor& t, int src, int tag) {
  check_point_to_point("irecv", t, src, tag);
  return run_irecv(t, src, tag);
}

void CheckedCommunicator::barrier() {
  drain();
  run_barrier();
}

std::shared_ptr<Communicator> CheckedCommunicator::subgroup(const std::vector<int>& ranks) {
  MF_CHECK(!ranks.empty(), ValueError, "subgroup: ranks must not be empty");
  for (size_t i = 0; i < ranks.size(); ++i) {
    MF_CHECK(ranks[i] >= 0 && ranks[i] < size(), ValueError, "subgroup: ranks must be ranks of the group (0 to ",
             size() - 1, "), got ", format_ranks(ranks));
    MF_CHECK(i == 0 || ranks[i - 1] < ranks[i], ValueError,
             "subgroup: ranks must be ascending without repeats, got ", format_ranks(ranks));
  }
  MF_CHECK(std::find(ranks.begin(), ranks.end(), rank()) != ranks.end(), ValueError, "subgroup: this rank (",
           rank(), ") must be one of the ranks, got ", format_ranks(ranks));
  // The graph executor's communication thread looks groups up too.
  std::lock_guard<std::mutex> lock(subgroups_mutex_);
  for (const auto& [key, comm] : subgroups_)
    if (key == ranks) return comm;
  auto comm = create_subgroup(ranks);
  subgroups_.emplace_back(ranks, comm);
  return comm;
}

namespace {

// Note [Single process]: a group of one. Every collective's result is this
// rank's own data, so the calls reduce to copies (all_reduce and broadcast
// to nothing); the checks are those of the MPI backend, so a program that
// runs alone fails the same way it would on many ranks.
class SingleCommunicator final : public CheckedCommunicator {
 public:
  ~SingleCommunicator() override { stop_queue(); }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  std::string backend() const override { return "single"; }

 protected:
  void run_all_reduce(Tensor&, ReduceOp) override {}
  void run_broadcast(Tensor&, int) override {}
  void run_all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>&) override { copy_bytes(in, out); }
  void run_reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>&, ReduceOp) override {
    copy_bytes(in, out);
  }
  void run_all_to_all(const Tensor& in, const std::vector<int64_t>&, Tensor& out,
                      const std::vector<int64_t>&) override {
    copy_bytes(in, out);
  }
  // The checks reject every peer of a group of one before these are reached.
  void run_send(const Tensor&, int, int) override { throw ValueError("send: a group of one has no peer"); }
  void run_recv(Tensor&, int, int) override { throw ValueError("recv: a group of one has no peer"); }
  std::shared_ptr<Work> run_isend(const Tensor&, int, int) override {
    throw ValueError("isend: a group of one has no peer");
  }
  std::shared_ptr<Work> run_irecv(Tensor&, int, int) override { throw ValueError("irecv: a group of one has no peer"); }
  void run_barrier() override {}
  std::shared_ptr<Communicator> create_subgroup(const std::vector<int>&) override {
    return std::make_shared<SingleCommunicator>();
  }
  int max_tag() const override { return std::numeric_limits<int>::max(); }

 private:
  static void copy_bytes(const Tensor& in, Tensor& out) {
    if (in.numel() > 0) std::memmove(out.data_ptr(), in.data_ptr(), size_t(in.numel()) * in.element_size());
  }
  std::vector<int> world_ranks_{0};
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator() { return std::make_unique<SingleCommunicator>(); }

Communicator& world() {
  static std::unique_ptr<Communicator> comm = started_by_mpi() ? make_mpi_world() : make_single_communicator();
  return *comm;
}

namespace {
std::mutex& device_groups_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::array<DeviceGroupFactory, kNumDeviceTypes>& device_group_factories() {
  static std::array<DeviceGroupFactory, kNumDeviceTypes> factories;
  return factories;
}
}  // namespace

void register_device_groups(DeviceType type, DeviceGroupFactory factory) {
  std::lock_guard<std::mutex> lock(device_groups_mutex());
  device_group_factories()[size_t(type)] = std::move(factory);
}

std::shared_ptr<Communicator> device_group(const std::vector<int>& world_ranks, const Device& device) {
  if (device.is_cpu()) return world().subgroup(world_ranks);
  DeviceGroupFactory factory;
  {
    std::lock_guard<std::mutex> lock(device_groups_mutex());
    factory = device_group_factories()[size_t(device.type())];
  }
  return factory ? factory(world_ranks, device.index()) : nullptr;
}

int get_rank() { return world().rank(); }
int get_world_size() { return world().size(); }
int get_local_rank() { return world().backend() == "mpi" ? mpi_local_rank() : 0; }
void barrier() { world().barrier(); }

namespace {
thread_local bool tls_yielding_waits = false;
}  // namespace

void set_yielding_waits(bool yielding) { tls_yielding_waits = yielding; }
bool yielding_waits() { return tls_yielding_waits; }

}  // namespace mf::distributed
