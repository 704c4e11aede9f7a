// The schedule builders (include/meshflow/distributed/pipelining.h): one
// function per kind orders the compute actions of every rank; one function
// then adds the sends and receives between stages on different ranks.
#include <algorithm>
#include <array>
#include <limits>
#include <sstream>
#include <tuple>

#include "meshflow/distributed/pipelining.h"
#include "meshflow/error.h"

namespace mf::distributed::pipelining {
namespace {

constexpr std::array<const char*, 5> kKindNames = {"gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "zbv"};

using RankLists = std::vector<std::vector<Action>>;

Action act(ActionType type, int stage, int microbatch) { return Action{type, stage, microbatch}; }

// GPipe: every forward, then every backward.
RankLists gpipe(int p, int m) {
  RankLists lists(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < m; ++i) lists[size_t(r)].push_back(act(ActionType::Forward, r, i));
    for (int i = 0; i < m; ++i) lists[size_t(r)].push_back(act(ActionType::Backward, r, i));
  }
  return lists;
}

// 1F1B: rank r runs p-r-1 warm-up forwards, then alternates one forward
// and one backward, then drains the backwards; it holds at most p-r
// micro-batches' activations.
RankLists one_f_one_b(int p, int m) {
  RankLists lists(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& list = lists[size_t(r)];
    int warmup = std::min(p - r - 1, m), f = 0;
    for (; f < warmup; ++f) list.push_back(act(ActionType::Forward, r, f));
    for (int b = 0; b < m; ++b) {
      if (f < m) list.push_back(act(ActionType::Forward, r, f++));
      list.push_back(act(ActionType::Backward, r, b));
    }
  }
  return lists;
}

// Interleaved 1F1B (Megatron-LM's order): rank r holds stages r, r+p, ...
// (v chunks). Micro-batches go in groups of p: each group's forwards run
// through chunk 0, then chunk 1, ...; backwards through the chunks in
// reverse. Warm-up is 2(p-r-1) + (v-1)p forwards, then one forward and one
// backward alternate.
RankLists interleaved(int p, int m, int v) {
  RankLists lists(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    std::vector<Action> forwards, backwards;
    for (int group = 0; group < m; group += p) {
      for (int c = 0; c < v; ++c)
        for (int i = group; i < group + p; ++i) forwards.push_back(act(ActionType::Forward, c * p + r, i));
      for (int c = v - 1; c >= 0; --c)
        for (int i = group; i < group + p; ++i) backwards.push_back(act(ActionType::Backward, c * p + r, i));
    }
    const int n = m * v;
    int warmup = std::min(2 * (p - r - 1) + (v - 1) * p, n), f = 0;
    auto& list = lists[size_t(r)];
    for (; f < warmup; ++f) list.push_back(forwards[size_t(f)]);
    for (int b = 0; b < n; ++b) {
      if (f < n) list.push_back(forwards[size_t(f++)]);
      list.push_back(backwards[size_t(b)]);
    }
  }
  return lists;
}

// Note [Zero-bubble schedules]: the backward is split into I (input
// gradients, which the previous stage waits for) and W (weight gradients,
// which nobody waits for). The order is found by list scheduling with unit
// costs: whenever a rank is free it runs, among the actions whose inputs
// are there, an I first, else a forward (if it holds fewer than `cap`
// micro-batches), else the oldest pending W; among stages the later one
// first, so each micro-batch reaches the loss soon. W thus fills the time
// in which 1F1B waits. With one stage per rank and cap p-r this is ZB-H1
// (1F1B's memory, a bubble of about (p-1)(F+I-W) in place of
// (p-1)(F+I+W)); with two stages per rank in a V (ZBV) the last stage
// sits on rank 0 beside the first, and the bubble nearly vanishes once
// m >= 2p.
RankLists zero_bubble(int p, int m, const std::vector<int>& stage_rank, const std::vector<int>& cap) {
  const int num_stages = int(stage_rank.size());
  std::vector<std::vector<int>> stages(static_cast<size_t>(p));
  for (int s = 0; s < num_stages; ++s) stages[size_t(stage_rank[size_t(s)])].push_back(s);
  const double unset = -1;
  // End times of each (stage, micro-batch)'s F and I.
  std::vector<double> f_end(size_t(num_stages * m), unset), i_end(size_t(num_stages * m), unset);
  auto at = [m](int s, int i) { return size_t(s * m + i); };
  std::vector<int> next_f(size_t(num_stages), 0), next_i(size_t(num_stages), 0), held(size_t(p), 0);
  std::vector<std::vector<std::pair<int, int>>> pending_w(static_cast<size_t>(p));
  std::vector<double> free_at(size_t(p), 0);
  RankLists lists(static_cast<size_t>(p));
  int remaining = 3 * num_stages * m;
  struct Candidate {
    double start;
    int priority;  // 0 I, 1 F, 2 W
    int stage;
    int microbatch;
  };
  while (remaining > 0) {
    int best_rank = -1;
    Candidate best{};
    for (int r = 0; r < p; ++r) {
      std::vector<Candidate> candidates;
      for (int s : stages[size_t(r)]) {
        int i = next_i[size_t(s)];
        if (i < next_f[size_t(s)]) {
          double ready = f_end[at(s, i)];
          double after = s + 1 < num_stages ? i_end[at(s + 1, i)] : 0;
          if (after != unset) candidates.push_back({std::max({free_at[size_t(r)], ready, after}), 0, s, i});
        }
        i = next_f[size_t(s)];
        if (i < m && held[size_t(r)] < cap[size_t(r)]) {
          double after = s > 0 ? f_end[at(s - 1, i)] : 0;
          if (after != unset) candidates.push_back({std::max(free_at[size_t(r)], after), 1, s, i});
        }
      }
      if (!pending_w[size_t(r)].empty()) {
        auto [s, i] = pending_w[size_t(r)].front();
        candidates.push_back({free_at[size_t(r)], 2, s, i});
      }
      if (candidates.empty()) continue;
      double earliest = std::numeric_limits<double>::infinity();
      for (const Candidate& c : candidates) earliest = std::min(earliest, c.start);
      const Candidate* pick = nullptr;
      for (const Candidate& c : candidates) {
        if (c.start > earliest) continue;
        if (pick == nullptr || std::tie(c.priority, pick->stage, c.microbatch) <
                                   std::tie(pick->priority, c.stage, pick->microbatch))
          pick = &c;
      }
      if (best_rank < 0 || pick->start < best.start) {
        best_rank = r;
        best = *pick;
      }
    }
    MF_CHECK(best_rank >= 0, Error, "pipeline schedule: the zero-bubble list scheduler found no action to run (",
             remaining, " left)");
    const double end = best.start + 1;
    free_at[size_t(best_rank)] = end;
    auto& list = lists[size_t(best_rank)];
    if (best.priority == 0) {
      list.push_back(act(ActionType::BackwardInput, best.stage, best.microbatch));
      i_end[at(best.stage, best.microbatch)] = end;
      ++next_i[size_t(best.stage)];
      pending_w[size_t(best_rank)].emplace_back(best.stage, best.microbatch);
    } else if (best.priority == 1) {
      list.push_back(act(ActionType::Forward, best.stage, best.microbatch));
      f_end[at(best.stage, best.microbatch)] = end;
      ++next_f[size_t(best.stage)];
      ++held[size_t(best_rank)];
    } else {
      list.push_back(act(ActionType::BackwardWeight, best.stage, best.microbatch));
      pending_w[size_t(best_rank)].erase(pending_w[size_t(best_rank)].begin());
      --held[size_t(best_rank)];
    }
    --remaining;
  }
  return lists;
}

// Note [Pipeline messages]: a stage's forward needs a receive first when the
// previous stage is on another rank, and its outputs are sent right after it
// when the next one is; the same for backward gradients in the other
// direction. A send returns at once (nonblocking); a receive waits. Stages
// on one rank hand tensors over without messages.
RankLists add_communication(const RankLists& compute, const std::vector<int>& stage_rank) {
  const int num_stages = int(stage_rank.size());
  auto rank_of = [&](int s) { return stage_rank[size_t(s)]; };
  RankLists lists(compute.size());
  for (size_t r = 0; r < compute.size(); ++r) {
    for (const Action& a : compute[r]) {
      const int s = a.stage, i = a.microbatch;
      auto& out = lists[r];
      switch (a.type) {
        case ActionType::Forward:
          if (s > 0 && rank_of(s - 1) != rank_of(s)) out.push_back(act(ActionType::RecvForward, s, i));
          out.push_back(a);
          if (s + 1 < num_stages && rank_of(s + 1) != rank_of(s)) out.push_back(act(ActionType::SendForward, s, i));
          break;
        case ActionType::Backward:
        case ActionType::BackwardInput:
          if (s + 1 < num_stages && rank_of(s + 1) != rank_of(s)) out.push_back(act(ActionType::RecvBackward, s, i));
          out.push_back(a);
          if (s > 0 && rank_of(s - 1) != rank_of(s)) out.push_back(act(ActionType::SendBackward, s, i));
          break;
        default:
          out.push_back(a);
      }
    }
  }
  return lists;
}

}  // namespace

bool Action::is_compute() const {
  return type == ActionType::Forward || type == ActionType::Backward || type == ActionType::BackwardInput ||
         type == ActionType::BackwardWeight;
}

std::string Action::str() const {
  static constexpr const char* names[] = {"F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
  return std::to_string(stage) + names[int(type)] + std::to_string(microbatch);
}

std::string schedule_kind_name(ScheduleKind kind) { return kKindNames[size_t(kind)]; }

ScheduleKind parse_schedule_kind(const std::string& name) {
  for (size_t k = 0; k < kKindNames.size(); ++k)
    if (name == kKindNames[k]) return ScheduleKind(k);
  std::string choices;
  for (const char* n : kKindNames) choices += std::string(choices.empty() ? "" : ", ") + "'" + n + "'";
  throw ValueError(detail::concat("pipeline schedule: expected one of ", choices, ", got '", name, "'"));
}

std::vector<int> Schedule::stages_of(int rank) const {
  std::vector<int> out;
  for (int s = 0; s < num_stages; ++s)
    if (stage_rank[size_t(s)] == rank) out.push_back(s);
  return out;
}

int message_tag(const Action& action) {
  const bool forward = action.type == ActionType::SendForward || action.type == ActionType::RecvForward;
  // A send of stage s is received as stage s+1's RECV_F (or s-1's RECV_B):
  // the tag names the boundary between the two stages and the direction.
  int boundary = 0;
  switch (action.type) {
    case ActionType::SendForward: boundary = action.stage; break;
    case ActionType::RecvForward: boundary = action.stage - 1; break;
    case ActionType::SendBackward: boundary = action.stage - 1; break;
    case ActionType::RecvBackward: boundary = action.stage; break;
    default: throw ValueError("message_tag: " + action.str() + " is not a send or receive");
  }
  return 2 * boundary + (forward ? 0 : 1);
}

Schedule make_schedule(ScheduleKind kind, int num_ranks, int num_microbatches, int stages_per_rank) {
  const std::string name = schedule_kind_name(kind);
  const int p = num_ranks, m = num_microbatches, v = stages_per_rank;
  MF_CHECK(p >= 1, ValueError, "pipeline schedule '", name, "': num_ranks must be at least 1, got ", p);
  MF_CHECK(m >= 1, ValueError, "pipeline schedule '", name, "': n_microbatches must be at least 1, got ", m);
  MF_CHECK(v >= 1, ValueError, "pipeline schedule '", name, "': stages per rank must be at least 1, got ", v);
  // Bounds that keep every count and tag well inside an int.
  MF_CHECK(p <= 4096 && m <= 65536 && v <= 64, ValueError, "pipeline schedule '", name,
           "': at most 4096 ranks, 65536 micro-batches and 64 stages per rank, got ", p, ", ", m, " and ", v);
  const bool one_stage = kind == ScheduleKind::GPipe || kind == ScheduleKind::OneFOneB || kind == ScheduleKind::ZeroBubble;
  MF_CHECK(!one_stage || v == 1, ValueError, "pipeline schedule '", name,
           "' runs one stage per rank, got ", v, " stages per rank (use 'interleaved_1f1b' or 'zbv')");
  MF_CHECK(kind != ScheduleKind::ZBV || v == 2, ValueError,
           "pipeline schedule 'zbv' runs exactly two stages per rank (in a V), got ", v);
  if (kind == ScheduleKind::Interleaved1F1B)
    MF_CHECK(m % p == 0, ValueError, "pipeline schedule 'interleaved_1f1b' needs a number of micro-batches that is a "
             "multiple of the number of ranks (", p, "), got ", m,
             " (the micro-batches run in groups of one per rank; 'gpipe', '1f1b', 'zero_bubble' and 'zbv' take any number)");

  Schedule schedule;
  schedule.kind = kind;
  schedule.num_ranks = p;
  schedule.num_stages = p * v;
  schedule.num_microbatches = m;
  schedule.stage_rank.resize(size_t(p * v));
  for (int s = 0; s < p * v; ++s)
    schedule.stage_rank[size_t(s)] = kind == ScheduleKind::ZBV ? (s < p ? s : 2 * p - 1 - s) : s % p;

  RankLists compute;
  switch (kind) {
    case ScheduleKind::GPipe: compute = gpipe(p, m); break;
    case ScheduleKind::OneFOneB: compute = one_f_one_b(p, m); break;
    case ScheduleKind::Interleaved1F1B: compute = interleaved(p, m, v); break;
    case ScheduleKind::ZeroBubble: {
      std::vector<int> cap(static_cast<size_t>(p));
      for (int r = 0; r < p; ++r) cap[size_t(r)] = p - r;
      compute = zero_bubble(p, m, schedule.stage_rank, cap);
      break;
    }
    case ScheduleKind::ZBV: compute = zero_bubble(p, m, schedule.stage_rank, std::vector<int>(size_t(p), 2 * p)); break;
  }
  schedule.actions = add_communication(compute, schedule.stage_rank);
  simulate(schedule);  // every schedule handed out is proven free of deadlock
  return schedule;
}

std::string Schedule::describe() const {
  SimulationResult sim = simulate(*this);
  std::ostringstream out;
  out << "pipeline schedule '" << schedule_kind_name(kind) << "': " << num_ranks << " rank"
      << (num_ranks == 1 ? "" : "s") << ", " << num_stages << " stage" << (num_stages == 1 ? "" : "s") << ", "
      << num_microbatches << " micro-batch" << (num_microbatches == 1 ? "" : "es") << "\n";
  out.setf(std::ios::fixed);
  out.precision(1);
  out << "simulated with F = I = W = 1 (B = 2): step " << sim.step_time << ", bubble " << 100 * sim.bubble_fraction
      << "%";
  if (kind == ScheduleKind::GPipe || kind == ScheduleKind::OneFOneB || kind == ScheduleKind::Interleaved1F1B)
    out << " (formula " << 100 * formula_bubble(*this) << "%)";
  out << "\n";
  for (int r = 0; r < num_ranks; ++r) {
    out << "rank " << r << ":";
    for (const Action& a : actions[size_t(r)]) out << " " << a.str();
    out << "\n";
  }
  // One column per unit of time; a B takes two.
  out << "timeline (one column per unit of time, '.' idle):\n";
  size_t width = 1;
  for (const auto& rank : sim.timeline)
    for (const TimedAction& t : rank) width = std::max(width, t.action.str().size());
  for (int r = 0; r < num_ranks; ++r) {
    out << "rank " << r << " |";
    double clock = 0;
    for (const TimedAction& t : sim.timeline[size_t(r)]) {
      for (; clock + 1e-9 < t.start; clock += 1) out << " " << std::string(width, '.');
      for (; clock + 1e-9 < t.end; clock += 1) {
        std::string cell = t.action.str();
        out << " " << cell << std::string(width - cell.size(), ' ');
      }
    }
    for (; clock + 1e-9 < sim.step_time; clock += 1) out << " " << std::string(width, '.');
    out << " |\n";
  }
  out << "peak micro-batches of activations per stage:";
  for (int a : sim.peak_activations) out << " " << a;
  out << "\n";
  return out.str();
}

}  // namespace mf::distributed::pipelining
