// Note [Block programs]
// A kernel whose threads cooperate through block-shared memory, written
// once for every device's loops L as a program P (a struct both nvcc and
// the host compiler build, its members MF_HOST_DEVICE):
//
//   L::run_blocks(device, n_blocks, threads, shared_bytes, program)
//       runs n_blocks blocks of `threads` threads (at most
//       kMaxBlockThreads), each block with shared_bytes of memory of its
//       own (aligned for any scalar type)
//   P::State                        a thread's own values, kept across the
//                                   phases (registers on CUDA)
//   program.phases(block)           how many phases the block runs
//   program.run(phase, block, thread, state, shared)
//                                   one thread's work in one phase
//
// A block runs phases 0, 1, ... in order, with a barrier after each: what
// a thread writes to `shared` in phase p is seen by every thread of the
// block from phase p + 1 on, and nothing earlier. The number of phases
// depends on the block only, never on the thread, so every thread meets
// every barrier. A thread's State starts uninitialised in each block (the
// first phase sets what it uses), and so does shared memory.
//
// CUDA (backend/cuda/kernels/loops.cuh) runs each block as a thread block,
// the phases separated by __syncthreads(). The emulated device
// (backend/emulated/emulated.h) runs the blocks one after another on the
// host: for each phase every thread in turn, so the barriers hold exactly;
// it fills each block's States and shared memory with NaN bytes first and
// visits the threads in reverse order, so a program that reads what no
// earlier phase wrote, or that relies on the threads' order within a
// phase, gives wrong results there too.
#pragma once

#include <cstdint>

namespace mf {

inline constexpr int kMaxBlockThreads = 1024;

// The largest power of two at most n (n >= 1).
constexpr int64_t floor_power_of_two(int64_t n) {
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

}  // namespace mf
