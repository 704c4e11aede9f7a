// The schedule simulator (include/meshflow/distributed/pipelining.h).
//
// Note [Schedule simulation]: every rank runs its list in order, as the
// executors do. A compute action starts when the rank is free and the
// tensors it needs are there: F(s, i) needs stage s-1's F(s-1, i) (on this
// rank) or the RECV_F(s, i) before it; I or B(s, i) needs F(s, i) and
// stage s+1's I/B (on this rank) or RECV_B(s, i); W(s, i) needs I(s, i). A
// send needs its producer done and costs the rank nothing; a receive
// waits until its message was sent (plus the latency) and must take the
// oldest message of its channel (MPI keeps the order of one source and
// tag). When no rank can go on before every list is done, the lists would
// deadlock: the error names what each rank waits in.
#include <algorithm>
#include <deque>
#include <map>
#include <sstream>

#include "meshflow/distributed/pipelining.h"
#include "meshflow/error.h"

namespace mf::distributed::pipelining {
namespace {

double cost(const Action& a, const SimulationCosts& c) {
  auto pick = [&a](const std::vector<double>& per_stage, double uniform) {
    return per_stage.empty() ? uniform : per_stage[size_t(a.stage)];
  };
  const double f = pick(c.stage_forward, c.forward), i = pick(c.stage_backward_input, c.backward_input),
               w = pick(c.stage_backward_weight, c.backward_weight);
  switch (a.type) {
    case ActionType::Forward: return f;
    case ActionType::Backward: return i + w;
    case ActionType::BackwardInput: return i;
    case ActionType::BackwardWeight: return w;
    default: return 0;
  }
}

struct Key {
  ActionType type;
  int stage, microbatch;
  auto operator<=>(const Key&) const = default;
};

Key key(ActionType t, int s, int i) { return Key{t, s, i}; }

}  // namespace

SimulationResult simulate(const Schedule& schedule, const SimulationCosts& costs) {
  const int p = schedule.num_ranks, S = schedule.num_stages, m = schedule.num_microbatches;
  const std::string name = "pipeline schedule '" + schedule_kind_name(schedule.kind) + "'";
  MF_CHECK(int(schedule.actions.size()) == p && int(schedule.stage_rank.size()) == S, ValueError, name,
           ": expected action lists for ", p, " ranks and a rank for each of ", S, " stages, got ",
           schedule.actions.size(), " and ", schedule.stage_rank.size());
  for (int s = 0; s < S; ++s)
    MF_CHECK(schedule.stage_rank[size_t(s)] >= 0 && schedule.stage_rank[size_t(s)] < p, ValueError, name, ": stage ", s,
             " is on rank ", schedule.stage_rank[size_t(s)], ", expected one in [0, ", p, ")");
  auto rank_of = [&](int s) { return schedule.stage_rank[size_t(s)]; };
  for (const auto* per_stage : {&costs.stage_forward, &costs.stage_backward_input, &costs.stage_backward_weight})
    MF_CHECK(per_stage->empty() || int(per_stage->size()) == S, ValueError, name,
             ": per-stage costs need one value per stage (", S, "), got ", per_stage->size());

  // Every action is well formed, on its stage's rank, and appears once.
  std::map<Key, int> seen;
  for (int r = 0; r < p; ++r)
    for (const Action& a : schedule.actions[size_t(r)]) {
      MF_CHECK(a.stage >= 0 && a.stage < S && a.microbatch >= 0 && a.microbatch < m, ValueError, name, ": rank ", r,
               " has action ", a.str(), " outside ", S, " stages and ", m, " micro-batches");
      MF_CHECK(rank_of(a.stage) == r, ValueError, name, ": rank ", r, " has action ", a.str(), " of stage ", a.stage,
               ", which is on rank ", rank_of(a.stage));
      MF_CHECK(seen[key(a.type, a.stage, a.microbatch)]++ == 0, ValueError, name, ": action ", a.str(),
               " appears more than once");
      const bool to_next = a.type == ActionType::SendForward || a.type == ActionType::RecvBackward;
      const bool to_previous = a.type == ActionType::RecvForward || a.type == ActionType::SendBackward;
      if (to_next)
        MF_CHECK(a.stage + 1 < S && rank_of(a.stage + 1) != r, ValueError, name, ": ", a.str(),
                 " on rank ", r, " has no next stage on another rank");
      if (to_previous)
        MF_CHECK(a.stage > 0 && rank_of(a.stage - 1) != r, ValueError, name, ": ", a.str(), " on rank ", r,
                 " has no previous stage on another rank");
    }
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < m; ++i) {
      MF_CHECK(seen.count(key(ActionType::Forward, s, i)), ValueError, name, ": forward ", s, "F", i, " is missing");
      const bool whole = seen.count(key(ActionType::Backward, s, i)) > 0;
      const bool split = seen.count(key(ActionType::BackwardInput, s, i)) > 0;
      const bool weight = seen.count(key(ActionType::BackwardWeight, s, i)) > 0;
      MF_CHECK(whole != split && split == weight, ValueError, name, ": stage ", s, " micro-batch ", i,
               " needs either one B or one I and one W, got ", whole ? "B " : "", split ? "I " : "",
               weight ? "W" : "");
      const bool remote_previous = s > 0 && rank_of(s - 1) != rank_of(s);
      const bool remote_next = s + 1 < S && rank_of(s + 1) != rank_of(s);
      MF_CHECK(seen.count(key(ActionType::RecvForward, s, i)) == size_t(remote_previous) &&
                   seen.count(key(ActionType::SendBackward, s, i)) == size_t(remote_previous) &&
                   seen.count(key(ActionType::SendForward, s, i)) == size_t(remote_next) &&
                   seen.count(key(ActionType::RecvBackward, s, i)) == size_t(remote_next),
               ValueError, name, ": stage ", s, " micro-batch ", i,
               " lacks a send or receive to a neighbouring stage on another rank (or has one it cannot have)");
    }

