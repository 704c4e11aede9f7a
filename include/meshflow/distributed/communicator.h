// Processes and collectives. A Communicator moves the data of CPU tensors
// between the ranks of a group; the global view's boxing (P->B all-reduce,
// S->B all-gather, ...) and DistributedDataParallel are written against this
// interface only. Implementations: MPI (Open MPI) for CPU tensors, and a
// single-process one when the program was not started by mpirun or
// `python -m meshflow.distributed.launch`.
//
// Every call is collective over the group unless marked otherwise: each rank
// makes the same calls in the same order, with tensors of the same dtype and
// (where stated) shape. Tensors must be contiguous CPU tensors; results are
// written into the given output tensors. Errors (a bad argument, a peer that
// died, a call that times out) throw mf::DistributedError naming the
// collective and the ranks involved; a process never hangs without bound.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meshflow/tensor.h"

namespace mf::distributed {

enum class ReduceOp { Sum, Max, Min, Prod };

// A nonblocking send or receive (Communicator::isend / irecv). wait()
// returns when it completed, or throws DistributedError after comm_timeout()
// seconds (Note [Bounded waits]); the tensor must stay alive and unchanged
// until then (the Work keeps a reference to it).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // True once it completed (a test that does not wait).
  virtual bool is_completed() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  // This process's index in the group, and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The world rank of each member, in group order.
  virtual const std::vector<int>& world_ranks() const = 0;

  // In place: t becomes the reduction of every rank's t.
  virtual void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // In place: t becomes root's t (root is a group rank).
  virtual void broadcast(Tensor& t, int root) = 0;
  // out = the concatenation along dim 0 of every rank's `in`, in rank order;
  // counts[r] is the number of dim-0 rows rank r contributes (ranks may
  // differ: uneven splits). out has sum(counts) rows.
  virtual void all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) = 0;
  // in has sum(counts) rows; out (counts[rank] rows) = the reduction over
  // ranks of rows [offset(rank), offset(rank) + counts[rank]) of in.
  virtual void reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                              ReduceOp op = ReduceOp::Sum) = 0;
  // in holds sum(send_counts) rows, send_counts[r] of them for rank r in
  // rank order; out receives recv_counts[r] rows from each rank r, in rank
  // order. send_counts on rank a for rank b equals recv_counts on b for a.
  virtual void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                          const std::vector<int64_t>& recv_counts) = 0;
  // Point to point (not collective): the receiver's tensor has the sender's
  // shape and dtype; peers are group ranks.
  virtual void send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual void recv(Tensor& t, int src, int tag = 0) = 0;
  // The same without waiting: messages between two ranks with one tag are
  // received in the order they were sent. A Work that is dropped before
  // its wait() is waited for by its destructor (bounded, errors dropped).
  virtual std::shared_ptr<Work> isend(const Tensor& t, int dst, int tag = 0) = 0;
  virtual std::shared_ptr<Work> irecv(Tensor& t, int src, int tag = 0) = 0;
  virtual void barrier() = 0;

  // Note [Asynchronous collectives]: the same collectives without waiting
  // (torch.distributed's async_op=True). Each checks its arguments at once,
  // queues the collective on the communicator's own thread and returns its
  // Work; the queued collectives run in the order they were issued, and
  // any blocking call on the communicator first waits for them, so every
  // rank still issues one communicator's calls in program order. The
  // tensors must stay alive and unchanged until wait() (the Work keeps
  // references); wait() rethrows the collective's error.
  virtual std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  virtual std::shared_ptr<Work> broadcast_async(Tensor& t, int root) = 0;
  virtual std::shared_ptr<Work> all_gather_async(const Tensor& in, Tensor& out,
                                                 const std::vector<int64_t>& counts) = 0;
  virtual std::shared_ptr<Work> reduce_scatter_async(const Tensor& in, Tensor& out,
                                                     const std::vector<int64_t>& counts,
                                                     ReduceOp op = ReduceOp::Sum) = 0;
  virtual std::shared_ptr<Work> all_to_all_async(const Tensor& in, const std::vector<int64_t>& send_counts,
                                                 Tensor& out, const std::vector<int64_t>& recv_counts) = 0;
  virtual std::shared_ptr<Work> barrier_async() = 0;

  // A communicator over some of this group's members (group ranks,
  // ascending, this rank among them). Collective over those members only;
  // results are cached per member list.
  virtual std::shared_ptr<Communicator> subgroup(const std::vector<int>& ranks) = 0;
  // "mpi" or "single".
  virtual std::string backend() const = 0;
};

// The group of every process, created on first use: MPI when the process
// was started by mpirun (or the launcher), otherwise a group of one.
Communicator& world();

// Note [Device groups]: the communicator of the group world_ranks
// (ascending, this rank among them) for tensors on `device`. Host tensors
// use world().subgroup(world_ranks); a device backend may register its own
// groups for its tensors (CUDA: NCCL, Note [NCCL collectives]), one per
// group and device index, made on first use by all members. nullptr where
// the device type has none (its collective ops then run host-staged).
std::shared_ptr<Communicator> device_group(const std::vector<int>& world_ranks, const Device& device);
// f(world_ranks, device index): the group, or nullptr where the backend
// cannot make one (its library is missing).
using DeviceGroupFactory = std::function<std::shared_ptr<Communicator>(const std::vector<int>&, int)>;
void register_device_groups(DeviceType type, DeviceGroupFactory factory);

int get_rank();
int get_world_size();
// The rank among the processes of this machine.
int get_local_rank();
// Waits for collectives issued by this thread yield the core from the
// start instead of spinning for a millisecond first: for a communication
// thread whose waits run beside compute on the same cores.
void set_yielding_waits(bool yielding);
bool yielding_waits();
void barrier();

// The seconds a call waits for its peers before it throws DistributedError
// (MESHFLOW_COMM_TIMEOUT, default 300, unless set_comm_timeout chose one;
// see Note [Bounded waits] in src/distributed/mpi_communicator.cpp).
double comm_timeout();
void set_comm_timeout(double seconds);
// Ends every process of the job at once: MPI_Abort under MPI (mpirun then
// kills the other ranks), else _exit(code). For an uncaught exception.
[[noreturn]] void abort_job(int code);
// True when this process was started by mpirun (or MPI is already running).
bool started_by_mpi();

}  // namespace mf::distributed
