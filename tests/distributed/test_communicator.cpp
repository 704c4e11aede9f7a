// Checks of mf::distributed's communicators, run under mpirun with 1, 2 and
// 4 ranks (see CMakeLists.txt). Rank r's inputs are a function of r, so each
// rank computes every expected result itself.
//   collectives: every call, several dtypes, even and uneven counts,
//                subgroups, send/recv, bad arguments; exits non-zero on a failure.
//   timeout:     rank 0 skips an all_reduce; the others must throw DistributedError.
//   die:         the last rank exits in the middle; the job must end.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "meshflow/distributed/communicator.h"
#include "meshflow/meshflow.h"

namespace dist = mf::distributed;
using mf::DType;
using mf::Tensor;

namespace {

int g_failures = 0;
int g_checks = 0;

#define EXPECT(cond, ...)                                                              \
  do {                                                                                 \
    ++g_checks;                                                                        \
    if (!(cond)) {                                                                     \
      ++g_failures;                                                                    \
      std::fprintf(stderr, "rank %d: FAILED %s (%s:%d) ", dist::get_rank(), #cond,    \
                   __FILE__, __LINE__);                                                \
      std::fprintf(stderr, __VA_ARGS__);                                               \
      std::fprintf(stderr, "\n");                                                      \
    }                                                                                  \
  } while (0)

Tensor make(const std::vector<double>& values, mf::Shape shape, DType dtype) {
  return mf::from_vector(values, shape, mf::TensorOptions{.dtype = dtype});
}

std::vector<double> read(const Tensor& t) {
  Tensor wide = mf::contiguous(mf::to(t, DType::Float64));
  const double* p = wide.data<double>();
  return std::vector<double>(p, p + wide.numel());
}

void expect_values(const char* what, DType dtype, const Tensor& t, const std::vector<double>& expected) {
  std::vector<double> got = read(t);
  bool same = got.size() == expected.size();
  size_t bad = 0;
  for (size_t i = 0; same && i < got.size(); ++i)
    if (got[i] != expected[i]) same = false, bad = i;
  EXPECT(same, "%s (%s): %zu values, expected %zu; first difference at %zu: %g vs %g", what,
         mf::dtype_name(dtype), got.size(), expected.size(), bad, bad < got.size() ? got[bad] : 0.0,
         bad < expected.size() ? expected[bad] : 0.0);
}

// Rank r's element i: small integers, exact in every dtype tested (bfloat16
// holds integers up to 256 exactly).
double input_value(int rank, int64_t i, DType dtype) {
  if (dtype == DType::Bool) return double((rank + i) % 3 == 0);
  return double((rank * 7 + i * 3) % 11 + 1);
}

std::vector<double> input_values(int rank, int64_t n, DType dtype, int64_t first = 0) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(input_value(rank, first + i, dtype));
  return v;
}

double reduce(dist::ReduceOp op, double a, double b, DType dtype) {
  if (dtype == DType::Bool) {
    bool any = op == dist::ReduceOp::Sum || op == dist::ReduceOp::Max;
    return any ? double(a != 0 || b != 0) : double(a != 0 && b != 0);
  }
  switch (op) {
    case dist::ReduceOp::Sum: return a + b;
    case dist::ReduceOp::Max: return std::max(a, b);
    case dist::ReduceOp::Min: return std::min(a, b);
    case dist::ReduceOp::Prod: return a * b;
  }
  return 0;
}

const char* op_name(dist::ReduceOp op) {
  switch (op) {
    case dist::ReduceOp::Sum: return "sum";
    case dist::ReduceOp::Max: return "max";
    case dist::ReduceOp::Min: return "min";
    case dist::ReduceOp::Prod: return "prod";
  }
  return "?";
}

const std::vector<DType> kDTypes = {DType::Float32, DType::Float64, DType::Int64, DType::BFloat16,
                                    DType::Float16, DType::Int32, DType::UInt8, DType::Bool};
const std::vector<dist::ReduceOp> kOps = {dist::ReduceOp::Sum, dist::ReduceOp::Max, dist::ReduceOp::Min,
                                          dist::ReduceOp::Prod};

