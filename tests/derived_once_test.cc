// DerivedOnce (core/base/derived_once.h): one object of each type, made by
// the first caller, and freed with the value it belongs to.
#include "core/base/derived_once.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace engram {
namespace {

struct Length {
  size_t chars = 0;
};
struct Upper {
  std::string text;
};

TEST(DerivedOnce, MakesEachTypeOnceAndFreesItWithItsOwner) {
  auto owner = std::make_shared<const DerivedOnce>();
  int made = 0;
  auto length = [&] {
    ++made;
    return std::make_shared<const Length>(Length{5});
  };
  const std::shared_ptr<const Length> first = owner->get_or_make<const Length>(length);
  const std::shared_ptr<const Length> second = owner->get_or_make<const Length>(length);
  EXPECT_EQ(made, 1);
  EXPECT_EQ(first, second);
  EXPECT_EQ(first->chars, 5u);
  // Another type has a slot of its own.
  auto upper = owner->get_or_make<Upper>([&] {
    ++made;
    return std::make_shared<Upper>(Upper{"HELLO"});
  });
  EXPECT_EQ(made, 2);
  EXPECT_EQ(upper->text, "HELLO");
  EXPECT_EQ(owner->get_or_make<const Length>(length), first);

  const std::weak_ptr<const Length> kept = first;
  const std::weak_ptr<Upper> kept_upper = upper;
  owner.reset();
  EXPECT_FALSE(kept.expired());  // a reader still holds it
  upper.reset();
  EXPECT_TRUE(kept_upper.expired());
}

}  // namespace
}  // namespace engram
