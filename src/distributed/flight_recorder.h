// The flight recorder of a communicator (Note [Timeout report] in
// mpi_communicator.cpp): the last kRecords calls, with their arguments and
// durations, and the call in progress, as PyTorch's NCCL flight recorder.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "meshflow/profiler.h"

namespace mf::distributed {

class FlightRecorder {
 public:
  static constexpr size_t kRecords = 32;

  // Records one call for its lifetime (RAII).
  class Scope {
   public:
    Scope(FlightRecorder& recorder, const char* name, bool collective, std::string what);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    FlightRecorder& recorder_;
    uint64_t id_ = 0;
    profiler::Span span_;  // the call's span in a profiler trace
  };

  // (collectives so far, name) of the latest call begun.
  std::pair<uint64_t, const char*> current() const;
  // The records, oldest first, under a first line naming `who`.
  std::string dump(const std::string& who) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Record {
    uint64_t id = 0;   // 1 + the index of the record among all calls (0: slot unused)
    uint64_t seq = 0;  // collectives so far, this one included (0: not a collective)
    const char* name = "";
    std::string what;
    Clock::time_point start;
    double seconds = -1;  // -1 while in flight
  };

  mutable std::mutex mutex_;
  std::array<Record, kRecords> records_{};
  uint64_t calls_ = 0;
  uint64_t collectives_ = 0;
  uint64_t current_seq_ = 0;
  const char* current_name_ = "";
};

}  // namespace mf::distributed