void test_all_reduce(dist::Communicator& comm) {
  const int64_t n = 13;
  for (DType dtype : kDTypes)
    for (dist::ReduceOp op : kOps) {
      // Products of up to 4 values of at most 11 overflow uint8 and lose
      // bits in 16-bit floats: keep the factors at 1 and 2 there.
      auto value = [&](int r, int64_t i) {
        double v = input_value(r, i, dtype);
        return op == dist::ReduceOp::Prod && dtype != DType::Bool ? double(1 + int64_t(v) % 2) : v;
      };
      std::vector<double> mine, expected;
      for (int64_t i = 0; i < n; ++i) {
        mine.push_back(value(comm.rank(), i));
        double acc = value(0, i);
        for (int r = 1; r < comm.size(); ++r) acc = reduce(op, acc, value(r, i), dtype);
        expected.push_back(acc);
      }
      Tensor t = make(mine, {n}, dtype);
      comm.all_reduce(t, op);
      expect_values((std::string("all_reduce ") + op_name(op)).c_str(), dtype, t, expected);
    }
}

void test_broadcast(dist::Communicator& comm) {
  for (DType dtype : kDTypes)
    for (int root = 0; root < comm.size(); ++root) {
      Tensor t = make(input_values(comm.rank(), 10, dtype), {2, 5}, dtype);
      comm.broadcast(t, root);
      expect_values("broadcast", dtype, t, input_values(root, 10, dtype));
    }
}

// Row counts per rank: even (2 each) and uneven (including ranks with none).
std::vector<std::vector<int64_t>> count_patterns(int size) {
  std::vector<int64_t> even(size_t(size), 2), uneven, with_empty;
  for (int r = 0; r < size; ++r) {
    uneven.push_back((r * 2 + 1) % 4);
    with_empty.push_back(r % 3);
  }
  return {even, uneven, with_empty};
}

void test_all_gather(dist::Communicator& comm) {
  const int64_t row = 3;
  for (DType dtype : kDTypes)
    for (const auto& counts : count_patterns(comm.size())) {
      int64_t total = 0;
      std::vector<double> expected;
      for (int r = 0; r < comm.size(); ++r) {
        auto v = input_values(r, counts[size_t(r)] * row, dtype);
        expected.insert(expected.end(), v.begin(), v.end());
        total += counts[size_t(r)];
      }
      Tensor in = make(input_values(comm.rank(), counts[size_t(comm.rank())] * row, dtype),
                       {counts[size_t(comm.rank())], row}, dtype);
      Tensor out = mf::empty({total, row}, mf::TensorOptions{.dtype = dtype});
      comm.all_gather(in, out, counts);
      expect_values("all_gather", dtype, out, expected);
    }
}

void test_reduce_scatter(dist::Communicator& comm) {
  const int64_t row = 2;
  for (DType dtype : kDTypes)
    for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Max, dist::ReduceOp::Min})
      for (const auto& counts : count_patterns(comm.size())) {
        int64_t total = 0, offset = 0;
        for (int r = 0; r < comm.size(); ++r) {
          if (r < comm.rank()) offset += counts[size_t(r)];
          total += counts[size_t(r)];
        }
        int64_t mine = counts[size_t(comm.rank())];
        std::vector<double> expected;
        for (int64_t i = offset * row; i < (offset + mine) * row; ++i) {
          double acc = input_value(0, i, dtype);
          for (int r = 1; r < comm.size(); ++r) acc = reduce(op, acc, input_value(r, i, dtype), dtype);
          expected.push_back(acc);
        }
        Tensor in = make(input_values(comm.rank(), total * row, dtype), {total, row}, dtype);
        Tensor out = mf::empty({mine, row}, mf::TensorOptions{.dtype = dtype});
        comm.reduce_scatter(in, out, counts, op);
        expect_values((std::string("reduce_scatter ") + op_name(op)).c_str(), dtype, out, expected);
      }
}

