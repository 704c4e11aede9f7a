// Note [Host-staged kernels]: an op whose work is on the host by nature
// runs on a device through its CPU kernel, with its device operands staged
// through host memory:
//   - the collectives (comm_*, all_reduce_sum) over the MPI communicator,
//     as a CPU communication library serves device tensors (gloo does the
//     same for CUDA tensors);
//   - the sharded embeddings (one_embedding_*), whose tables live in host
//     memory or on disk (OneFlow's host-memory and SSD stores serve a GPU
//     so): the keys come to the host, the looked-up rows go back.
// The kernel copies every device input to a host tensor, gives the CPU
// kernel host outputs (an output that aliases an input, an in-place call,
// shares that input's host copy), runs it, then copies the outputs and the
// inputs the op writes (OpDef::mutates) back. The copies wait for the
// device, so these ops synchronise their stream. The host buffers are
// outside a graph's device memory plan; the device buffers are the
// caller's, as for every kernel.
#pragma once

#include "meshflow/op_def.h"

namespace mf::host_staged {

// The host-staged kernel of op `name` on a device: its CPU kernel over host
// copies (the op is looked up when the kernel runs).
KernelFn kernel(const std::string& name);

// Sets the host-staged kernel of each such op (the collectives, the
// sharded embeddings' ops) on `device`.
void register_all(DeviceType device);

}  // namespace mf::host_staged
