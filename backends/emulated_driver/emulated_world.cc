#include "backends/emulated_driver/emulated_world.h"

#include <cstdlib>
#include <map>
#include <sstream>

namespace engram::emulated {
namespace {

bool parse_u64(const std::string& text, uint64_t& out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19) return false;
  out = std::strtoull(text.c_str(), nullptr, 10);
  return true;
}

bool parse_int(const std::string& text, int& out, int minimum) {
  bool negative = !text.empty() && text[0] == '-';
  uint64_t value = 0;
  if (!parse_u64(negative ? text.substr(1) : text, value) || value > 1'000'000) return false;
  out = negative ? -static_cast<int>(value) : static_cast<int>(value);
  return out >= minimum;
}

}  // namespace

std::string unwritable_world_value(const std::string& value) {
  for (unsigned char c : value)
    if (c <= ' ' || c == '=' || c == 0x7f) return "holds a space, '=' or a control character";
  return "";
}

bool parse_world(const std::string& text, World& out, std::string& error) {
  out = World{};
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  bool header = false;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    auto fail = [&](const std::string& why) {
      error = "line " + std::to_string(number) + ": " + why;
      return false;
    };
    if (!header) {
      std::string version;
      words >> version;
      if (kind != "engramlab-emulated-world" || version != "1")
        return fail("not an emulated world file (expected 'engramlab-emulated-world 1')");
      header = true;
      continue;
    }
    if (kind == "ranks") {
      int host = 0;
      for (std::string word; words >> word;) {
        if (!parse_int(word, host, 0)) return fail("ranks: '" + word + "' is not a host index");
        out.rank_hosts.push_back(host);
      }
      continue;
    }
    std::map<std::string, std::string> fields;
    for (std::string word; words >> word;) {
      const size_t eq = word.find('=');
      if (eq == std::string::npos) return fail(kind + ": '" + word + "' is not key=value");
      fields[word.substr(0, eq)] = word.substr(eq + 1);
    }
    auto flag = [&](const char* key, bool& value) {
      auto it = fields.find(key);
      if (it == fields.end()) return true;
      if (it->second != "0" && it->second != "1") return false;
      value = it->second == "1";
      return true;
    };
    if (kind == "host") {
      WorldHost h;
      h.name = fields["name"];
      h.boot_id = fields["boot_id"].empty() ? "boot-" + h.name : fields["boot_id"];
      h.model = fields["model"];
      h.domain = fields["domain"] == "-" ? "" : fields["domain"];
      if (h.name.empty()) return fail("host: name= is missing");
      if (!parse_int(fields["gpus"], h.gpus, 1)) return fail("host " + h.name + ": gpus='" + fields["gpus"] + "'");
      if (!parse_u64(fields["memory_bytes"], h.memory_bytes) || h.memory_bytes == 0)
        return fail("host " + h.name + ": memory_bytes='" + fields["memory_bytes"] + "'");
      if (!parse_u64(fields["granularity_bytes"], h.granularity_bytes) || h.granularity_bytes == 0 ||
          (h.granularity_bytes & (h.granularity_bytes - 1)) != 0)
        return fail("host " + h.name + ": granularity_bytes='" + fields["granularity_bytes"] +
                    "' (a power of two)");
      if (!flag("imex", h.imex) || !flag("fabric", h.fabric) || !flag("posix", h.posix))
        return fail("host " + h.name + ": imex, fabric and posix are 0 or 1");
      if (fields.count("visible_gpus_per_rank") &&
          !parse_int(fields["visible_gpus_per_rank"], h.visible_gpus_per_rank, 0))
        return fail("host " + h.name + ": visible_gpus_per_rank='" + fields["visible_gpus_per_rank"] + "'");
      out.hosts.push_back(h);
    } else if (kind == "fault") {
      WorldFault f;
      f.site = fields["site"];
      static const char* kSites[] = {"create", "export", "import", "map", "access", "hang", "slow"};
      bool known = false;
      for (const char* s : kSites) known |= f.site == s;
      if (!known) return fail("fault: site='" + f.site + "' (create, export, import, map, access, hang or slow)");
      if (fields.count("rank") && !parse_int(fields["rank"], f.rank, -1)) return fail("fault: rank='" + fields["rank"] + "'");
      if (fields.count("nth") && !parse_int(fields["nth"], f.nth, 0)) return fail("fault: nth='" + fields["nth"] + "'");
      if (fields.count("delay_ms") && !parse_int(fields["delay_ms"], f.delay_ms, 0))
        return fail("fault: delay_ms='" + fields["delay_ms"] + "'");
      out.faults.push_back(f);
    } else {
      return fail("unknown record '" + kind + "' (host, ranks or fault)");
    }
  }
  if (!header) {
    error = "empty: not an emulated world file";
    return false;
  }
  if (out.hosts.empty()) {
    error = "no host records";
    return false;
  }
  for (int h : out.rank_hosts) {
    if (h >= static_cast<int>(out.hosts.size())) {
      error = "ranks: host index " + std::to_string(h) + " but only " + std::to_string(out.hosts.size()) + " hosts";
      return false;
    }
  }
  return true;
}

}  // namespace engram::emulated