// Rank a sends (a + b) % 3 rows to rank b; row j of those holds
// 100 a + 10 b + j in each of its 2 elements.
void test_all_to_all(dist::Communicator& comm) {
  auto rows = [](int a, int b) { return int64_t((a + b) % 3); };
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64, DType::Int32}) {
    int me = comm.rank();
    std::vector<int64_t> send_counts, recv_counts;
    std::vector<double> sent, expected;
    for (int peer = 0; peer < comm.size(); ++peer) {
      send_counts.push_back(rows(me, peer));
      recv_counts.push_back(rows(peer, me));
      for (int64_t j = 0; j < rows(me, peer); ++j) sent.insert(sent.end(), 2, 100.0 * me + 10 * peer + j);
      for (int64_t j = 0; j < rows(peer, me); ++j) expected.insert(expected.end(), 2, 100.0 * peer + 10 * me + j);
    }
    Tensor in = make(sent, {int64_t(sent.size() / 2), 2}, dtype);
    Tensor out = mf::empty({int64_t(expected.size() / 2), 2}, mf::TensorOptions{.dtype = dtype});
    comm.all_to_all(in, send_counts, out, recv_counts);
    expect_values("all_to_all", dtype, out, expected);
  }
}

// Even ranks send first and odd ranks receive first, so a send that waits
// for its receiver (large messages) cannot deadlock the ring.
void test_send_recv(dist::Communicator& comm) {
  if (comm.size() < 2) return;
  int next = (comm.rank() + 1) % comm.size(), prev = (comm.rank() + comm.size() - 1) % comm.size();
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Int64}) {
    for (int64_t n : {int64_t(5), int64_t(300000)}) {
      Tensor mine = make(input_values(comm.rank(), n, dtype), {n}, dtype);
      Tensor got = mf::empty({n}, mf::TensorOptions{.dtype = dtype});
      if (comm.rank() % 2 == 0) {
        comm.send(mine, next, 7);
        comm.recv(got, prev, 7);
      } else {
        comm.recv(got, prev, 7);
        comm.send(mine, next, 7);
      }
      expect_values("send/recv", dtype, got, input_values(prev, n, dtype));
    }
  }
}

// isend/irecv: every rank posts its receive and its send at once (no
// order can deadlock), several messages of one tag arrive in order, and a
// receive into a tensor of the wrong size fails on wait().
void test_nonblocking(dist::Communicator& comm) {
  if (comm.size() < 2) return;
  int next = (comm.rank() + 1) % comm.size(), prev = (comm.rank() + comm.size() - 1) % comm.size();
  for (int64_t n : {int64_t(5), int64_t(300000)}) {
    std::vector<Tensor> got, mine;
    std::vector<std::shared_ptr<dist::Work>> works;
    for (int k = 0; k < 3; ++k) {
      got.push_back(mf::empty({n}, mf::TensorOptions{.dtype = DType::Float32}));
      works.push_back(comm.irecv(got.back(), prev, 9));
    }
    for (int k = 0; k < 3; ++k) {
      mine.push_back(make(input_values(comm.rank() + 10 * k, n, DType::Float32), {n}, DType::Float32));
      works.push_back(comm.isend(mine.back(), next, 9));
    }
    for (auto& w : works) w->wait();
    for (auto& w : works) EXPECT(w->is_completed(), "isend/irecv: is_completed() after wait()");
    for (int k = 0; k < 3; ++k)
      expect_values("isend/irecv", DType::Float32, got[size_t(k)], input_values(prev + 10 * k, n, DType::Float32));
  }
  Tensor small = mf::empty({2}, mf::TensorOptions{.dtype = DType::Float32});
  Tensor three = mf::ones({3}, mf::TensorOptions{.dtype = DType::Float32});
  auto receive = comm.irecv(small, prev, 11);
  auto send = comm.isend(three, next, 11);
  send->wait();
  bool threw = false;
  try {
    receive->wait();
  } catch (const mf::DistributedError&) {
    threw = true;
  }
  // MPI reports a truncated message as an error of the receive.
  EXPECT(threw, "irecv: a message larger than the tensor must fail on wait()");
}

