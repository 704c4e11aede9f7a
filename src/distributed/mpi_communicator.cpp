// The MPI backend: collectives on contiguous CPU tensors over Open MPI.
//
// Note [Bounded waits]: every call starts a nonblocking MPI operation and
// polls MPI_Test until it completes or MESHFLOW_COMM_TIMEOUT seconds (default
// 300) pass without completion; then it throws DistributedError naming the
// call, this rank and the group. A rank that skips a collective, or calls
// another one, thus ends the others' waits instead of hanging them. The
// timed-out operation stays posted inside MPI, so its buffers are kept alive
// for the life of the process and the communicator must not be used again;
// at exit such a process aborts the job (MPI_Finalize could wait forever on
// the peer that never came).
// A peer that dies: Open MPI's mpirun notices and terminates the job, and
// every rank still waiting ends with it.
// The first use of world() initialises MPI (src/distributed/mpi_runtime.cpp).
// subgroup() first exchanges
// the member lists among the members with bounded waits (Note [Subgroup
// handshake]), so mismatched placements fail instead of hanging in
// MPI_Comm_create_group.
//
// Note [Timeout report]: when a wait times out, the rank asks every other
// member, over the group's p2p communicator, which collective it is in; a
// rank waiting in some meshflow call of the group answers from inside its
// own wait loop. The DistributedError then names the ranks that did not
// answer (stuck in user code, in another group, or dead) and those that are
// in another collective, and the rank prints its flight record (the last
// FlightRecorder::kRecords calls of the group, as PyTorch's NCCL flight recorder) to
// stderr.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>

#include "distributed/checked_communicator.h"
#include "distributed/flight_recorder.h"
#include "distributed/mpi_runtime.h"

