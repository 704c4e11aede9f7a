// Lowering a graph to a plan and running it.
//
// Note [Plans]
// Every buffer a run needs is fixed when the graph is compiled: kernel
// outputs and graph inputs get offsets in one arena (plan_memory), variables
// are the captured tensors themselves, constants are tensors made at compile
// time. So the tensor of every value, views included (a view of a fixed
// buffer is a fixed view), is built once, and a step is a kernel with its
// input and output tensors already in place. A run copies the inputs into
// their arena slots, refreshes the attributes that change between runs
// (learning rates, random offsets), calls the kernels in order and copies
// the outputs out: no allocation and no op lookup per step. A variable whose
// memory was replaced since (Module.to(dtype), `p.data = x`), or optimizer
// state replaced by Optimizer::load_state_dict, is noticed and the plan's
// tensors are built again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "meshflow/graph/ir.h"

namespace mf {
class CapturedWork;
}
namespace mf::distributed {
class JobThread;
class Work;
}

namespace mf::graph {

// Note [Static memory planning]
// A buffer lives from the node that writes it to the last node that reads
// it or any view or in-place successor of it (graph outputs live to the
// end); each kernel's scratch (Note [Kernel scratch] in meshflow/op_def.h)
// lives for the one step that uses it. Buffers and scratch together are
// placed largest first at the lowest arena offset free over their whole
// lifetime, so those whose lifetimes do not overlap share memory.
struct MemoryPlan {
  // Byte offset in the arena of each value that owns a planned buffer
  // (graph inputs and kernel outputs), -1 for the others.
  std::vector<int64_t> offsets;
  // Arena size: the planned peak of the intermediate memory.
  int64_t arena_bytes = 0;
  // What the same buffers would take without reuse.
  int64_t total_bytes = 0;
  // The most bytes live at one time: no placement can need less.
  int64_t live_peak_bytes = 0;
  // [first, last] node index of each planned buffer's lifetime.
  std::vector<std::pair<int32_t, int32_t>> lifetimes;
  // Per node: the bytes of its kernel's scratch and their arena offset (-1
  // both: the kernel takes none). Note [Kernel scratch] in meshflow/op_def.h.
  std::vector<int64_t> scratch_bytes;
  std::vector<int64_t> scratch_offsets;
};

constexpr int64_t kArenaAlignment = 64;

// Note [Overlapping communication]
// A collective node (OpDef::collective: boxing's communication, Note
// [Communication ops] in src/distributed/comm_ops.h) is handed to the
// plan's communication thread, and the steps after it go on while it runs.
// The run waits for it just before its wait node (communication_waits):
// the first later node that reads a buffer it writes (its outputs) or
// writes a buffer it reads or writes (an in-place node), or the end of the
// run. Until then its input and output buffers are in use on the other
// thread, so the memory plan keeps them live up to the wait node: no other
// buffer is placed over them meanwhile. The thread runs collectives in
// program order, so every rank still issues them in the same order, and
// each collective reads and writes the same bits as in a run without
// overlap: the results do not change. Point-to-point messages (comm_send,
// comm_recv: a placement change, pipeline stages) never block the thread:
// a send copies its input and posts an isend at once (its buffer is free
// after the step), waited for at the end of the run; a receive posts an
// irecv into its output and its wait node waits for the message. With
// sends that never block and receives that wait only where their data is
// read, each rank runs its part of a pipeline schedule as the schedule
// simulator assumes (Note [Pipeline schedules in graph mode], passes.h). The thread's waits yield the core
// at once (set_yielding_waits), so that on machines with as many ranks as
// cores the polling does not take the compute's time.

// Per node: for a collective node, the index of its wait node (the node
// count: the end of the run); -1 for other nodes.
std::vector<int32_t> communication_waits(const Graph& graph);

// Per node: the bytes of scratch its kernel asks for (-1: it takes none).
std::vector<int64_t> scratch_bytes(const Graph& graph);

MemoryPlan plan_memory(const Graph& graph);

class Executable {
 public:
  // overlap_communication: run collectives on a communication thread
  // (Note [Overlapping communication]); false runs every step in order.
  explicit Executable(Graph graph, bool overlap_communication = true);
  ~Executable();
  // Runs the plan; inputs must match the traced inputs' shapes, dtypes and
  // devices (a global input: its placement, SBP and global shape, and its
  // local tensor is bound). Returns fresh tensors holding the graph
  // outputs (global outputs as global tensors).
  TensorList run(const TensorList& inputs);