void test_subgroups(dist::Communicator& world) {
  // Even and odd world ranks: each rank is in one of the two.
  std::vector<int> members;
  for (int r = world.rank() % 2; r < world.size(); r += 2) members.push_back(r);
  auto group = world.subgroup(members);
  EXPECT(group == world.subgroup(members), "subgroup: the same ranks must give the cached communicator");
  EXPECT(group->size() == int(members.size()), "subgroup size %d, expected %zu", group->size(), members.size());
  EXPECT(group->world_ranks() == members, "subgroup world_ranks differ");
  EXPECT(group->world_ranks()[size_t(group->rank())] == world.rank(), "subgroup rank %d", group->rank());
  Tensor t = make({double(world.rank()), 1.0}, {2}, DType::Float64);
  group->all_reduce(t);
  double sum = 0;
  for (int r : members) sum += r;
  expect_values("subgroup all_reduce", DType::Float64, t, {sum, double(members.size())});
  test_all_gather(*group);
  test_broadcast(*group);
  // A subgroup of the subgroup: its first member alone.
  auto alone = group->subgroup({group->rank()});
  EXPECT(alone->size() == 1 && alone->rank() == 0, "a subgroup of one member");
  EXPECT(alone->world_ranks() == std::vector<int>{world.rank()}, "nested subgroup world_ranks");
  Tensor one = make({3.0}, {1}, DType::Float32);
  alone->all_reduce(one);
  expect_values("subgroup of one all_reduce", DType::Float32, one, {3.0});
}

template <typename Error>
void expect_throws(const char* what, const char* text, const std::function<void()>& call) {
  bool thrown = false;
  std::string message;
  try {
    call();
  } catch (const Error& e) {
    thrown = true;
    message = e.what();
  } catch (const std::exception& e) {
    message = std::string("another exception: ") + e.what();
  }
  EXPECT(thrown && message.find(text) != std::string::npos, "%s: expected an error naming '%s', got '%s'", what,
         text, message.c_str());
}

// Every rank makes the same bad call, so each throws before communicating;
// the collectives that follow show that nothing was left half-done.
void test_bad_arguments(dist::Communicator& comm) {
  int n = comm.size();
  Tensor square = make(input_values(0, 16, DType::Float32), {4, 4}, DType::Float32);
  Tensor transposed = mf::transpose(square, 0, 1);
  expect_throws<mf::ValueError>("non-contiguous all_reduce", "all_reduce: tensor must be contiguous",
                                [&] { comm.all_reduce(transposed); });
  Tensor undefined;
  expect_throws<mf::ValueError>("undefined broadcast", "broadcast: tensor is an undefined", [&] {
    comm.broadcast(undefined, 0);
  });
  expect_throws<mf::ValueError>("broadcast root", "broadcast: root must be a rank", [&] { comm.broadcast(square, n); });
  std::vector<int64_t> ones(size_t(n), 1);
  Tensor row = mf::empty({1, 4});
  Tensor gathered = mf::empty({n, 4});
  expect_throws<mf::ValueError>("all_gather counts", "all_gather: counts must have one entry per rank", [&] {
    comm.all_gather(row, gathered, std::vector<int64_t>(size_t(n + 1), 1));
  });
  expect_throws<mf::ShapeError>("all_gather output rows", "all_gather: output.shape[0] must be sum(counts)", [&] {
    Tensor small = mf::empty({n + 1, 4});
    comm.all_gather(row, small, ones);
  });
  expect_throws<mf::ShapeError>("all_gather row shape", "all_gather: input and output must agree beyond dim 0", [&] {
    Tensor wide = mf::empty({n, 5});
    comm.all_gather(row, wide, ones);
  });
  expect_throws<mf::TypeError>("all_gather dtype", "all_gather: input and output must have the same dtype", [&] {
    Tensor doubles = mf::empty({n, 4}, mf::TensorOptions{.dtype = DType::Float64});
    comm.all_gather(row, doubles, ones);
  });
  expect_throws<mf::ValueError>("reduce_scatter counts", "reduce_scatter: counts must not be negative", [&] {
    std::vector<int64_t> negative(size_t(n), 1);
    negative[0] = -1;
    comm.reduce_scatter(gathered, row, negative);
  });
  expect_throws<mf::ShapeError>("reduce_scatter 0-d", "reduce_scatter: output must have at least one dimension", [&] {
    Tensor scalar = mf::empty({});
    comm.reduce_scatter(gathered, scalar, ones);
  });
  expect_throws<mf::ShapeError>("all_to_all rows", "all_to_all: input.shape[0] must be sum(send_counts)", [&] {
    Tensor extra = mf::empty({n + 1, 4});
    comm.all_to_all(extra, ones, gathered, ones);
  });
  expect_throws<mf::ValueError>("send to self", "send: dst must be another rank",
                                [&] { comm.send(square, comm.rank()); });
  expect_throws<mf::ValueError>("subgroup order", "subgroup: ranks must be", [&] { comm.subgroup({comm.rank(), comm.rank()}); });
  if (n > 1) {
    expect_throws<mf::ValueError>("recv tag", "recv: tag must be in", [&] {
      comm.recv(square, (comm.rank() + 1) % n, -1);
    });
    expect_throws<mf::ValueError>("subgroup without this rank", "subgroup: this rank", [&] {
      comm.subgroup({(comm.rank() + 1) % n});
    });
  }
  Tensor t = make({1.0}, {1}, DType::Float32);
  comm.all_reduce(t);
  expect_values("all_reduce after bad calls", DType::Float32, t, {double(n)});
}

