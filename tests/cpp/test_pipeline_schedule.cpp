// The pipeline schedules and their simulator (docs/pipeline.md): every kind,
// for p in 1..8 ranks, m in 1..16 micro-batches and v in 1..4 stages per
// rank where the kind takes them, is free of deadlock and has the bubble
// its formula gives.
#include <gtest/gtest.h>

#include <string>

#include "meshflow/distributed/pipelining.h"
#include "meshflow/error.h"

namespace mf::distributed::pipelining {
namespace {

double one_f_one_b_formula(int p, int m) { return double(p - 1) / (m + p - 1); }

TEST(PipelineSchedule, GPipeAndOneFOneBHaveTheFormulasBubble) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
        Schedule s = make_schedule(kind, p, m);
        SimulationResult r = simulate(s);
        EXPECT_NEAR(r.bubble_fraction, one_f_one_b_formula(p, m), 1e-12)
            << schedule_kind_name(kind) << " p=" << p << " m=" << m;
        EXPECT_NEAR(formula_bubble(s), one_f_one_b_formula(p, m), 1e-12);
        EXPECT_DOUBLE_EQ(r.step_time, 3.0 * (m + p - 1));
      }
    }
}

TEST(PipelineSchedule, MemoryOfGPipeAndOneFOneB) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      SimulationResult gpipe = simulate(make_schedule(ScheduleKind::GPipe, p, m));
      SimulationResult ofob = simulate(make_schedule(ScheduleKind::OneFOneB, p, m));
      EXPECT_EQ(gpipe.peak_activations[0], m);
      EXPECT_LE(ofob.peak_activations[0], p) << "p=" << p << " m=" << m;
      EXPECT_EQ(ofob.peak_activations[0], std::min(p, m));
      for (int s = 0; s < p; ++s) EXPECT_LE(ofob.peak_activations[size_t(s)], std::min(p - s, m));
    }
}

TEST(PipelineSchedule, InterleavedDividesTheBubbleByTheChunks) {
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 16; m += p)
      for (int v = 1; v <= 4; ++v) {
        Schedule s = make_schedule(ScheduleKind::Interleaved1F1B, p, m, v);
        EXPECT_EQ(s.num_stages, p * v);
        for (int stage = 0; stage < p * v; ++stage) EXPECT_EQ(s.stage_rank[size_t(stage)], stage % p);
        SimulationResult r = simulate(s);
        // With unit costs per stage a chunk costs 1/v of a whole-rank stage.
        EXPECT_NEAR(r.bubble_fraction, double(p - 1) / (v * m + p - 1), 1e-12) << "p=" << p << " m=" << m << " v=" << v;
      }
}

TEST(PipelineSchedule, InterleavedNeedsAMultipleOfTheRanks) {
  try {
    make_schedule(ScheduleKind::Interleaved1F1B, 4, 6, 2);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of the number of ranks (4), got 6"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_schedule(ScheduleKind::Interleaved1F1B, 4, 2, 2), ValueError);  // fewer than p
}

TEST(PipelineSchedule, ZeroBubbleIsLowerThanOneFOneB) {
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m) {
      Schedule zb = make_schedule(ScheduleKind::ZeroBubble, p, m);
      SimulationResult r = simulate(zb);
      if (p > 1) EXPECT_LT(r.bubble_fraction, one_f_one_b_formula(p, m) - 1e-9) << "p=" << p << " m=" << m;
      EXPECT_DOUBLE_EQ(r.bubble_fraction, formula_bubble(zb));
      // ZB-H1 keeps 1F1B's memory.
      for (int s = 0; s < p; ++s) EXPECT_LE(r.peak_activations[size_t(s)], std::min(p - s, m));
      bool split = false;
      for (const auto& list : zb.actions)
        for (const Action& a : list) split |= a.type == ActionType::BackwardWeight;
      EXPECT_TRUE(split);

      Schedule zbv = make_schedule(ScheduleKind::ZBV, p, m, 2);
      SimulationResult rv = simulate(zbv);
      if (p > 1) EXPECT_LT(rv.bubble_fraction, one_f_one_b_formula(p, m) - 1e-9) << "zbv p=" << p << " m=" << m;
      if (m >= p) EXPECT_LE(rv.bubble_fraction, double(p - 1) / (2 * m + p - 1) + 1e-12) << "zbv p=" << p << " m=" << m;
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(zbv.stage_rank[size_t(s)], s);
        EXPECT_EQ(zbv.stage_rank[size_t(2 * p - 1 - s)], s);
      }
    }
}

