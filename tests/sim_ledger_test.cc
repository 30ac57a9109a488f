// The emulator's ledger: what a leak report says about each live entry, in
// a stable order, and ids that stop naming an entry once it is removed (a
// reused slot gets a new generation).
#include "sim/ledger.h"

#include <gtest/gtest.h>

namespace engram::sim {
namespace {

TEST(Ledger, LeakReportsWordEveryKindAndListByRankKindAndAge) {
  Ledger ledger;
  const uint64_t mapping = ledger.add(ResourceKind::kMapping, 1, 4096, LedgerDetail::at_of_rank(0x2000, 3));
  ledger.add(ResourceKind::kShmSegment, 0, 64, LedgerDetail::note("/dev/shm/engram-x on host-a"));
  ledger.add(ResourceKind::kImportedHandle, 1, 4096, LedgerDetail::of_rank(2));
  ledger.add(ResourceKind::kExportFd, 0, 0, LedgerDetail::at(7));
  const uint64_t gone = ledger.add(ResourceKind::kAllocation, 0, 8, LedgerDetail::note("gpu 0 of host-a, FABRIC"));
  ledger.remove(ResourceKind::kAllocation, gone);

  const std::vector<LedgerEntry> leaks = ledger.leaks();
  ASSERT_EQ(leaks.size(), 4u);
  EXPECT_EQ(ledger.live_count(), 4u);
  // Rank 0 first (its export fd, then its shm segment by kind), then rank 1.
  EXPECT_EQ(leaks[0].describe(), "fd 7");
  EXPECT_EQ(leaks[1].describe(), "/dev/shm/engram-x on host-a");
  EXPECT_EQ(leaks[2].describe(), "of rank 2's allocation");
  EXPECT_EQ(leaks[3].describe(), "0x2000 -> rank 3's allocation");
  EXPECT_EQ(leaks[3].id, mapping);
  EXPECT_EQ(leaks[3].bytes, 4096u);
  const std::string report = Ledger::format(leaks);
  EXPECT_NE(report.find("4 live resource(s)"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 0 shm_segment"), std::string::npos) << report;
  EXPECT_EQ(ledger.live_for_rank(1).size(), 2u);
}

TEST(Ledger, ARemovedIdNamesNothingEvenWhenItsSlotIsReused) {
  Ledger ledger;
  const uint64_t first = ledger.add(ResourceKind::kShmSegment, 0, 1, LedgerDetail::note("first"));
  EXPECT_TRUE(ledger.contains(ResourceKind::kShmSegment, first));
  EXPECT_FALSE(ledger.contains(ResourceKind::kMapping, first));  // the kind is part of the name
  ledger.remove(ResourceKind::kShmSegment, first);
  const uint64_t second = ledger.add(ResourceKind::kShmSegment, 0, 1, LedgerDetail::of_rank(1));
  EXPECT_NE(first, second);
  EXPECT_FALSE(ledger.contains(ResourceKind::kShmSegment, first));
  EXPECT_TRUE(ledger.contains(ResourceKind::kShmSegment, second));
  // The reused slot does not inherit the first entry's text.
  EXPECT_EQ(ledger.leaks().at(0).detail.text, "");
  EXPECT_DEATH(ledger.remove(ResourceKind::kShmSegment, first), "not live");
}

}  // namespace
}  // namespace engram::sim