void test_environment(dist::Communicator& world) {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  int expected_size = size ? std::atoi(size) : 1;
  EXPECT(dist::get_world_size() == expected_size, "world size %d, expected %d", dist::get_world_size(), expected_size);
  EXPECT(world.backend() == (size ? "mpi" : "single"), "backend %s", world.backend().c_str());
  // One machine: the local rank is the world rank.
  EXPECT(dist::get_local_rank() == dist::get_rank(), "local rank %d, rank %d", dist::get_local_rank(),
         dist::get_rank());
  EXPECT(int(world.world_ranks().size()) == world.size(), "world_ranks has %zu entries", world.world_ranks().size());
  dist::barrier();
}

int run_collectives() {
  dist::Communicator& world = dist::world();
  test_environment(world);
  test_all_reduce(world);
  test_broadcast(world);
  test_all_gather(world);
  test_reduce_scatter(world);
  test_all_to_all(world);
  test_send_recv(world);
  test_nonblocking(world);
  test_subgroups(world);
  test_bad_arguments(world);
  world.barrier();
  std::printf("rank %d of %d: %d checks, %d failed\n", world.rank(), world.size(), g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

int run_timeout() {
  dist::Communicator& world = dist::world();
  Tensor t = make({1.0}, {1}, DType::Float32);
  world.all_reduce(t);
  if (world.rank() == 0) return 0;  // skips the next all_reduce
  try {
    world.all_reduce(t);
    std::printf("rank %d: all_reduce returned without rank 0\n", world.rank());
  } catch (const mf::DistributedError& e) {
    bool named = std::strstr(e.what(), "all_reduce: timed out") != nullptr &&
                 std::strstr(e.what(), ("rank " + std::to_string(world.rank())).c_str()) != nullptr;
    std::printf("rank %d: caught DistributedError%s: %s\n", world.rank(), named ? "" : " (unexpected text)",
                e.what());
  }
  std::fflush(stdout);
  return 1;
}

int run_die() {
  dist::Communicator& world = dist::world();
  Tensor t = make({1.0}, {1}, DType::Float32);
  world.all_reduce(t);
  if (world.rank() == world.size() - 1) {
    std::printf("rank %d: exiting early\n", world.rank());
    std::fflush(stdout);
    std::_Exit(3);
  }
  world.all_reduce(t);
  std::printf("rank %d: all_reduce returned without the dead rank\n", world.rank());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "collectives";
  try {
    if (mode == "collectives") return run_collectives();
    if (mode == "timeout") return run_timeout();
    if (mode == "die") return run_die();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", dist::get_rank(), e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s [collectives|timeout|die]\n", argv[0]);
  return 2;
}