  const Graph& graph() const { return graph_; }
  const MemoryPlan& memory_plan() const { return plan_; }
  int64_t num_steps() const { return int64_t(steps_.size()); }
  // The graph followed by the memory plan's summary.
  std::string str() const;
  // The most bytes of buffers made by forward nodes (PipelineTag) live at
  // once in the memory plan: the activations kept for backward.
  int64_t forward_peak_bytes() const;
  // The buffers live when the most bytes are live (the memory plan's bound),
  // largest first, with the node that writes each: what to recompute or
  // fuse to lower the peak.
  std::string memory_report(int max_rows = 20) const;
  // Timing of runs (off by default): each run then records, for every span
  // of consecutive compute steps with one pipeline tag (a pipeline action:
  // stage, micro-batch, phase), when it started and ended
  // (steady_clock seconds), and the run's total compute time.
  struct TimedSpan {
    PipelineTag tag;
    double start = 0, end = 0;
  };
  void set_timing(bool on) { timing_ = on; }
  // Note [Captured steps] (src/backend/capture.h): with capture on, a plan
  // whose device can record its work, whose steps draw no random numbers
  // and hold no communication, runs its second run's steps as a recording
  // and replays it on later runs (recording again when a learning rate
  // changed or the plan was lowered again). A plan whose kernels cannot be
  // recorded runs step by step. Off by default (nn.Graph's
  // config.enable_cuda_graph()).
  void set_capture(bool on);
  bool capture() const { return capture_; }
  // How many recordings were made (tests, docs/graph.md).
  int64_t num_captures() const { return num_captures_; }
  const std::vector<TimedSpan>& timeline() const { return timeline_; }
  // Runs the plan `runs` times and returns a table of kernel time per op
  // type (by_shape: per op and input shapes), slowest first (what to fuse
  // or speed up next).
  std::string profile(const TensorList& inputs, int runs, bool by_shape = false);

 private:
  struct Step {
    const OpDef* op = nullptr;
    KernelFn kernel;
    TensorList inputs;
    TensorList outputs;
    Attrs attrs;
    int32_t lr_group = -1;
    uint64_t random_counters = 0;
    uint64_t random_position = 0;  // Note [Random counters of a run] in ir.h
    // A collective run on the communication thread: its slot of pending
    // work (-1: runs here).
    int32_t async_slot = -1;
    // Slots to wait for before this step.
    std::vector<int32_t> waits;
    // comm_send / comm_recv: posted, not run (Note [Overlapping communication]).
    bool send = false, recv = false;
    PipelineTag tag;  // the node's (or, for a node a pass made, the step's before)
  };
  void lower();
  // The device of the arena's values (Note [Device-generic graphs]).
  Device arena_device() const;
  // dst = src, by the copy op's kernel of dst's device.
  static void copy_on_device(Tensor& dst, const Tensor& src);
  // Rebinds optimizer state replaced since the last run; true if a
  // variable's tensor or memory changed (the plan must be lowered again).
  bool refresh_variables();
  void bind_inputs(const TensorList& inputs);
  void refresh_attrs(Step& step);
  void run_steps();
  // Runs job on the communication thread and waits (here, without one).
  void on_comm_thread(const std::function<void()>& job);
  // Moves the posted messages on (the communication thread calls it while
  // idle); true while some are outstanding.
  bool poll_messages();

  Graph graph_;
  MemoryPlan plan_;
  Tensor arena_;
  std::vector<Tensor> tensors_;  // per value
  std::vector<Step> steps_;
  // This run's first counter (Note [Random counters of a run] in ir.h).
  int64_t random_base_ = 0;
  // Reserves the run's counters.
  void reserve_random_counters();
  std::vector<const StorageImpl*> variable_storages_;
  bool overlap_communication_ = true;
  // Slots waited for at the end of the run.
  std::vector<int32_t> final_waits_;
  int32_t num_slots_ = 0;
  // Per slot, a posted receive; the sends of this run (under works_mutex_:
  // the communication thread polls them).
  std::mutex works_mutex_;
  std::vector<std::shared_ptr<distributed::Work>> receives_;
  std::vector<std::shared_ptr<distributed::Work>> sends_;
  bool timing_ = false;
  std::vector<TimedSpan> timeline_;
  std::unique_ptr<distributed::JobThread> comm_thread_;
  // Note [Captured steps].
  void run_captured();
  std::vector<double> learning_rates() const;
  bool capture_ = false;
  bool capturable_ = false;  // the plan's steps allow it (lower())
  int64_t plain_runs_ = 0;
  int64_t num_captures_ = 0;
  std::unique_ptr<CapturedWork> captured_;
  std::vector<double> captured_lrs_;
};

}  // namespace mf::graph