namespace mf::distributed {
namespace {

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::Bool: return MPI_C_BOOL;
    case DType::UInt8: return MPI_UINT8_T;
    case DType::Int8: return MPI_INT8_T;
    case DType::Int16: return MPI_INT16_T;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::Float16:
    case DType::BFloat16: return MPI_UINT16_T;  // moved as bits; reduced in float32
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

// MPI's predefined reductions apply to integers and floats; bool reduces
// with the logical ops (sum and max: or, prod and min: and), as PyTorch's
// bool sum > 0 would.
MPI_Op mpi_op(ReduceOp op, DType d) {
  if (d == DType::Bool) return op == ReduceOp::Sum || op == ReduceOp::Max ? MPI_LOR : MPI_LAND;
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Prod: return MPI_PROD;
  }
  return MPI_OP_NULL;
}

// 16-bit floats are reduced in float32 (one rounding at the end, not one per
// rank); widen copies t into a new float32 tensor, narrow writes back.
Tensor widen(const Tensor& t) {
  Tensor wide = make_empty(t.sizes(), DType::Float32);
  float* dst = static_cast<float*>(wide.data_ptr());
  int64_t n = t.numel();
  if (t.dtype() == DType::Float16) {
    const Half* src = static_cast<const Half*>(t.data_ptr());
    for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
  } else {
    const BFloat16* src = static_cast<const BFloat16*>(t.data_ptr());
    for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
  }
  return wide;
}

void narrow(const Tensor& wide, Tensor& t) {
  const float* src = static_cast<const float*>(wide.data_ptr());
  int64_t n = t.numel();
  if (t.dtype() == DType::Float16) {
    Half* dst = static_cast<Half*>(t.data_ptr());
    for (int64_t i = 0; i < n; ++i) dst[i] = Half(src[i]);
  } else {
    BFloat16* dst = static_cast<BFloat16*>(t.data_ptr());
    for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16(src[i]);
  }
}

template <typename T>
void combine_typed(ReduceOp op, T* out, const T* a, const T* b, int64_t n) {
  if constexpr (std::is_same_v<T, bool>) {
    bool any = op == ReduceOp::Sum || op == ReduceOp::Max;
    for (int64_t i = 0; i < n; ++i) out[i] = any ? (a[i] || b[i]) : (a[i] && b[i]);
  } else {
    switch (op) {
      case ReduceOp::Sum: for (int64_t i = 0; i < n; ++i) out[i] = T(a[i] + b[i]); break;
      case ReduceOp::Max: for (int64_t i = 0; i < n; ++i) out[i] = std::max(a[i], b[i]); break;
      case ReduceOp::Min: for (int64_t i = 0; i < n; ++i) out[i] = std::min(a[i], b[i]); break;
      case ReduceOp::Prod: for (int64_t i = 0; i < n; ++i) out[i] = T(a[i] * b[i]); break;
    }
  }
}

// out = a op b, elementwise, as MPI's predefined ops compute it (16-bit
// floats arrive widened to float32).
void combine(DType dtype, ReduceOp op, void* out, const void* a, const void* b, int64_t n) {
  switch (dtype) {
#define MF_COMBINE(D, T) \
    case D: combine_typed(op, static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n); break;
    MF_COMBINE(DType::Bool, bool)
    MF_COMBINE(DType::UInt8, uint8_t)
    MF_COMBINE(DType::Int8, int8_t)
    MF_COMBINE(DType::Int16, int16_t)
    MF_COMBINE(DType::Int32, int32_t)
    MF_COMBINE(DType::Int64, int64_t)
    MF_COMBINE(DType::Float32, float)
    MF_COMBINE(DType::Float64, double)
#undef MF_COMBINE
    case DType::Float16:
    case DType::BFloat16: throw Error("reduce_scatter: 16-bit floats must be widened first");
  }
}

class MpiCommunicator final : public CheckedCommunicator {
 public:
  // Takes ownership of comm (freed in the destructor).
  MpiCommunicator(MPI_Comm comm, std::vector<int> world_ranks) : comm_(comm), world_ranks_(std::move(world_ranks)) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    check("communicator", MPI_Comm_dup(comm_, &p2p_comm_));
    MPI_Comm_set_errhandler(p2p_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    void* value = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found);
    max_tag_ = found ? *static_cast<int*>(value) : 32767;
  }
  ~MpiCommunicator() override {
    stop_queue();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || runtime().broken) return;
    MPI_Comm_free(&p2p_comm_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  std::string backend() const override { return "mpi"; }

 protected:
  void run_all_reduce(Tensor& t, ReduceOp op) override {
    auto guard = serialize();
    const char* name = "all_reduce";
    Call call(recorder_, name, true, describe(t) + " " + reduce_op_name(op));
    Tensor buffer = is_reduced_floating(t.dtype()) ? widen(t) : t;
    MPI_Request request;
    check(name, MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), element_count(name, buffer.numel()),
                               mpi_type(buffer.dtype()), mpi_op(op, buffer.dtype()), comm_, &request));
    wait(name, request, {buffer});
    if (is_reduced_floating(t.dtype())) narrow(buffer, t);
  }

  void run_broadcast(Tensor& t, int root) override {
    auto guard = serialize();
    const char* name = "broadcast";
    Call call(recorder_, name, true, detail::concat(describe(t), " root ", root));
    MPI_Request request;
    check(name, MPI_Ibcast(t.data_ptr(), element_count(name, t.numel()), mpi_type(t.dtype()), root, comm_,
                           &request));
    wait(name, request, {t});
  }

  void run_all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) override {
    auto guard = serialize();
    const char* name = "all_gather";
    Call call(recorder_, name, true, describe(in) + " -> " + describe(out));
    int64_t row = row_numel(out);
    std::vector<int> elements = element_counts(name, counts, row);
    std::vector<int> displacements = element_counts(name, row_offsets(counts), row);
    element_count(name, out.numel());
    MPI_Request request;
    check(name, MPI_Iallgatherv(in.data_ptr(), elements[size_t(rank_)], mpi_type(in.dtype()), out.data_ptr(),
                                elements.data(), displacements.data(), mpi_type(out.dtype()), comm_, &request));
    wait(name, request, {in, out});
  }

  // Note [Ring reduce-scatter]: Open MPI's nonblocking reduce-scatter
  // (libnbc) reduces everything onto one rank and scatters from there: half
  // the bandwidth of the blocking call at 16 MiB (bench/comm.cpp). This is
  // the ring instead: in n - 1 steps each rank passes one block to the next
  // rank and adds the block it receives to its own part of the input; after
  // step s, rank r holds the partial sum of block (r - s - 2) mod n over
  // s + 2 ranks, so the last step leaves block r complete. Only block-sized
  // buffers are used; the messages go over p2p_comm_, apart from users' sends.
  void run_reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                          ReduceOp op) override {
    auto guard = serialize();
    const char* name = "reduce_scatter";
    Call call(recorder_, name, true, describe(in) + " -> " + describe(out) + " " + reduce_op_name(op));
    const int n = size_;
    const int64_t row = row_numel(in);
    element_count(name, in.numel());
    std::vector<int> elements = element_counts(name, counts, row);
    std::vector<int64_t> offsets = row_offsets(counts);
    bool wide = is_reduced_floating(in.dtype());
    Tensor source = wide ? widen(in) : in;  // (sum(counts), ...)
    Tensor result = wide ? make_empty(out.sizes(), DType::Float32) : out;
    const DType dtype = source.dtype();
    const size_t element_size = itemsize(dtype);
    auto block = [&](int b) {
      return static_cast<char*>(source.data_ptr()) + size_t(offsets[size_t(b)] * row) * element_size;
    };
    if (n == 1) {
      if (in.numel() > 0) std::memcpy(result.data_ptr(), block(0), size_t(in.numel()) * element_size);
    } else {
      int64_t largest = *std::max_element(elements.begin(), elements.end());
      Tensor sent = make_empty({largest}, dtype), next = make_empty({largest}, dtype);
      Tensor received = make_empty({largest}, dtype);
      const int to = (rank_ + 1) % n, from = (rank_ + n - 1) % n;
      const void* outgoing = block((rank_ + n - 1) % n);
      for (int step = 0; step < n - 1; ++step) {
        int b_send = ((rank_ - step - 1) % n + n) % n, b_receive = ((rank_ - step - 2) % n + n) % n;
        MPI_Request requests[2];
        check(name, MPI_Irecv(received.data_ptr(), elements[size_t(b_receive)], mpi_type(dtype), from,
                              kReduceScatterTag, p2p_comm_, &requests[0]));
        check(name, MPI_Isend(outgoing, elements[size_t(b_send)], mpi_type(dtype), to, kReduceScatterTag,
                              p2p_comm_, &requests[1]));
        wait(name, requests[0], {source, sent, next, received});
        wait(name, requests[1], {source, sent, next, received});
        void* target = step == n - 2 ? result.data_ptr() : next.data_ptr();
        combine(dtype, op, target, block(b_receive), received.data_ptr(), elements[size_t(b_receive)]);
        std::swap(sent, next);
        outgoing = sent.data_ptr();
      }
    }
    if (wide) narrow(result, out);
  }

  void run_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                      const std::vector<int64_t>& recv_counts) override {
    auto guard = serialize();
    const char* name = "all_to_all";
    Call call(recorder_, name, true, describe(in) + " -> " + describe(out));
    int64_t row = row_numel(in);
    std::vector<int> sends = element_counts(name, send_counts, row);
    std::vector<int> send_offsets = element_counts(name, row_offsets(send_counts), row);
    std::vector<int> receives = element_counts(name, recv_counts, row);
    std::vector<int> receive_offsets = element_counts(name, row_offsets(recv_counts), row);
    element_count(name, in.numel());
    element_count(name, out.numel());
    MPI_Datatype type = mpi_type(in.dtype());
    MPI_Request request;
    check(name, MPI_Ialltoallv(in.data_ptr(), sends.data(), send_offsets.data(), type, out.data_ptr(),
                               receives.data(), receive_offsets.data(), type, comm_, &request));
    wait(name, request, {in, out});
  }

  void run_send(const Tensor& t, int dst, int tag) override {
    auto guard = serialize();
    const char* name = "send";
    Call call(recorder_, name, false, detail::concat(describe(t), " to ", dst, " tag ", tag));
    MPI_Request request;
    check(name, MPI_Isend(t.data_ptr(), element_count(name, t.numel()), mpi_type(t.dtype()), dst, tag, comm_,
                          &request));
    wait(name, request, {t});
  }

  void run_recv(Tensor& t, int src, int tag) override {
    auto guard = serialize();
    const char* name = "recv";
    Call call(recorder_, name, false, detail::concat(describe(t), " from ", src, " tag ", tag));
    MPI_Request request;
    int expected = element_count(name, t.numel());
    check(name, MPI_Irecv(t.data_ptr(), expected, mpi_type(t.dtype()), src, tag, comm_, &request));
    check_received(name, wait(name, request, {t}), t, src, tag);
  }

  // Note [Nonblocking point-to-point]: isend/irecv post the MPI request and
  // return; MpiWork::wait() then polls it as every call does (Note [Bounded
  // waits]). A Work dropped unwaited is waited for by its destructor.
  class MpiWork final : public Work {
   public:
    MpiWork(MpiCommunicator* comm, const char* name, MPI_Request request, Tensor tensor, int peer, int tag)
        : comm_(comm), name_(name), request_(request), tensor_(std::move(tensor)), peer_(peer), tag_(tag) {}
    ~MpiWork() override {
      if (done_) return;
      try {
        wait();
      } catch (...) {  // the error was the caller's to see; a destructor cannot throw
      }
    }
    void wait() override {
      if (done_) return;
      auto guard = serialize();
      Call call(comm_->recorder_, name_, false,
                detail::concat("wait ", describe(tensor_), name_[1] == 's' ? " to " : " from ", peer_, " tag ", tag_));
      MPI_Status status = comm_->wait(name_, request_, {tensor_});
      done_ = true;
      if (name_[1] == 'r') comm_->check_received(name_, status, tensor_, peer_, tag_);
    }
    bool is_completed() override {
      if (done_) return true;
      auto guard = serialize();
      int flag = 0;
      MPI_Status status;
      comm_->check(name_, MPI_Test(&request_, &flag, &status));
      if (!flag) return false;
      done_ = true;
      if (name_[1] == 'r') comm_->check_received(name_, status, tensor_, peer_, tag_);
      return true;
    }

   private:
    MpiCommunicator* comm_;
    const char* name_;
    MPI_Request request_;
    Tensor tensor_;
    int peer_, tag_;
    bool done_ = false;
  };

  std::shared_ptr<Work> run_isend(const Tensor& t, int dst, int tag) override { return post(true, t, dst, tag); }
  std::shared_ptr<Work> run_irecv(Tensor& t, int src, int tag) override { return post(false, t, src, tag); }

  // Starts an isend (or irecv) of t with peer and returns its Work.
  std::shared_ptr<Work> post(bool send, const Tensor& t, int peer, int tag) {
    auto guard = serialize();
    const char* name = send ? "isend" : "irecv";
    check_not_broken(name);
    Call call(recorder_, name, false, detail::concat(describe(t), send ? " to " : " from ", peer, " tag ", tag));
    MPI_Request request;
    const int count = element_count(name, t.numel());
    check(name, send ? MPI_Isend(t.data_ptr(), count, mpi_type(t.dtype()), peer, tag, comm_, &request)
                     : MPI_Irecv(t.data_ptr(), count, mpi_type(t.dtype()), peer, tag, comm_, &request));
    return std::make_shared<MpiWork>(this, name, request, t, peer, tag);
  }

  void check_received(const char* name, const MPI_Status& status, const Tensor& t, int src, int tag) const {
    int received = 0;
    MPI_Get_count(&status, mpi_type(t.dtype()), &received);
    MF_CHECK(received == int(t.numel()), DistributedError, name, ": rank ", rank_, " of group ",
             format_ranks(world_ranks_), " expected ", t.numel(), " elements from rank ", src, " (tag ", tag,
             "), got ", received, "; the receiver's tensor must have the sender's shape and dtype");
  }

  void run_barrier() override {
    auto guard = serialize();
    Call call(recorder_, "barrier", true, "");
    MPI_Request request;
    check("barrier", MPI_Ibarrier(comm_, &request));
    wait("barrier", request, {});
  }

  std::shared_ptr<Communicator> create_subgroup(const std::vector<int>& ranks) override {
    auto guard = serialize();
    Call call(recorder_, "subgroup", false, format_ranks(ranks));
    handshake_subgroup(ranks);
    MPI_Group group, members;
    check("subgroup", MPI_Comm_group(comm_, &group));
    check("subgroup", MPI_Group_incl(group, int(ranks.size()), ranks.data(), &members));
    MPI_Comm comm;
    int code = MPI_Comm_create_group(comm_, members, 0, &comm);
    MPI_Group_free(&members);
    MPI_Group_free(&group);
    check("subgroup", code);
    std::vector<int> world;
    for (int r : ranks) world.push_back(world_ranks_[size_t(r)]);
    return std::make_shared<MpiCommunicator>(comm, std::move(world));
  }

  int max_tag() const override { return max_tag_; }

 private:
  std::string where() const {
    return "rank " + std::to_string(rank_) + " of the group of world ranks " + format_ranks(world_ranks_);
  }

  void check(const char* name, int code) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw DistributedError(std::string(name) + ": MPI error on " + where() + ": " + std::string(text, size_t(length)));
  }

  // MPI counts are ints: tensors past 2^31-1 elements must be split.
  static int element_count(const char* name, int64_t n) {
    MF_CHECK(n <= std::numeric_limits<int>::max(), ValueError, name, ": ", n,
             " elements exceed MPI's limit of 2^31-1 per call; split the tensor");
    return int(n);
  }

  static std::vector<int> element_counts(const char* name, const std::vector<int64_t>& rows, int64_t row) {
    std::vector<int> elements;
    elements.reserve(rows.size());
    for (int64_t r : rows) elements.push_back(element_count(name, r * row));
    return elements;
  }

  // Note [Bounded waits]. Spins first (collectives on small tensors finish
  // in microseconds; a thread with yielding_waits() skips this), then
  // yields the core, then sleeps between polls, answering other ranks'
  // status requests (Note [Timeout report]) once the wait is long.
  MPI_Status wait(const char* name, MPI_Request& request, std::initializer_list<Tensor> buffers) {
    MpiRuntime& r = runtime();
    check_not_broken(name);
    auto start = Clock::now();
    auto limit = std::chrono::duration<double>(r.timeout_s);
    const bool yielding = yielding_waits();
    for (;;) {
      int done = 0;
      MPI_Status status;
      check(name, MPI_Test(&request, &done, &status));
      if (done) return status;
      auto waited = Clock::now() - start;
      if (waited > limit) {
        r.abandoned.insert(r.abandoned.end(), buffers.begin(), buffers.end());
        std::string report = timeout_report();
        break_runtime(detail::concat(name, " timed out"));
        std::ostringstream message;
        message << name << current_call_text() << ": timed out after " << r.timeout_s << " s on " << where() << ": "
                << report << " (MESHFLOW_COMM_TIMEOUT or init_process_group(timeout=...) sets the limit; the "
                << "flight record of this rank's last calls is on stderr)";
        dump_flight_record();
        throw DistributedError(message.str());
      }
      if (waited > std::chrono::milliseconds(50)) serve_status_requests();
      if (waited > std::chrono::seconds(1))
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      else if (yielding || waited > std::chrono::milliseconds(1))
        std::this_thread::yield();
    }
  }

  void check_not_broken(const char* name) const {
    MpiRuntime& r = runtime();
    MF_CHECK(!r.broken, DistributedError, name, ": ", r.broken_reason, " earlier on ", where(),
             "; communication is no longer possible in this process");
  }

  static void break_runtime(std::string reason) {
    MpiRuntime& r = runtime();
    if (!r.broken) r.broken_reason = std::move(reason);
    r.broken = true;
  }

  // --- the flight recorder ---------------------------------------------------------------------
  using Clock = std::chrono::steady_clock;
  using Call = FlightRecorder::Scope;

  static std::string describe(const Tensor& t) {
    return detail::concat(dtype_name(t.dtype()), shape_str(t.sizes()));
  }

  std::string current_call_text() const {
    const uint64_t seq = recorder_.current().first;
    return seq ? detail::concat(" #", seq) : std::string();
  }

  void dump_flight_record() const {
    const std::string text =
        recorder_.dump(detail::concat(where(), " (world rank ", world_ranks_[size_t(rank_)], ")"));
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }

  // --- status requests (Note [Timeout report]) ------------------------------------------------
  static constexpr int kStatusRequestTag = 2;
  static constexpr int kStatusReplyTag = 3;
  static constexpr int kSubgroupTag = 4;
  static constexpr const char* kCallNames[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter",
                                               "all_to_all", "send", "recv", "barrier", "subgroup",
                                               "isend", "irecv"};

  static bool is_collective(const char* name) {
    for (const char* p2p : {"send", "recv", "isend", "irecv", "subgroup"})
      if (std::strcmp(name, p2p) == 0) return false;
    return true;
  }

  static int64_t name_id(const char* name) {
    for (size_t i = 0; i < std::size(kCallNames); ++i)
      if (std::strcmp(kCallNames[i], name) == 0) return int64_t(i);
    return -1;
  }

  // A buffer that lives as long as the process (sends that are never
  // waited for, receives that may never complete).
  static std::vector<int64_t>& keep(std::vector<int64_t> data) {
    static std::mutex mutex;
    std::lock_guard<std::mutex> guard(mutex);
    MpiRuntime& r = runtime();
    if (r.message_buffers.size() > 4096) r.message_buffers.pop_front();
    return r.message_buffers.emplace_back(std::move(data));
  }

  void post_send(std::vector<int64_t> data, int to, int tag) {
    std::vector<int64_t>& buffer = keep(std::move(data));
    MPI_Request request;
    if (MPI_Isend(buffer.data(), int(buffer.size()), MPI_INT64_T, to, tag, p2p_comm_, &request) == MPI_SUCCESS)
      MPI_Request_free(&request);
  }

  void serve_status_requests() {
    for (;;) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kStatusRequestTag, p2p_comm_, &flag, &status) != MPI_SUCCESS || !flag) return;
      int64_t request[3];
      if (MPI_Recv(request, 3, MPI_INT64_T, status.MPI_SOURCE, kStatusRequestTag, p2p_comm_, MPI_STATUS_IGNORE) !=
          MPI_SUCCESS)
        return;
      const auto [seq, name] = recorder_.current();
      post_send({int64_t(seq), name_id(name)}, status.MPI_SOURCE, kStatusReplyTag);
    }
  }

  // Asks every other member where it is; a sentence for the error.
  std::string timeout_report() {
    const int n = size_;
    std::vector<int64_t>& replies = keep(std::vector<int64_t>(size_t(2 * n), -2));
    std::vector<MPI_Request> receives(size_t(n), MPI_REQUEST_NULL);
    const auto [my_seq, my_name] = recorder_.current();
    for (int peer = 0; peer < n; ++peer) {
      if (peer == rank_) continue;
      post_send({int64_t(my_seq), name_id(my_name), 0}, peer, kStatusRequestTag);
      MPI_Irecv(&replies[size_t(2 * peer)], 2, MPI_INT64_T, peer, kStatusReplyTag, p2p_comm_,
                &receives[size_t(peer)]);
    }
    const auto deadline = Clock::now() + std::chrono::duration<double>(std::clamp(runtime().timeout_s / 4, 0.5, 3.0));
    std::vector<bool> answered(size_t(n), false);
    answered[size_t(rank_)] = true;
    for (;;) {
      serve_status_requests();
      bool all = true;
      for (int peer = 0; peer < n; ++peer) {
        if (answered[size_t(peer)]) continue;
        int done = 0;
        MPI_Test(&receives[size_t(peer)], &done, MPI_STATUS_IGNORE);
        answered[size_t(peer)] = done != 0;
        all = all && done;
      }
      // Answered or not, this rank keeps answering until the deadline: the
      // others time out about now too and ask it in turn.
      if (Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(all ? 5 : 1));
    }
    std::vector<int> silent, same;
    std::vector<std::string> elsewhere;
    for (int peer = 0; peer < n; ++peer) {
      if (peer == rank_) continue;
      const int world_rank = world_ranks_[size_t(peer)];
      if (!answered[size_t(peer)]) {
        silent.push_back(world_rank);
        continue;
      }
      const int64_t seq = replies[size_t(2 * peer)], id = replies[size_t(2 * peer + 1)];
      const char* name = id >= 0 && id < int64_t(std::size(kCallNames)) ? kCallNames[id] : "?";
      if (uint64_t(seq) == my_seq && std::strcmp(name, my_name) == 0)
        same.push_back(world_rank);
      else if (is_collective(name))
        elsewhere.push_back(detail::concat("world rank ", world_rank, " is in ", name, " #", seq));
      else
        elsewhere.push_back(detail::concat("world rank ", world_rank, " is in ", name, ", after ", seq,
                                           " collectives of this group"));
    }
    std::string out;
    if (!silent.empty())
      out += detail::concat("world ranks ", format_ranks(silent), " did not reach this call (no answer: busy outside ",
                            "meshflow's calls of this group, e.g. stuck in Python code, waiting in another group, or ",
                            "dead)");
    for (const std::string& e : elsewhere) out += (out.empty() ? "" : "; ") + e;
    if (!same.empty()) out += detail::concat(out.empty() ? "" : "; ", "world ranks ", format_ranks(same),
                                             " are waiting in it too");
    return out.empty() ? "no other rank answered" : out;
  }

  // Note [Subgroup handshake]: MPI_Comm_create_group waits, without a time
  // limit, for every member to call it with the same group. So the members
  // first send each other their member lists (p2p, bounded waits): a rank
  // that names another group fails at once with both lists, one that never
  // comes fails after the timeout. Either leaves unmatched messages behind,
  // so the process cannot communicate afterwards.
  void handshake_subgroup(const std::vector<int>& ranks) {
    check_not_broken("subgroup");
    std::vector<int64_t> mine(ranks.begin(), ranks.end());
    for (int peer : ranks)
      if (peer != rank_) post_send(mine, peer, kSubgroupTag);
    const auto limit = std::chrono::duration<double>(runtime().timeout_s);
    const auto start = Clock::now();
    auto world_of = [&](const std::vector<int64_t>& group) {
      std::vector<int> out;
      for (int64_t g : group) out.push_back(g >= 0 && g < size_ ? world_ranks_[size_t(g)] : -1);
      return format_ranks(out);
    };
    for (int peer : ranks) {
      if (peer == rank_) continue;
      for (;;) {
        int flag = 0;
        MPI_Status status;
        check("subgroup", MPI_Iprobe(peer, kSubgroupTag, p2p_comm_, &flag, &status));
        if (flag) {
          int count = 0;
          MPI_Get_count(&status, MPI_INT64_T, &count);
          std::vector<int64_t> theirs(size_t(std::max(count, 0)));
          check("subgroup", MPI_Recv(theirs.data(), count, MPI_INT64_T, peer, kSubgroupTag, p2p_comm_,
                                     MPI_STATUS_IGNORE));
          if (theirs != mine) {
            break_runtime("a mismatched subgroup");
            throw DistributedError(detail::concat(
                "subgroup: world rank ", world_ranks_[size_t(peer)], " creates a group of world ranks ",
                world_of(theirs), " while world rank ", world_ranks_[size_t(rank_)], " creates one of ",
                world_of(mine), ": every member must create the same group at the same point (the same placement ",
                "on every rank)"));
          }
          break;
        }
        if (Clock::now() - start > limit) {
          break_runtime("subgroup creation timed out");
          std::vector<int> missing;
          for (int p : ranks)
            if (p >= peer && p != rank_) missing.push_back(world_ranks_[size_t(p)]);
          throw DistributedError(detail::concat(
              "subgroup: creating the group of world ranks ", world_of(mine), " timed out after ",
              runtime().timeout_s, " s on world rank ", world_ranks_[size_t(rank_)], ": world ranks ",
              format_ranks(missing), " have not joined (they create another group, none, or are stuck)"));
        }
        serve_status_requests();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }

  static constexpr int kReduceScatterTag = 1;

  MPI_Comm comm_;
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;  // a duplicate of comm_ for the collectives' own messages
  std::vector<int> world_ranks_;
  int rank_ = 0;
  int size_ = 1;
  int max_tag_ = 32767;
  FlightRecorder recorder_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world() {
  initialize_mpi();
  MPI_Comm comm;
  int code = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MF_CHECK(code == MPI_SUCCESS, DistributedError, "world: MPI_Comm_dup failed with code ", code);
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<int> ranks(size_t(size), 0);
  for (int r = 0; r < size; ++r) ranks[size_t(r)] = r;
  runtime().local_rank = read_local_rank();
  return std::make_unique<MpiCommunicator>(comm, std::move(ranks));
}

}  // namespace mf::distributed
