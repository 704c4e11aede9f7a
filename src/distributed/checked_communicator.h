// The argument checks every backend shares. CheckedCommunicator implements
// the public calls of Communicator: it checks the arguments (naming the
// collective, the argument, what was expected and what came) and then calls
// the backend's run_* function, which may assume the checks hold.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/job_thread.h"
#include "meshflow/distributed/communicator.h"

namespace mf::distributed {

// The offset of each rank's rows: offsets[r] = counts[0] + ... + counts[r-1].
std::vector<int64_t> row_offsets(const std::vector<int64_t>& counts);
// The elements of one dim-0 row of t (the product of t.shape[1:]).
int64_t row_numel(const Tensor& t);
const char* reduce_op_name(ReduceOp op);
// "[0, 1, 3]"
std::string format_ranks(const std::vector<int>& ranks);

class CheckedCommunicator : public Communicator {
 public:
  void all_reduce(Tensor& t, ReduceOp op) final;
  void broadcast(Tensor& t, int root) final;
  void all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) final;
  void reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts, ReduceOp op) final;
  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                  const std::vector<int64_t>& recv_counts) final;
  void send(const Tensor& t, int dst, int tag) final;
  void recv(Tensor& t, int src, int tag) final;
  std::shared_ptr<Work> isend(const Tensor& t, int dst, int tag) final;
  std::shared_ptr<Work> irecv(Tensor& t, int src, int tag) final;
  void barrier() final;
  std::shared_ptr<Work> all_reduce_async(Tensor& t, ReduceOp op) final;
  std::shared_ptr<Work> broadcast_async(Tensor& t, int root) final;
  std::shared_ptr<Work> all_gather_async(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) final;
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                                             ReduceOp op) final;
  std::shared_ptr<Work> all_to_all_async(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                                         const std::vector<int64_t>& recv_counts) final;
  std::shared_ptr<Work> barrier_async() final;
  std::shared_ptr<Communicator> subgroup(const std::vector<int>& ranks) final;
  ~CheckedCommunicator() override;

 protected:
  // Waits for the queued collectives (Note [Asynchronous collectives]) and
  // ends their thread; a backend's destructor calls it before it frees
  // what they use.
  void stop_queue();
  virtual void run_all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual void run_broadcast(Tensor& t, int root) = 0;
  virtual void run_all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts) = 0;
  virtual void run_reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                                  ReduceOp op) = 0;
  virtual void run_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                              const std::vector<int64_t>& recv_counts) = 0;
  virtual void run_send(const Tensor& t, int dst, int tag) = 0;
  virtual void run_recv(Tensor& t, int src, int tag) = 0;
  virtual std::shared_ptr<Work> run_isend(const Tensor& t, int dst, int tag) = 0;
  virtual std::shared_ptr<Work> run_irecv(Tensor& t, int src, int tag) = 0;
  virtual void run_barrier() = 0;
  // ranks: checked (ascending group ranks, this rank among them); the
  // result is cached by subgroup().
  virtual std::shared_ptr<Communicator> create_subgroup(const std::vector<int>& ranks) = 0;
  // The largest tag send/recv accept.
  virtual int max_tag() const = 0;
  // Where the tensors of this group's calls live (NCCL groups: CUDA).
  virtual DeviceType tensor_device_type() const { return DeviceType::CPU; }

 private:
  void check_point_to_point(const char* name, const Tensor& t, int peer, int tag);
  // The argument checks of each collective.
  void check_all_reduce(const Tensor& t);
  void check_broadcast(const Tensor& t, int root);
  void check_all_gather(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts);
  void check_reduce_scatter(const Tensor& in, const Tensor& out, const std::vector<int64_t>& counts);
  void check_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                        const std::vector<int64_t>& recv_counts);
  // Queues run on the communicator's thread; keep: the tensors it uses.
  std::shared_ptr<Work> enqueue(std::function<void()> run, TensorList keep);
  // Waits until the queued collectives have run (blocking calls do this first).
  void drain();
  std::mutex queue_mutex_;
  std::unique_ptr<JobThread> queue_;
  std::shared_future<void> last_;
  std::mutex subgroups_mutex_;
  std::vector<std::pair<std::vector<int>, std::shared_ptr<Communicator>>> subgroups_;
};

// A group of one process: collectives check their arguments and copy.
std::unique_ptr<Communicator> make_single_communicator();
// The world group over MPI (initialises MPI on first use).
std::unique_ptr<Communicator> make_mpi_world();
// The rank among this machine's processes, for the MPI world.
int mpi_local_rank();

}  // namespace mf::distributed
