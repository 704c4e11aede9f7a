// The profiler: timed spans of eager ops, autograd nodes, graph-mode plan
// nodes, collectives, data loading and user-named ranges, collected while a
// session is active (mf.profiler.profile in Python). See Note [Profiler].
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mf::profiler {

// Note [Profiler]
// ~~~~~~~~~~~~~~~
// A session (start() .. stop()) collects Events: a name, a category and the
// span on the monotonic clock, on a small per-thread id. The hooks sit where
// every call of a kind passes once:
//   "op"       dispatch::apply / apply_inplace (eager ops, including those
//              an op's functional form or the global interpreter calls: the
//              spans nest, and a span's self time excludes its children);
//   "autograd" each autograd node's backward;
//   "graph"    each plan node of a compiled graph step, and the step;
//   "comm"     each communicator call (the flight recorder's scope), on
//              whatever thread issued it;
//   "user"     record_function ranges; "data" the DataLoader's batches.
// Outside a session a hook costs one relaxed atomic load. Events are kept
// in one list under a mutex: the hooks of other threads (the graph's
// communication thread, DDP's reduction thread) append to it too.
// The export writes each rank's trace with its rank as the process id and
// the wall-clock time of the monotonic clock's zero, so traces of one job
// merge onto one timeline (python -m meshflow.profiler.merge).

struct Event {
  std::string name;
  const char* category = "op";
  int64_t start_ns = 0;  // steady clock
  int64_t end_ns = 0;
  uint32_t thread = 0;   // thread_id() of the recording thread
  std::vector<std::vector<int64_t>> shapes;  // input shapes, when recorded
  std::string args;                          // free text (a collective's tensor)
};

// Everything a stopped session collected.
struct Trace {
  std::vector<Event> events;                            // by start time
  std::vector<std::pair<uint32_t, std::string>> threads;  // id -> name
  int64_t wall_minus_steady_ns = 0;  // wall clock = steady clock + this
};

namespace detail {
extern std::atomic<bool> g_enabled;
extern std::atomic<bool> g_record_shapes;
}  // namespace detail

inline bool enabled() noexcept { return detail::g_enabled.load(std::memory_order_relaxed); }
inline bool record_shapes() noexcept { return detail::g_record_shapes.load(std::memory_order_relaxed); }

// Starts a session (a ValueError if one is active).
void start(bool record_shapes);
// Ends the session and returns its events (a ValueError if none is active).
Trace stop();
// Pauses or resumes recording within a session (schedules' wait/warmup).
void set_recording(bool on);
bool active();

int64_t now_ns();
// A small id for the calling thread, stable for its life (the first caller
// is 0).
uint32_t thread_id();
// Names the calling thread in traces ("main", "graph comm", ...).
void set_thread_name(std::string name);
void add(Event event);

// A span from construction to destruction, recorded if a session was
// recording at construction.
class Span {
 public:
  Span(const char* category, const char* name) {
    if (enabled()) [[unlikely]] begin(category, name);
  }
  template <class NameFn>
  Span(const char* category, NameFn&& make_name, int) {
    if (enabled()) [[unlikely]] begin(category, make_name());
  }
  ~Span() {
    if (event_) [[unlikely]] end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  bool on() const { return event_.has_value(); }
  // Only while on().
  Event& event() { return *event_; }

 private:
  void begin(const char* category, std::string name);
  void end();
  std::optional<Event> event_;  // empty outside a session: nothing to build
};

}  // namespace mf::profiler
