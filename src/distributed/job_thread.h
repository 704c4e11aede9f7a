// One thread that runs submitted jobs in the order they were submitted:
// the communication thread of DistributedDataParallel's gradient buckets
// and of the graph executor's collectives. Collectives handed to one
// JobThread keep their order, so every rank still issues them in program
// order. A job's exception reaches the caller through its future.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "meshflow/distributed/communicator.h"
#include "meshflow/profiler.h"

namespace mf::distributed {

class JobThread {
 public:
  // name: the thread's name in profiler traces.
  explicit JobThread(std::string name) : thread_([this, name = std::move(name)] {
    profiler::set_thread_name(name);
    loop();
  }) {}
  // Runs the jobs already submitted, then ends the thread.
  ~JobThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;

  // While no job is queued and poll() returns true (work is outstanding),
  // the thread calls it about every 100 microseconds: point-to-point
  // messages posted without blocking move only while some thread calls
  // into MPI, and the submitting thread computes meanwhile (Note
  // [Overlapping communication] in include/meshflow/graph/executor.h).
  // Set before the first submit.
  void set_idle_poll(std::function<bool()> poll) {
    std::lock_guard<std::mutex> lock(mutex_);
    poll_ = std::move(poll);
  }

  std::future<void> submit(std::function<void()> job) {
    std::packaged_task<void()> task(std::move(job));
    std::future<void> done = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(std::move(task));
    }
    wake_.notify_one();
    return done;
  }

 private:
  void loop() {
    // Its waits share the cores with the compute of the submitting thread.
    set_yielding_waits(true);
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        auto ready = [this] { return stop_ || !jobs_.empty(); };
        while (poll_ && !ready()) {
          lock.unlock();
          const bool outstanding = poll_();
          lock.lock();
          if (!outstanding) break;
          wake_.wait_for(lock, std::chrono::microseconds(100), ready);
        }
        wake_.wait(lock, ready);
        if (jobs_.empty()) return;
        task = std::move(jobs_.front());
        jobs_.pop_front();
      }
      task();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stop_ = false;
  std::function<bool()> poll_;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace mf::distributed
