// The process's MPI state (mpi_runtime.h).
#include "distributed/mpi_runtime.h"

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "distributed/checked_communicator.h"
#include "meshflow/distributed/communicator.h"
#include "meshflow/error.h"

namespace mf::distributed {
namespace {

double read_timeout() {
  const char* text = std::getenv("MESHFLOW_COMM_TIMEOUT");
  if (text == nullptr || *text == '\0') return 300;
  char* end = nullptr;
  double seconds = std::strtod(text, &end);
  MF_CHECK(end != text && *end == '\0' && seconds > 0, ValueError,
           "MESHFLOW_COMM_TIMEOUT must be a positive number of seconds, got '", text, "'");
  return seconds;
}

// MPI_Init waits for every rank of the job, and a rank that ends without
// initialising MPI (a script that returns early, before any collective)
// never comes, even to mpirun's notice; MPI_Finalize waits for every rank
// too. Neither wait has a timeout of its own, so a watchdog thread ends the
// process after MESHFLOW_COMM_TIMEOUT seconds with a message, and mpirun then
// ends the job (Note [Bounded waits]).
class Watchdog {
 public:
  Watchdog(double timeout_s, const char* what)
      : thread_([this, timeout_s, what] {
          std::unique_lock<std::mutex> guard(mutex_);
          if (done_changed_.wait_for(guard, std::chrono::duration<double>(timeout_s), [this] { return done_; }))
            return;
          std::fprintf(stderr,
                       "meshflow.distributed: %s did not complete within %g s on this process: another rank of "
                       "the job exited early, is stuck, or never used meshflow.distributed (every rank must); "
                       "MESHFLOW_COMM_TIMEOUT sets the limit in seconds\n",
                       what, timeout_s);
          std::fflush(stderr);
          std::_Exit(1);
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      done_ = true;
    }
    done_changed_.notify_one();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

void finalize_mpi() {
  MpiRuntime& r = runtime();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!r.initialized_here || finalized) return;
  if (r.broken) {
    std::fprintf(stderr, "meshflow.distributed: %s on this rank; aborting the job\n", r.broken_reason.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  Watchdog watchdog(r.timeout_s, "MPI finalisation at exit");
  MPI_Finalize();
}

}  // namespace

MpiRuntime& runtime() {
  static MpiRuntime r;
  return r;
}

// The launchers' variables (Open MPI, MPICH, Slurm); without one, the rank
// among the processes that share memory with this one (collective).
int read_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* text = std::getenv(name)) return std::atoi(text);
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) return 0;
  int rank = 0;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  return rank;
}

void initialize_mpi() {
  static std::once_flag once;
  std::call_once(once, [] {
    MpiRuntime& r = runtime();
    if (!r.timeout_set) r.timeout_s = read_timeout();
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      int provided = 0;
      MPI_Query_thread(&provided);
      r.thread_multiple = provided >= MPI_THREAD_MULTIPLE;
      return;
    }
    // Note [In-place all_reduce]: Open MPI's nonblocking all-reduce (libnbc)
    // picks a binomial tree (reduce to one rank, then broadcast) for every
    // in-place call and for fewer than 4 ranks, which halves the bandwidth
    // of large tensors against the blocking MPI_Allreduce (bench/comm.cpp:
    // 0.4 vs 0.8 GB/s at 64 MiB). Reduce-scatter + all-gather (3) matches it;
    // libnbc falls back to the tree where that algorithm does not apply. A
    // value the user set wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
    int provided = 0;
    int code = 0;
    {
      Watchdog watchdog(r.timeout_s, "MPI initialisation");
      code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    }
    MF_CHECK(code == MPI_SUCCESS, DistributedError, "MPI_Init_thread failed with code ", code);
    // Below MPI_THREAD_MULTIPLE, each call holds runtime().lock (see serialize()).
    MF_CHECK(provided >= MPI_THREAD_SERIALIZED, DistributedError,
             "MPI_Init_thread: the MPI library grants thread level ", provided,
             ", meshflow needs MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED, ") or more");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    r.thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    r.initialized_here = true;
    std::atexit(finalize_mpi);
  });
}

// One call at a time when MPI grants less than MPI_THREAD_MULTIPLE (two
// threads then take turns; with MULTIPLE, a thread waiting in recv does not
// hold up another thread's send).
std::unique_lock<std::mutex> serialize() {
  MpiRuntime& r = runtime();
  std::unique_lock<std::mutex> guard(r.lock, std::defer_lock);
  if (!r.thread_multiple) guard.lock();
  return guard;
}

bool started_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name) != nullptr) return true;
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

void set_comm_timeout(double seconds) {
  MF_CHECK(seconds > 0 && seconds < 1e9, ValueError, "init_process_group: timeout must be a positive number of "
           "seconds below 1e9, got ", seconds);
  MpiRuntime& r = runtime();
  r.timeout_s = seconds;
  r.timeout_set = true;
}

double comm_timeout() {
  MpiRuntime& r = runtime();
  return r.timeout_set ? r.timeout_s : read_timeout();
}

void abort_job(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  std::fflush(stdout);
  std::fflush(stderr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

int mpi_local_rank() {
  world();
  return runtime().local_rank;
}

}  // namespace mf::distributed