  SimulationResult result;
  result.busy.assign(size_t(p), 0);
  result.timeline.resize(size_t(p));
  result.peak_activations.assign(size_t(S), 0);
  std::vector<int> held(size_t(S), 0);
  std::map<Key, double> done;  // end times
  // Messages in flight per channel (tag, receiving stage direction): the
  // micro-batches in the order sent, with arrival times.
  std::map<std::pair<int, int>, std::deque<std::pair<int, double>>> channels;  // (tag, to rank)
  std::vector<size_t> next(size_t(p), 0);
  std::vector<double> clock(size_t(p), 0);

  auto ready_time = [&](const Key& k, double& t) {
    auto it = done.find(k);
    if (it == done.end()) return false;
    t = std::max(t, it->second);
    return true;
  };
  // Why the action at the head of rank r cannot run (empty: it can), and
  // its start time in `start`.
  auto blocked = [&](int r, const Action& a, double& start) -> std::string {
    start = clock[size_t(r)];
    const int s = a.stage, i = a.microbatch;
    auto need = [&](const Key& k, const std::string& what) -> std::string {
      return ready_time(k, start) ? std::string() : what;
    };
    switch (a.type) {
      case ActionType::Forward:
        if (s == 0) return {};
        if (rank_of(s - 1) == r) return need(key(ActionType::Forward, s - 1, i), "forward of stage " + std::to_string(s - 1));
        return need(key(ActionType::RecvForward, s, i), "its RECV_F");
      case ActionType::Backward:
      case ActionType::BackwardInput: {
        std::string why = need(key(ActionType::Forward, s, i), "its forward");
        if (!why.empty() || s + 1 == S) return why;
        if (rank_of(s + 1) != r) return need(key(ActionType::RecvBackward, s, i), "its RECV_B");
        double t = start;
        if (ready_time(key(ActionType::Backward, s + 1, i), t) || ready_time(key(ActionType::BackwardInput, s + 1, i), t)) {
          start = t;
          return {};
        }
        return "backward of stage " + std::to_string(s + 1);
      }
      case ActionType::BackwardWeight: return need(key(ActionType::BackwardInput, s, i), "its I");
      case ActionType::SendForward: return need(key(ActionType::Forward, s, i), "its forward");
      case ActionType::SendBackward: {
        double t = start;
        if (ready_time(key(ActionType::Backward, s, i), t) || ready_time(key(ActionType::BackwardInput, s, i), t))
          return {};
        return "its backward";
      }
      case ActionType::RecvForward:
      case ActionType::RecvBackward: {
        auto& channel = channels[{message_tag(a), r}];
        if (channel.empty()) return "a message that was not sent";
        MF_CHECK(channel.front().first == i, ValueError, name, ": rank ", r, " receives ", a.str(),
                 " while the oldest message on its channel is micro-batch ", channel.front().first,
                 " (messages of one channel arrive in the order they are sent)");
        start = std::max(start, channel.front().second);
        return {};
      }
    }
    return {};
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& list = schedule.actions[size_t(r)];
      while (next[size_t(r)] < list.size()) {
        const Action& a = list[next[size_t(r)]];
        double start = 0;
        if (!blocked(r, a, start).empty()) break;
        const double end = start + cost(a, costs);
        const int s = a.stage;
        if (a.type == ActionType::SendForward || a.type == ActionType::SendBackward) {
          const int to = rank_of(a.type == ActionType::SendForward ? s + 1 : s - 1);
          channels[{message_tag(a), to}].emplace_back(a.microbatch, start + costs.latency);
        } else if (a.type == ActionType::RecvForward || a.type == ActionType::RecvBackward) {
          channels[{message_tag(a), r}].pop_front();
        }
        if (a.is_compute()) {
          result.timeline[size_t(r)].push_back({a, start, end});
          result.busy[size_t(r)] += end - start;
          if (a.type == ActionType::Forward)
            result.peak_activations[size_t(s)] = std::max(result.peak_activations[size_t(s)], ++held[size_t(s)]);
          if (a.type == ActionType::Backward || a.type == ActionType::BackwardWeight) --held[size_t(s)];
        }
        done[key(a.type, s, a.microbatch)] = end;
        clock[size_t(r)] = end;
        ++next[size_t(r)];
        progress = true;
      }
    }
  }
  std::ostringstream stuck;
  for (int r = 0; r < p; ++r) {
    const auto& list = schedule.actions[size_t(r)];
    if (next[size_t(r)] == list.size()) continue;
    double start = 0;
    const Action& a = list[next[size_t(r)]];
    stuck << (stuck.tellp() > 0 ? "; " : "") << "rank " << r << " waits in " << a.str() << " for "
          << blocked(r, a, start);
  }
  MF_CHECK(stuck.tellp() == 0, ValueError, name, ": the action lists deadlock: ", stuck.str());

  for (int r = 0; r < p; ++r) result.step_time = std::max(result.step_time, clock[size_t(r)]);
  double idle = 0;
  result.rank_bubble.resize(size_t(p));
  for (int r = 0; r < p; ++r) {
    const double b = result.step_time > 0 ? 1 - result.busy[size_t(r)] / result.step_time : 0;
    result.rank_bubble[size_t(r)] = b;
    idle += result.step_time - result.busy[size_t(r)];
  }
  result.bubble_fraction = result.step_time > 0 ? idle / (p * result.step_time) : 0;
  return result;
}

double formula_bubble(const Schedule& schedule) {
  const double p = schedule.num_ranks, m = schedule.num_microbatches, v = double(schedule.num_stages) / p;
  switch (schedule.kind) {
    case ScheduleKind::GPipe:
    case ScheduleKind::OneFOneB: return (p - 1) / (m + p - 1);
    case ScheduleKind::Interleaved1F1B: return (p - 1) / (v * m + p - 1);
    default: return simulate(schedule).bubble_fraction;
  }
}

}  // namespace mf::distributed::pipelining
