// The benchmark's report arithmetic (percentiles, copy floor) and its SVG
// plot writer; no GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "operator_checks/bench_stats.h"
#include "operator_checks/latency_svg.h"

namespace engram {
namespace {

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(LatencyPercentiles, InterpolatesBetweenClosestRanksWhateverTheOrder) {
  // 11 samples 0..100 shuffled: p10 = 10, p50 = 50, p90 = 90 exactly.
  auto p = latency_percentiles({30, 100, 0, 70, 10, 90, 50, 20, 60, 80, 40});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_DOUBLE_EQ(p->p10_us, 10);
  EXPECT_DOUBLE_EQ(p->p50_us, 50);
  EXPECT_DOUBLE_EQ(p->p90_us, 90);
  // Two samples: the median is their mean.
  auto two = latency_percentiles({4, 6});
  ASSERT_TRUE(two.is_ok());
  EXPECT_DOUBLE_EQ(two->p50_us, 5);
  EXPECT_DOUBLE_EQ(two->p10_us, 4.2);
  auto one = latency_percentiles({7.5});
  ASSERT_TRUE(one.is_ok());
  EXPECT_DOUBLE_EQ(one->p10_us, 7.5);
  EXPECT_DOUBLE_EQ(one->p90_us, 7.5);
}

TEST(LatencyPercentiles, RejectsNoSamplesAndBadOnes) {
  EXPECT_EQ(latency_percentiles({}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(latency_percentiles({1, -2}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(latency_percentiles({1, std::numeric_limits<double>::quiet_NaN()}).status().code(),
            ErrorCode::kInvalidArgument);
}

TEST(ReplaysInDraw, SpreadTheReplaysEvenlyAndSumToThem) {
  for (int replays : {1, 2, 7, 200, 1001}) {
    for (int draws = 1; draws <= std::min(replays, 9); ++draws) {
      int sum = 0, least = replays, most = 0;
      for (int d = 0; d < draws; ++d) {
        const int share = replays_in_draw(replays, draws, d);
        sum += share;
        least = std::min(least, share);
        most = std::max(most, share);
      }
      EXPECT_EQ(sum, replays) << replays << " replays over " << draws << " draws";
      EXPECT_GE(least, 1);
      EXPECT_LE(most - least, 1) << replays << " replays over " << draws << " draws";
    }
  }
  EXPECT_EQ(replays_in_draw(200, 8, 0), 25);
  EXPECT_EQ(replays_in_draw(7, 3, 0), 3);
  EXPECT_EQ(replays_in_draw(7, 3, 2), 2);
}

TEST(ReplaysInDrawDeathTest, MoreDrawsThanReplaysIsABug) {
  EXPECT_DEATH(replays_in_draw(2, 3, 0), "draws");
  EXPECT_DEATH(replays_in_draw(4, 2, 2), "draw");
}

TEST(CopyFloor, IsTheSlowerOfTheNvlinkAndHbmShares) {
  // 8192 tokens x 24 rows: R = 51.9 MB, W = 100.7 MB.
  CopyFloorInputs in;
  in.read_bytes = 8192ull * 24 * 264;
  in.write_bytes = 8192ull * 24 * 512;
  in.remote_fraction = 0.5;
  in.local_fraction = 0.49;
  in.peer_copy_us = 144;  // ~360 GB/s over NVLink
  in.local_copy_us = 44;  // ~3.5 TB/s HBM
  auto floor = copy_floor_us(in);
  ASSERT_TRUE(floor.is_ok()) << floor.status().to_string();
  EXPECT_DOUBLE_EQ(*floor, 72);  // NVLink-bound: half the rows at the peer copy's rate
  // With a slow HBM the local share wins.
  in.local_copy_us = 400;
  const double r = static_cast<double>(in.read_bytes), w = static_cast<double>(in.write_bytes);
  auto hbm = copy_floor_us(in);
  ASSERT_TRUE(hbm.is_ok());
  EXPECT_DOUBLE_EQ(*hbm, (0.49 * r + w) / (r + w) * 400);
  // One GPU: nothing remote, the floor is the local copy's share.
  in.remote_fraction = 0;
  in.local_fraction = 1;
  auto local = copy_floor_us(in);
  ASSERT_TRUE(local.is_ok());
  EXPECT_DOUBLE_EQ(*local, 400);
}

TEST(CopyFloor, RejectsImpossibleInputs) {
  CopyFloorInputs in;
  in.read_bytes = 0;
  in.local_copy_us = in.peer_copy_us = 1;
  EXPECT_EQ(copy_floor_us(in).status().code(), ErrorCode::kInvalidArgument);
  in.read_bytes = 264;
  in.remote_fraction = 0.7;
  in.local_fraction = 0.7;
  EXPECT_EQ(copy_floor_us(in).status().code(), ErrorCode::kInvalidArgument);
  in.remote_fraction = 0.5;
  in.local_fraction = 0.5;
  in.peer_copy_us = 0;
  EXPECT_EQ(copy_floor_us(in).status().code(), ErrorCode::kInvalidArgument);
}

LogLogPlot two_series() {
  LogLogPlot plot;
  plot.title = "lookup <latency> & floor";
  plot.x_label = "tokens per rank";
  plot.y_label = "us";
  plot.series.push_back({"collective", "#d62728", false, {{1, 26.8}, {64, 34.8}, {8192, 550.9}}});
  plot.series.push_back({"peer", "#1f77b4", false, {{1, 5.7}, {64, 6.6}, {8192, 85.8}}});
  plot.series.push_back({"floor", "#555", true, {{8192, 72}}});
  return plot;
}

TEST(LatencySvg, OnePolylineAndOneMarkerPerPointAndEscapedText) {
  auto svg = render_log_log_svg(two_series());
  ASSERT_TRUE(svg.is_ok()) << svg.status().to_string();
  EXPECT_EQ(svg->rfind("<svg ", 0), 0u);
  EXPECT_NE(svg->find("</svg>"), std::string::npos);
  EXPECT_EQ(count(*svg, "<polyline"), 3u);
  EXPECT_EQ(count(*svg, "<circle"), 7u);
  EXPECT_NE(svg->find("lookup &lt;latency&gt; &amp; floor"), std::string::npos);
  EXPECT_EQ(svg->find("<latency>"), std::string::npos);
  EXPECT_EQ(count(*svg, "stroke-dasharray=\"6,4\""), 2u);  // the floor's line and its legend entry
  // Decades 1..10^4 on x (8192 rounds up to 10^4) and 1..10^3 on y.
  EXPECT_NE(svg->find(">10000<"), std::string::npos);
  EXPECT_NE(svg->find(">1000<"), std::string::npos);
}

TEST(LatencySvg, LargerValuesSitFurtherRightAndHigher) {
  LogLogPlot plot;
  plot.series.push_back({"s", "black", false, {{1, 1}, {100, 1000}}});
  auto svg = render_log_log_svg(plot);
  ASSERT_TRUE(svg.is_ok());
  const size_t at = svg->find("points=\"");
  ASSERT_NE(at, std::string::npos);
  double x0, y0, x1, y1;
  ASSERT_EQ(std::sscanf(svg->c_str() + at, "points=\"%lf,%lf %lf,%lf\"", &x0, &y0, &x1, &y1), 4);
  EXPECT_GT(x1, x0);
  EXPECT_LT(y1, y0);  // SVG y grows downwards
}

TEST(LatencySvg, RejectsPointsALogAxisCannotShow) {
  LogLogPlot empty;
  EXPECT_EQ(render_log_log_svg(empty).status().code(), ErrorCode::kInvalidArgument);
  LogLogPlot zero = two_series();
  zero.series[1].points.push_back({16, 0});
  auto bad = render_log_log_svg(zero);
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("peer"), std::string::npos);
}

}  // namespace
}  // namespace engram
