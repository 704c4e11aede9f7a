// The process's MPI state, which every MPI communicator shares: MPI's
// initialisation and finalisation (each bounded by a watchdog: Note [Bounded
// waits] in mpi_communicator.cpp), the wait limit, the thread level granted
// and the rank among this machine's processes.
#pragma once

#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "meshflow/tensor.h"

namespace mf::distributed {

struct MpiRuntime {
  bool initialized_here = false;  // false when another library called MPI_Init
  bool broken = false;            // some operation timed out (Note [Bounded waits])
  std::string broken_reason;      // what broke it, for later calls' errors
  double timeout_s = 300;
  bool timeout_set = false;       // by set_comm_timeout, which MESHFLOW_COMM_TIMEOUT does not override
  int local_rank = 0;
  bool thread_multiple = true;  // MPI accepts calls from several threads at once
  std::mutex lock;
  std::vector<Tensor> abandoned;  // buffers of timed-out operations
  std::deque<std::vector<int64_t>> message_buffers;  // of sends that are never waited for
};

MpiRuntime& runtime();
// Initialises MPI once per process (collective over the job's ranks).
void initialize_mpi();
// One call at a time when MPI grants less than MPI_THREAD_MULTIPLE.
std::unique_lock<std::mutex> serialize();
// The rank among the processes of this machine (collective without a launcher's variable).
int read_local_rank();

}  // namespace mf::distributed
