// Pipeline schedules as data (docs/pipeline.md).
//
// A schedule is, for every rank, the list of actions it runs in order:
// forward, backward (whole, or split into the input-gradient part I and the
// weight-gradient part W), and the sends and receives between stages on
// different ranks. One builder per schedule kind makes the lists; the
// simulator runs them all without computing anything, which proves that
// they cannot deadlock and gives the bubble and the activation memory.
// Eager mode (meshflow.distributed.pipelining) and graph mode run the
// same lists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mf::distributed::pipelining {

enum class ActionType {
  Forward,         // F: the stage's forward on one micro-batch
  Backward,        // B: its whole backward (I and W at once)
  BackwardInput,   // I: the gradients of the stage's inputs only
  BackwardWeight,  // W: the gradients of its parameters (after I)
  SendForward,     // SEND_F: the stage's outputs to the next stage's rank
  RecvForward,     // RECV_F: the stage's inputs from the previous stage's rank
  SendBackward,    // SEND_B: the gradients of the stage's inputs to the previous stage's rank
  RecvBackward,    // RECV_B: the gradients of the stage's outputs from the next stage's rank
};

struct Action {
  ActionType type;
  int stage;
  int microbatch;
  // As torch.distributed.pipelining prints actions: "0F1" is stage 0's
  // forward on micro-batch 1; "1SEND_B0", "2W3", ...
  std::string str() const;
  bool is_compute() const;
  bool operator==(const Action&) const = default;
};

enum class ScheduleKind { GPipe, OneFOneB, Interleaved1F1B, ZeroBubble, ZBV };

// "gpipe", "1f1b", "interleaved_1f1b", "zero_bubble", "zbv".
std::string schedule_kind_name(ScheduleKind kind);
// The inverse of schedule_kind_name (ValueError naming the choices).
ScheduleKind parse_schedule_kind(const std::string& name);

struct Schedule {
  ScheduleKind kind;
  int num_ranks = 0;
  int num_stages = 0;
  int num_microbatches = 0;
  std::vector<int> stage_rank;               // the rank that runs each stage
  std::vector<std::vector<Action>> actions;  // per rank, in order, communication included

  // The stages of one rank, ascending.
  std::vector<int> stages_of(int rank) const;
  // The schedule per rank as actions and as a timeline of the simulation
  // with unit costs (F = I = W = 1, B = 2), with the bubble and memory.
  std::string describe() const;
};

// How each stage maps to a rank: stage s runs on rank s for GPipe, 1F1B and
// ZeroBubble (num_stages = num_ranks); on rank s % num_ranks for
// Interleaved1F1B ("loop": stages_per_rank chunks each); and in a V for ZBV
// (stage s on rank s, stage 2p-1-s on rank s, exactly two per rank).
// Throws ValueError for sizes the kind cannot schedule (it names the rule).
Schedule make_schedule(ScheduleKind kind, int num_ranks, int num_microbatches, int stages_per_rank = 1);

// The communication tag of an action's messages on the pipeline's channel:
// messages of one (stage, direction) pair arrive in the order they are sent.
int message_tag(const Action& action);

struct SimulationCosts {
  double forward = 1;
  double backward_input = 1;   // I; a whole backward B costs I + W
  double backward_weight = 1;  // W
  double latency = 0;          // from a send's start to the receive's end
  // Per stage, where not empty (one entry per stage): these in place of
  // the three above, for stages of unequal cost.
  std::vector<double> stage_forward, stage_backward_input, stage_backward_weight;
};

struct TimedAction {
  Action action;
  double start;
  double end;
};

struct SimulationResult {
  double step_time = 0;                   // when the last rank ends
  std::vector<double> busy;               // per rank: time computing
  std::vector<double> rank_bubble;        // per rank: 1 - busy / step_time
  double bubble_fraction = 0;             // idle over step time, all ranks together
  std::vector<int> peak_activations;      // per stage: the most micro-batches between F and the end of B (or W)
  std::vector<std::vector<TimedAction>> timeline;  // per rank, compute actions
};

// Runs every rank's list in order: compute takes its cost, a send returns at
// once, a receive waits for its send. Throws ValueError when the lists are
// not a schedule (an action missing, repeated, on the wrong rank, out of
// dependency order, or a message received out of its channel's order) or
// would deadlock (naming the action each rank waits in).
SimulationResult simulate(const Schedule& schedule, const SimulationCosts& costs = {});

// The bubble fraction the formulas give with unit costs: (p-1)/(m+p-1) for
// GPipe and 1F1B and (p-1)/(v m+p-1) for interleaved; for the zero-bubble
// kinds, the simulator's (they have no closed form here).
double formula_bubble(const Schedule& schedule);

}  // namespace mf::distributed::pipelining
