// Collective bandwidth: meshflow's Communicator against the direct blocking
// MPI call on the same buffers, measured alternately in one run. Run under
// mpirun (`mpirun -np 2 build/bench/bench_comm`; see bench/README.md).
// For all_reduce, all_gather and reduce_scatter of float32 tensors of 1, 16
// and 64 MiB it prints the median bandwidth of each side over 9 sample pairs
// (order alternating, each sample between barriers) and the median of the
// per-pair ratios direct time / meshflow time (aim >= 0.95). Bandwidth is
// the tensor's size over the time: the all_reduce tensor, the all_gather
// output, the reduce_scatter input.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "meshflow/distributed/communicator.h"
#include "meshflow/meshflow.h"

namespace dist = mf::distributed;

namespace {

// Every rank runs fn iters times between two barriers; rank 0's clock counts.
double seconds_per_call(const std::function<void()>& fn, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) fn();
  MPI_Barrier(MPI_COMM_WORLD);
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / iters;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Case {
  std::string name;
  std::function<void()> run_mf;
  std::function<void()> run_direct;
  double bytes;
};

void measure(const Case& c, int rank) {
  // The same number of calls on every rank: rank 0 decides (about 0.1 s per sample).
  double once = seconds_per_call(c.run_direct, 1);
  int iters = std::max(1, int(0.1 / std::max(once, 1e-6)));
  MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
  seconds_per_call(c.run_mf, iters);
  std::vector<double> mf_times, direct_times, ratios;
  for (int s = 0; s < 9; ++s) {
    double t_mf, t_direct;
    if (s % 2 == 0) {
      t_mf = seconds_per_call(c.run_mf, iters);
      t_direct = seconds_per_call(c.run_direct, iters);
    } else {
      t_direct = seconds_per_call(c.run_direct, iters);
      t_mf = seconds_per_call(c.run_mf, iters);
    }
    mf_times.push_back(t_mf);
    direct_times.push_back(t_direct);
    ratios.push_back(t_direct / t_mf);
  }
  if (rank == 0)
    std::printf("%-15s %6.0f %12.2f %12.2f %8.3f\n", c.name.c_str(), c.bytes / (1 << 20),
                c.bytes / median(mf_times) / 1e9, c.bytes / median(direct_times) / 1e9, median(ratios));
}

}  // namespace

int main() {
  dist::Communicator& world = dist::world();  // initialises MPI
  const int rank = world.rank(), size = world.size();
  if (rank == 0) {
    std::printf("float32 collectives over %d ranks (%s backend), median of 9 alternating sample pairs\n", size,
                world.backend().c_str());
    std::printf("%-15s %6s %12s %12s %8s\n", "collective", "MiB", "mf GB/s", "MPI GB/s", "ratio");
  }
  if (world.backend() != "mpi") {
    std::printf("run under mpirun: the direct side needs MPI\n");
    return 1;
  }
  for (int64_t mib : {1, 16, 64}) {
    const int64_t n = mib * (1 << 20) / 4;  // float32 elements of the full tensor
    const int64_t part = n / size;
    std::vector<int64_t> counts(size_t(size), part);
    std::vector<int> int_counts(static_cast<size_t>(size), static_cast<int>(part));

    mf::Tensor t = mf::full({n}, 1.0f);
    float* tp = t.data<float>();
    measure({"all_reduce",
             [&] { world.all_reduce(t); },
             [&] { MPI_Allreduce(MPI_IN_PLACE, tp, int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
             double(n) * 4},
            rank);

    mf::Tensor in = mf::full({part}, 1.0f), out = mf::empty({part * size});
    measure({"all_gather",
             [&] { world.all_gather(in, out, counts); },
             [&] {
               MPI_Allgather(in.data_ptr(), int(part), MPI_FLOAT, out.data_ptr(), int(part), MPI_FLOAT,
                             MPI_COMM_WORLD);
             },
             double(part * size) * 4},
            rank);

    mf::Tensor whole = mf::full({part * size}, 1.0f), mine = mf::empty({part});
    measure({"reduce_scatter",
             [&] { world.reduce_scatter(whole, mine, counts); },
             [&] {
               MPI_Reduce_scatter(whole.data_ptr(), mine.data_ptr(), int_counts.data(), MPI_FLOAT, MPI_SUM,
                                  MPI_COMM_WORLD);
             },
             double(part * size) * 4},
            rank);
  }
  return 0;
}
