#include "distributed/flight_recorder.h"

#include <sstream>

namespace mf::distributed {

FlightRecorder::Scope::Scope(FlightRecorder& recorder, const char* name, bool collective, std::string what)
    : recorder_(recorder), span_("comm", name) {
  if (span_.on()) [[unlikely]]
    span_.event().args = what;
  std::lock_guard<std::mutex> guard(recorder.mutex_);
  id_ = ++recorder.calls_;
  Record& rec = recorder.records_[(id_ - 1) % kRecords];
  rec = Record{id_, collective ? ++recorder.collectives_ : 0, name, std::move(what), Clock::now(), -1};
  recorder.current_name_ = name;
  recorder.current_seq_ = rec.seq ? rec.seq : recorder.collectives_;
}

FlightRecorder::Scope::~Scope() {
  std::lock_guard<std::mutex> guard(recorder_.mutex_);
  Record& rec = recorder_.records_[(id_ - 1) % kRecords];
  if (rec.id == id_) rec.seconds = std::chrono::duration<double>(Clock::now() - rec.start).count();
}

std::pair<uint64_t, const char*> FlightRecorder::current() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return {current_seq_, current_name_};
}

std::string FlightRecorder::dump(const std::string& who) const {
  std::ostringstream out;
  std::lock_guard<std::mutex> guard(mutex_);
  const uint64_t first = calls_ > kRecords ? calls_ - kRecords + 1 : 1;
  out << "meshflow.distributed flight record of " << who << ": the last " << (calls_ - first + 1) << " of its "
      << calls_ << " calls on this group, oldest first\n";
  for (uint64_t id = first; id <= calls_; ++id) {
    const Record& rec = records_[(id - 1) % kRecords];
    if (rec.id != id) continue;
    out << "  " << (rec.seq ? "#" + std::to_string(rec.seq) : std::string("p2p")) << " " << rec.name;
    if (!rec.what.empty()) out << " " << rec.what;
    if (rec.seconds >= 0)
      out << ": done in " << rec.seconds << " s\n";
    else
      out << ": NOT COMPLETED after " << std::chrono::duration<double>(Clock::now() - rec.start).count() << " s\n";
  }
  return out.str();
}

}  // namespace mf::distributed
