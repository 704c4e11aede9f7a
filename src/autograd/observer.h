// What the graph tracer learns from the autograd engine while it records a
// backward pass: which autograd node runs. Pipeline stages in graph mode
// (Note [Pipeline schedules in graph mode] in include/meshflow/graph/passes.h)
// attribute each recorded backward op to the stage whose forward made the
// autograd node it belongs to, found by the node's sequence number.
#pragma once

#include <cstdint>

namespace mf::autograd {

// The sequence number the next autograd node will get (sequence numbers
// grow in creation order).
uint64_t next_sequence_nr();

class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  // The engine is about to run the node with this sequence number (its
  // hooks, its backward and the sums of the gradients it produces).
  virtual void node_started(uint64_t sequence_nr) = 0;
  // The pass that ran the nodes has ended.
  virtual void pass_ended() = 0;
};

// Installs the observer of this thread's backward passes (nullptr: none);
// returns the previous one.
BackwardObserver* set_backward_observer(BackwardObserver* observer);

}  // namespace mf::autograd