TEST(PipelineSchedule, StagesPerRankRules) {
  EXPECT_THROW(make_schedule(ScheduleKind::OneFOneB, 2, 4, 2), ValueError);
  EXPECT_THROW(make_schedule(ScheduleKind::ZBV, 2, 4, 1), ValueError);
  EXPECT_THROW(make_schedule(ScheduleKind::GPipe, 2, 0), ValueError);
  EXPECT_THROW(make_schedule(ScheduleKind::GPipe, 0, 2), ValueError);
  EXPECT_THROW(parse_schedule_kind("pipedream"), ValueError);
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B,
                         ScheduleKind::ZeroBubble, ScheduleKind::ZBV})
    EXPECT_EQ(parse_schedule_kind(schedule_kind_name(k)), k);
}

TEST(PipelineSchedule, CommunicationBetweenRanksOnly) {
  Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  std::string rank0, rank1;
  for (const Action& a : s.actions[0]) rank0 += a.str() + " ";
  for (const Action& a : s.actions[1]) rank1 += a.str() + " ";
  EXPECT_EQ(rank0, "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 ");
  EXPECT_EQ(rank1, "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1 ");
  // ZBV's stages p-1 and p share the last rank: no message between them.
  Schedule v = make_schedule(ScheduleKind::ZBV, 2, 4, 2);
  for (const Action& a : v.actions[1])
    EXPECT_FALSE((a.type == ActionType::SendForward && a.stage == 1) || (a.type == ActionType::RecvForward && a.stage == 2))
        << a.str();
}

TEST(PipelineSchedule, SimulatorRejectsBrokenLists) {
  Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 2);
  Schedule swapped = s;  // rank 1 receives micro-batch 1 before 0
  std::swap(swapped.actions[1][0], swapped.actions[1][4]);
  EXPECT_THROW(simulate(swapped), ValueError);

  Schedule missing = s;
  missing.actions[0].pop_back();
  try {
    simulate(missing);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("micro-batch 1"), std::string::npos) << e.what();
  }

  // Both ranks receive first: a deadlock, named.
  Schedule dead = make_schedule(ScheduleKind::GPipe, 2, 1);
  std::vector<Action>& r0 = dead.actions[0];  // 0F0 0SEND_F0 0RECV_B0 0B0
  std::rotate(r0.begin(), r0.begin() + 2, r0.end());  // 0RECV_B0 0B0 0F0 0SEND_F0
  try {
    simulate(dead);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("deadlock"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 0 waits in 0RECV_B0"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1 waits in 1RECV_F0"), std::string::npos) << what;
  }

  Schedule wrong_rank = s;
  wrong_rank.actions[0].push_back(Action{ActionType::Forward, 1, 0});
  EXPECT_THROW(simulate(wrong_rank), ValueError);
}

TEST(PipelineSchedule, LatencyDelaysReceives) {
  Schedule s = make_schedule(ScheduleKind::GPipe, 2, 1);
  SimulationResult r = simulate(s, SimulationCosts{.latency = 0.5});
  EXPECT_DOUBLE_EQ(r.step_time, 1 + 0.5 + 1 + 2 + 0.5 + 2);
  // Stages of unequal cost: stage 1's forward takes 3.
  SimulationCosts uneven;
  uneven.stage_forward = {1, 3};
  EXPECT_DOUBLE_EQ(simulate(s, uneven).step_time, 1 + 3 + 2 + 2);
  uneven.stage_forward = {1, 3, 4};
  EXPECT_THROW(simulate(s, uneven), ValueError);
}

TEST(PipelineSchedule, DescribeShowsTheTimeline) {
  std::string text = make_schedule(ScheduleKind::OneFOneB, 2, 2).describe();
  EXPECT_NE(text.find("pipeline schedule '1f1b': 2 ranks, 2 stages, 2 micro-batches"), std::string::npos) << text;
  EXPECT_NE(text.find("bubble 33.3% (formula 33.3%)"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0: 0F0 0SEND_F0"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0 | 0F0 0F1 ..."), std::string::npos) << text;
}

}  // namespace
}  // namespace mf::distributed::pipelining
