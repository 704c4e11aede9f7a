// The profiler's session state (Note [Profiler] in meshflow/profiler.h).
#include "meshflow/profiler.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "meshflow/error.h"

namespace mf::profiler {

namespace detail {
std::atomic<bool> g_enabled{false};
std::atomic<bool> g_record_shapes{false};
}  // namespace detail

namespace {

struct Session {
  std::mutex mutex;
  bool active = false;
  std::vector<Event> events;
  std::vector<std::pair<uint32_t, std::string>> threads;  // every named thread, ever
};

Session& session() {
  static Session* s = new Session();  // outlives threads that record at exit
  return *s;
}

std::atomic<uint32_t> g_next_thread{0};

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint32_t thread_id() {
  thread_local uint32_t id = g_next_thread.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void set_thread_name(std::string name) {
  const uint32_t id = thread_id();
  Session& s = session();
  std::lock_guard<std::mutex> guard(s.mutex);
  for (auto& [tid, n] : s.threads)
    if (tid == id) {
      n = std::move(name);
      return;
    }
  s.threads.emplace_back(id, std::move(name));
}

void start(bool shapes) {
  Session& s = session();
  std::lock_guard<std::mutex> guard(s.mutex);
  MF_CHECK(!s.active, ValueError, "profiler: a profiling session is already active (profilers do not nest)");
  s.active = true;
  s.events.clear();
  detail::g_record_shapes.store(shapes, std::memory_order_relaxed);
  detail::g_enabled.store(true, std::memory_order_relaxed);
}

void set_recording(bool on) {
  Session& s = session();
  std::lock_guard<std::mutex> guard(s.mutex);
  MF_CHECK(s.active, ValueError, "profiler: no profiling session is active");
  detail::g_enabled.store(on, std::memory_order_relaxed);
}

bool active() {
  Session& s = session();
  std::lock_guard<std::mutex> guard(s.mutex);
  return s.active;
}

Trace stop() {
  Session& s = session();
  Trace trace;
  {
    std::lock_guard<std::mutex> guard(s.mutex);
    MF_CHECK(s.active, ValueError, "profiler: no profiling session is active");
    s.active = false;
    detail::g_enabled.store(false, std::memory_order_relaxed);
    trace.events.swap(s.events);
    trace.threads = s.threads;
  }
  // Spans end in nesting order; a trace reads in start order.
  std::stable_sort(trace.events.begin(), trace.events.end(), [](const Event& a, const Event& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
  });
  const int64_t wall =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  trace.wall_minus_steady_ns = wall - now_ns();
  return trace;
}

void add(Event event) {
  Session& s = session();
  std::lock_guard<std::mutex> guard(s.mutex);
  // A span begun while recording and ended after stop() is dropped.
  if (s.active) s.events.push_back(std::move(event));
}

void Span::begin(const char* category, std::string name) {
  Event& e = event_.emplace();
  e.name = std::move(name);
  e.category = category;
  e.thread = thread_id();
  e.start_ns = now_ns();
}

void Span::end() {
  event_->end_ns = now_ns();
  add(std::move(*event_));
}

}  // namespace mf::profiler
