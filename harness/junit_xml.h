// JUnit XML as CI dashboards read it (`scenario run --junitxml`, `fuzz
// --junitxml`): one <testsuite>, one <testcase> per scenario or seed, a
// <failure message=...> holding what differed and the reproduce line.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/base/xml_escape.h"

namespace engram {

struct JunitCase {
  std::string name;
  std::string classname;
  std::string file{};          // empty: no file attribute
  double seconds = 0;
  bool failed = false;
  std::string failure_message{};  // the first line of what differed
  std::string failure_text{};     // everything: what differed, the reproduce line
};

inline std::string junit_xml(const std::string& suite, const std::vector<JunitCase>& cases) {
  int failed = 0;
  double seconds = 0;
  for (const JunitCase& c : cases) {
    failed += c.failed ? 1 : 0;
    seconds += c.seconds;
  }
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += fmt::format("<testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"{:.3f}\">\n",
                     xml_escape(suite), cases.size(), failed, seconds);
  for (const JunitCase& c : cases) {
    xml += fmt::format("  <testcase name=\"{}\" classname=\"{}\"", xml_escape(c.name), xml_escape(c.classname));
    if (!c.file.empty()) xml += fmt::format(" file=\"{}\"", xml_escape(c.file));
    xml += fmt::format(" time=\"{:.3f}\"", c.seconds);
    if (!c.failed) {
      xml += "/>\n";
      continue;
    }
    xml += fmt::format(">\n    <failure message=\"{}\" type=\"failure\">{}</failure>\n  </testcase>\n",
                       xml_escape(c.failure_message.empty() ? "failed" : c.failure_message),
                       xml_escape(c.failure_text));
  }
  xml += "</testsuite>\n";
  return xml;
}

}  // namespace engram
