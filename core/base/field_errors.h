// Every error of one input file, for one report. The field readers of the
// deployment and scenario files add each error here and read on, instead of
// returning at the first, so a file with five mistakes shows all five in one
// run; status() is one invalid_argument listing them, one a line, each as
// the reader wrote it: "<file>: line L, column C: <field>: <what>; <fix>".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/base/status.h"

namespace engram {

class FieldErrors {
 public:
  // At most this many are listed; the rest are counted.
  static constexpr size_t kMaxListed = 20;

  // Keeps a failed status, each line of its message an error of its own
  // (a nested reader's list stays one error a line); true when it was ok.
  bool add(const Status& status);

  // `field` = the value, or its error kept; true when set.
  template <typename T, typename Field>
  bool set(Field& field, Result<T> value) {
    if (!value.is_ok()) return add(value.status());
    field = std::move(value).value();
    return true;
  }

  bool empty() const { return errors_.empty(); }
  size_t count() const { return errors_.size(); }

  // Ok when nothing was kept; else invalid_argument (the code of the first
  // error, where there is one error) with each error on its own line, in the
  // order of their lines and columns in the file (errors of the whole file,
  // without a position, first), the same error given twice listed once.
  Status status() const;

 private:
  struct Entry {
    size_t line = 0, column = 0;  // 0: no position in the text
    std::string text;
  };
  std::vector<Entry> errors_;
  ErrorCode first_code_ = ErrorCode::kOk;
};

}  // namespace engram
