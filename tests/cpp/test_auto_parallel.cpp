// The auto-parallel search (Note [Auto parallel]): on random small step
// logs (chains with skips, shared parameters, several candidate
// signatures per call) its plan's predicted step time is the brute-force
// minimum over every assignment, and its predictions are predict()'s for
// the same plan. The collective model interpolates its measured points.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "distributed/auto_parallel/problem.h"
#include "meshflow/distributed/auto_parallel.h"
#include "meshflow/error.h"
#include "meshflow/op_def.h"

namespace mf::distributed::auto_parallel {
namespace {

CostModel model() {
  CostModel m;
  m.gemm_flops = 1e11;
  m.memory_bandwidth = 2e10;
  m.transpose_bandwidth = 5e9;
  m.op_overhead = 1e-6;
  for (const char* kind : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"})
    m.collectives[kind][2] = CollectiveFit{{{4096, 10e-6}, {1 << 20, 60e-6}, {1 << 24, 3e-3}}};
  return m;
}

Sbp random_sbp(std::mt19937& rng) {
  switch (rng() % 4) {
    case 0: return Sbp::broadcast();
    case 1: return Sbp::split(0);
    case 2: return Sbp::split(1);
    default: return Sbp::partial_sum();
  }
}

// calls calls of 1-2 inputs each (an earlier call's output, one of two
// parameters, or a fixed input), 2-3 random signatures plus all-broadcast.
CallLog random_log(std::mt19937& rng, int calls) {
  CallLog log;
  log.placement = Placement(DeviceType::CPU, {0, 1});
  const Shape shape{64, 32};
  auto value = [&](ValueRecord v) {
    log.values.push_back(std::move(v));
    return int64_t(log.values.size() - 1);
  };
  const int64_t fixed = value({.shape = shape, .kind = ValueKind::Fixed, .fixed = {Sbp::split(0)}});
  std::vector<int64_t> params;
  for (int s = 0; s < 2; ++s) {
    log.sources.push_back({.name = "p" + std::to_string(s), .shape = shape, .copies = 2});
    params.push_back(value({.shape = shape, .kind = ValueKind::Source, .node = s}));
  }
  const OpDef* add = &OpRegistry::instance().get("add");
  std::vector<int64_t> outputs;
  for (int c = 0; c < calls; ++c) {
    CallRecord rec;
    rec.op = add;
    const int nin = 1 + int(rng() % 2);
    for (int i = 0; i < nin; ++i) {
      const int pick = int(rng() % 4);
      if (pick == 0 || outputs.empty()) rec.inputs.push_back(params[rng() % 2]);
      else if (pick == 1) rec.inputs.push_back(fixed);
      else rec.inputs.push_back(outputs[rng() % outputs.size()]);
    }
    std::vector<SbpSignature> sigs;
    const int nsig = 2 + int(rng() % 2);
    for (int k = 0; k < nsig; ++k) {
      SbpSignature sig;
      for (int i = 0; i < nin; ++i) sig.inputs.push_back(random_sbp(rng));
      sig.outputs.push_back(random_sbp(rng));
      sigs.push_back(std::move(sig));
    }
    sigs.push_back({std::vector<Sbp>(size_t(nin), Sbp::broadcast()), {Sbp::broadcast()}});
    rec.candidates.push_back(std::move(sigs));
    rec.flops = double(rng() % 4) * 1e6;
    rec.bytes = 3.0 * 64 * 32 * 4;
    // Note [Transposed operands in the cost model]: the search's boxing
    // costs must be predict()'s with these too.
    rec.transposed = rec.flops == 0 && rng() % 2 == 0;
    rec.transposes = rng() % 3 == 0;
    const int64_t out = value({.shape = shape, .kind = ValueKind::Output, .node = c, .index = 0});
    rec.outputs.push_back(out);
    outputs.push_back(out);
    log.calls.push_back(std::move(rec));
  }
  // A gradient of each parameter accumulated from the last outputs.
  log.accumulations.emplace_back(outputs.back(), 0);
  log.accumulations.emplace_back(outputs[outputs.size() / 2], 1);
  return log;
}

TEST(AutoParallel, SearchFindsTheBruteForceOptimumOnSmallLogs) {
  std::mt19937 rng(7);
  const CostModel m = model();
  const std::vector<NdSbp> layouts{{Sbp::broadcast()}, {Sbp::split(0)}, {Sbp::split(1)}};
  for (int trial = 0; trial < 30; ++trial) {
    const CallLog log = random_log(rng, 4 + trial % 4);
    const Plan found = search(log, m, {});
    // Every assignment, in mixed radix.
    std::vector<std::vector<size_t>> calls(log.calls.size(), std::vector<size_t>{0});
    std::vector<NdSbp> sources(2, layouts[0]);
    double best = INFINITY;
    std::function<void(size_t)> rec = [&](size_t k) {
      if (k < 2) {
        for (const NdSbp& l : layouts) {
          sources[k] = l;
          rec(k + 1);
        }
        return;
      }
      const size_t c = k - 2;
      if (c == log.calls.size()) {
        best = std::min(best, predict(log, m, calls, sources).step_time);
        return;
      }
      for (size_t x = 0; x < log.calls[c].candidates[0].size(); ++x) {
        calls[c][0] = x;
        rec(k + 1);
      }
    };
    rec(0);
    EXPECT_NEAR(found.step_time, best, 1e-12 + 1e-9 * best) << "trial " << trial;
    const Plan again = predict(log, m, found.calls, found.sources);
    EXPECT_DOUBLE_EQ(again.step_time, found.step_time);
    EXPECT_DOUBLE_EQ(again.memory, found.memory);
  }
}

// Note [Transposed operands in the cost model]: a memory-bound call reading
// a transposed operand moves its bytes at the transpose bandwidth, and a
// boxed input of a transposing view costs its readers' copy at that rate.
TEST(AutoParallel, TransposedOperandsAndBoxedTransposingViews) {
  CostModel m = model();
  m.transpose_bandwidth = 2e9;
  const Shape shape{64, 32};
  const double bytes = 64.0 * 32 * 4;
  auto log_of = [&](bool transposed, bool transposes) {
    CallLog log;
    log.placement = Placement(DeviceType::CPU, {0, 1});
    log.values.push_back({.shape = shape, .kind = ValueKind::Fixed, .fixed = {Sbp::split(0)}});
    const OpDef* add = &OpRegistry::instance().get("add");
    for (int c = 0; c < 2; ++c) {
      CallRecord rec;
      rec.op = add;
      rec.inputs = {int64_t(c)};
      const Sbp layout = c == 0 ? Sbp::split(0) : Sbp::broadcast();
      rec.candidates.push_back({SbpSignature{{layout}, {layout}}});
      rec.bytes = 2 * bytes;
      rec.transposed = c == 0 && transposed;
      rec.transposes = c == 1 && transposes;
      log.values.push_back({.shape = shape, .kind = ValueKind::Output, .node = c, .index = 0});
      rec.outputs = {int64_t(c) + 1};
      log.calls.push_back(std::move(rec));
    }
    return log;
  };
  const std::vector<std::vector<size_t>> calls{{0}, {0}};
  const Plan plain = predict(log_of(false, false), m, calls, {});
  // Call 0 runs split over 2 ranks: half its bytes, at the transpose rate.
  const Plan read = predict(log_of(true, false), m, calls, {});
  EXPECT_NEAR(read.compute_time - plain.compute_time, bytes * (1 / 2e9 - 1 / 2e10), 1e-15);
  // Call 1's input is gathered (split -> broadcast) and read transposed after.
  const Plan viewed = predict(log_of(false, true), m, calls, {});
  EXPECT_NEAR(viewed.communication_time - plain.communication_time, 2 * bytes * (1 / 2e9 - 1 / 2e10), 1e-15);
  EXPECT_DOUBLE_EQ(viewed.compute_time, plain.compute_time);
  // Unset, the transpose bandwidth is the memory bandwidth: nothing changes.
  m.transpose_bandwidth = 0;
  EXPECT_DOUBLE_EQ(predict(log_of(true, true), m, calls, {}).step_time, predict(log_of(false, false), m, calls, {}).step_time);
}

TEST(AutoParallel, MemoryLimitIsMetOrReported) {
  std::mt19937 rng(11);
  const CostModel m = model();
  for (int trial = 0; trial < 10; ++trial) {
    const CallLog log = random_log(rng, 6);
    const Plan free = search(log, m, {});
    const Plan tight = search(log, m, {.memory_limit = free.memory * 0.8});
    if (tight.memory_limit_met) {
      EXPECT_LE(tight.memory, free.memory * 0.8);
      EXPECT_GE(tight.step_time, free.step_time - 1e-15);
    } else {
      EXPECT_GT(tight.memory, free.memory * 0.8);
    }
  }
  EXPECT_THROW(search(random_log(rng, 3), m, {.memory_limit = -1}), ValueError);
}

TEST(AutoParallel, CollectiveModel) {
  const CostModel m = model();
  EXPECT_DOUBLE_EQ(m.collective("all_reduce", 2, 1 << 20), 60e-6);
  EXPECT_DOUBLE_EQ(m.collective("all_reduce", 2, 100), 10e-6);
  EXPECT_NEAR(m.collective("all_gather", 2, 1 << 22), 60e-6 * std::pow(4.0, std::log(50.0) / std::log(16.0)), 1e-15);
  EXPECT_EQ(m.collective("all_gather", 1, 1 << 22), 0.0);
  EXPECT_GT(m.collective("all_reduce", 4, 1 << 20), m.collective("all_reduce", 2, 1 << 20));
}

// Note [Sync latency]: each collective a boxing makes costs sync_latency
// on top of its time alone; a local slice costs none.
TEST(AutoParallel, SyncLatencyIsAddedToEachCollective) {
  CostModel m = model();
  m.collectives["all_reduce"][4] = m.collectives["all_gather"][4] = m.collectives["all_reduce"][2];
  const Shape line{2}, mesh{2, 2};
  auto boxing = [&](const Shape& on, const NdSbp& from, const NdSbp& to) {
    detail::Boxing out;
    detail::transition(m, on, from, to, 1 << 20, &out, true);
    return out;
  };
  const NdSbp P{Sbp::partial_sum()}, B{Sbp::broadcast()}, S0{Sbp::split(0)};
  const detail::Boxing reduce = boxing(line, P, B), slice = boxing(line, B, S0);
  const detail::Boxing both = boxing(mesh, {Sbp::partial_sum(), Sbp::split(0)}, {Sbp::broadcast(), Sbp::broadcast()});
  ASSERT_EQ(reduce.collectives.size(), 1u);
  ASSERT_EQ(slice.collectives.size(), 0u);
  ASSERT_EQ(both.collectives.size(), 2u);
  m.sync_latency = 7e-4;
  EXPECT_NEAR(boxing(line, P, B).time - reduce.time, 7e-4, 1e-15);
  EXPECT_DOUBLE_EQ(boxing(line, B, S0).time, slice.time);
  EXPECT_NEAR(boxing(mesh, {Sbp::partial_sum(), Sbp::split(0)}, {Sbp::broadcast(), Sbp::broadcast()}).time - both.time,
              2 * 7e-4, 1e-15);
}

}  // namespace
}  // namespace mf::distributed::auto_parallel
