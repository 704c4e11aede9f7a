// The CPU kernels of the communication ops (src/distributed/comm_ops.cpp,
// Note [Communication ops] in comm_ops.h): each calls the communicator of
// its group on contiguous host memory. On a device they run host-staged
// (Note [Host-staged kernels] in backend/common/host_staged.h).
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "backend/cpu/kernels/dense_scratch.h"
#include "backend/cpu/kernels/loops.h"
#include "meshflow/distributed/boxing.h"
#include "meshflow/distributed/communicator.h"
#include "meshflow/op_def.h"

namespace mf::distributed {
namespace {

std::vector<int> group_of(const Attrs& attrs) {
  const Shape& g = attrs.get_shape("group");
  return std::vector<int>(g.begin(), g.end());
}

Communicator& group_comm(const Attrs& attrs) { return *world().subgroup(group_of(attrs)); }

// The communicator reads contiguous memory: a strided input is copied
// into the kernel's scratch (cpu::dense_inputs_scratch of input 0).
Tensor contiguous_input(const Tensor& t, TensorList& out) {
  Scratch taken(out);
  return cpu::dense(t, taken);
}

// Test hooks (set_test_comm_delay): a sleep before the collective.
std::atomic<double> g_gather_delay{0}, g_reduce_scatter_delay{0};

void test_delay(const std::atomic<double>& seconds) {
  const double s = seconds.load(std::memory_order_relaxed);
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

void all_reduce_kernel(const TensorList& in, TensorList& out, const Attrs& attrs) {
  cpu::copy_cast(out[0], in[0]);
  group_comm(attrs).all_reduce(out[0]);
}

}  // namespace

void set_test_comm_delay(const std::string& kind, double seconds) {
  MF_CHECK(seconds >= 0 && seconds <= 60, ValueError, "set_test_comm_delay: seconds must be in [0, 60], got ", seconds);
  if (kind == "all_gather") g_gather_delay = seconds;
  else if (kind == "reduce_scatter") g_reduce_scatter_delay = seconds;
  else throw ValueError("set_test_comm_delay: kind must be 'all_gather' or 'reduce_scatter', got '" + kind + "'");
}

MF_REGISTER_KERNEL("comm_all_reduce", DeviceType::CPU, all_reduce_kernel);
MF_REGISTER_KERNEL("all_reduce_sum", DeviceType::CPU, all_reduce_kernel);
MF_REGISTER_KERNEL("comm_all_gather", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  test_delay(g_gather_delay);
  group_comm(attrs).all_gather(contiguous_input(in[0], out), out[0], attrs.get_shape("counts"));
}, cpu::dense_inputs_scratch("comm_all_gather", {0}));
MF_REGISTER_KERNEL("comm_reduce_scatter", DeviceType::CPU,
                   [](const TensorList& in, TensorList& out, const Attrs& attrs) {
                     test_delay(g_reduce_scatter_delay);
                     group_comm(attrs).reduce_scatter(contiguous_input(in[0], out), out[0],
                                                      attrs.get_shape("counts"));
                   },
                   cpu::dense_inputs_scratch("comm_reduce_scatter", {0}));
MF_REGISTER_KERNEL("comm_all_to_all", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  group_comm(attrs).all_to_all(contiguous_input(in[0], out), attrs.get_shape("send_counts"), out[0],
                               attrs.get_shape("recv_counts"));
}, cpu::dense_inputs_scratch("comm_all_to_all", {0}));
MF_REGISTER_KERNEL("comm_send", DeviceType::CPU, [](const TensorList& in, TensorList& out, const Attrs& attrs) {
  world().send(contiguous_input(in[0], out), int(attrs.get_int("dst")), int(attrs.get_int("tag")));
}, cpu::dense_inputs_scratch("comm_send", {0}));
MF_REGISTER_KERNEL("comm_recv", DeviceType::CPU, [](const TensorList&, TensorList& out, const Attrs& attrs) {
  world().recv(out[0], int(attrs.get_int("src")), int(attrs.get_int("tag")));
});

}  // namespace mf::distributed
