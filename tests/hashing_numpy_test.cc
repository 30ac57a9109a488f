// Hash ids bitwise equal to numpy's: tests/numpy_hash_reference.py computes
// SeedSequence / PCG64 / bounded draws, multipliers, primes and row ids with
// numpy as the Engram reference and the engines do; this test recomputes
// every one of them with engramlab's C++ and compares. numpy comes from
// Debian's python3-numpy (tools/setup.sh installs it); without it the test
// skips, saying so.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/model/hashing.h"
#include "core/model/numpy_random.h"
#include "core/model/table_spec.h"

namespace engram {
namespace {

using numpy_random::uint128;

uint128 parse_u128(const std::string& text) {
  uint128 value = 0;
  EXPECT_FALSE(text.empty());
  for (char c : text) {
    EXPECT_TRUE(c >= '0' && c <= '9') << text;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  return value;
}

std::string u128_text(uint128 value) {
  if (value == 0) return "0";
  std::string out;
  while (value > 0) {
    out.insert(out.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  }
  return out;
}

// A python3 that imports numpy: $ENGRAM_PYTHON, Debian's /usr/bin/python3
// (a pyenv shim on PATH may lack numpy), then python3 on PATH.
std::string python_with_numpy() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("ENGRAM_PYTHON")) candidates.emplace_back(env);
  candidates.emplace_back("/usr/bin/python3");
  candidates.emplace_back("python3");
  for (const std::string& python : candidates) {
    const std::string probe = "'" + python + "' -c 'import numpy' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return python;
  }
  return "";
}

struct Reference {
  std::string python;  // "" = no numpy here
  std::string skip_reason;
  std::vector<std::string> lines;
};

// The script runs once per test binary.
const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    r.python = python_with_numpy();
    if (r.python.empty()) {
      r.skip_reason =
          "numpy not found for $ENGRAM_PYTHON, /usr/bin/python3 or python3; apt-get install python3-numpy "
          "(tools/setup.sh does)";
      return r;
    }
    const std::string command = "'" + r.python + "' " + ENGRAM_SOURCE_DIR "/tests/numpy_hash_reference.py";
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
    if (!pipe) {
      ADD_FAILURE() << "cannot run " << command;
      return r;
    }
    std::string text;
    char buffer[1 << 16];
    size_t n = 0;
    while ((n = fread(buffer, 1, sizeof buffer, pipe.get())) > 0) text.append(buffer, n);
    const int status = pclose(pipe.release());
    EXPECT_EQ(status, 0) << command << " failed";
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) r.lines.push_back(line);
    EXPECT_GT(r.lines.size(), 100u) << command << " printed too little";
    return r;
  }();
  return ref;
}

#define REQUIRE_REFERENCE()                                                     \
  do {                                                                          \
    if (reference().python.empty()) GTEST_SKIP() << reference().skip_reason; \
  } while (0)

std::vector<std::string> words_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::vector<int64_t> int64s(const std::vector<std::string>& words, size_t from) {
  std::vector<int64_t> out;
  for (size_t i = from; i < words.size(); ++i) out.push_back(std::stoll(words[i]));
  return out;
}

TEST(HashingNumpy, SeedSequenceAndPcg64MatchNumpy) {
  REQUIRE_REFERENCE();
  int seed_sequences = 0, generators = 0;
  for (const std::string& line : reference().lines) {
    const auto w = words_of(line);
    if (w.empty()) continue;
    if (w[0] == "seedseq") {
      ASSERT_EQ(w.size(), 10u) << line;
      const uint128 entropy = parse_u128(w[1]);
      const std::vector<uint32_t> ours = numpy_random::seed_sequence_words(entropy, 8);
      for (size_t i = 0; i < 8; ++i) EXPECT_EQ(std::to_string(ours[i]), w[2 + i]) << "entropy " << w[1] << " word " << i;
      ++seed_sequences;
    } else if (w[0] == "pcg") {
      ASSERT_EQ(w.size(), 8u) << line;
      numpy_random::Pcg64 g(parse_u128(w[1]));
      EXPECT_EQ(u128_text(g.state()), w[2]) << "entropy " << w[1];
      EXPECT_EQ(u128_text(g.increment()), w[3]) << "entropy " << w[1];
      for (size_t i = 0; i < 4; ++i) EXPECT_EQ(std::to_string(g.next64()), w[4 + i]) << "entropy " << w[1] << " draw " << i;
      ++generators;
    }
  }
  EXPECT_GE(seed_sequences, 10);
  EXPECT_GE(generators, 10);
}

TEST(HashingNumpy, BoundedDrawsMatchGeneratorIntegersAndRandomStateRandint) {
  REQUIRE_REFERENCE();
  int runs = 0;
  for (const std::string& line : reference().lines) {
    const auto w = words_of(line);
    if (w.empty() || w[0] != "draws") continue;
    ASSERT_GE(w.size(), 4u) << line;
    const auto method = w[1] == "lemire" ? numpy_random::BoundedMethod::kLemire : numpy_random::BoundedMethod::kMasked;
    ASSERT_TRUE(w[1] == "lemire" || w[1] == "masked") << line;
    numpy_random::Pcg64 g(parse_u128(w[2]));
    const int calls = std::stoi(w[3]);
    size_t at = 4;
    for (int c = 0; c < calls; ++c) {
      ASSERT_LE(at + 3, w.size()) << line;
      const int64_t low = std::stoll(w[at]), high = std::stoll(w[at + 1]);
      const size_t count = std::stoul(w[at + 2]);
      at += 3;
      // One generator across the calls: a buffered 32-bit half carries over.
      const std::vector<int64_t> ours = numpy_random::bounded_int64(g, low, high, count, method);
      ASSERT_LE(at + count, w.size()) << line;
      for (size_t i = 0; i < count; ++i)
        EXPECT_EQ(ours[i], std::stoll(w[at + i]))
            << w[1] << " entropy " << w[2] << " call " << c << " [" << low << ", " << high << ") value " << i;
      at += count;
    }
    EXPECT_EQ(at, w.size()) << line;
    ++runs;
  }
  EXPECT_EQ(runs, 8);
}

struct Case {
  std::string name;
  ModelSpec spec;
  std::map<int, std::vector<int64_t>> primes, multipliers;  // by layer index
  std::vector<std::vector<int64_t>> sequences;
  // [rule][layer index][sequence] -> row ids, [token][head]
  std::map<std::string, std::map<int, std::map<int, std::vector<int64_t>>>> ids;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string& line : reference().lines) {
    const auto w = words_of(line);
    if (w.empty()) continue;
    if (w[0] == "case") {
      EXPECT_EQ(w.size(), 9u) << line;
      Case c;
      c.name = w[1];
      const int64_t engram_vocab = std::stoll(w[2]);
      const int max_ngram = std::stoi(w[3]);
      const int heads = std::stoi(w[4]);
      std::vector<int> orders;
      for (int n = 2; n <= max_ngram; ++n) orders.push_back(n);
      std::vector<int> layers;
      std::istringstream list(w[8]);
      for (std::string id; std::getline(list, id, ',');) layers.push_back(std::stoi(id));
      auto spec = make_model_spec(c.name, engram_vocab, layers, orders, heads, RowFormat::kBf16, 2, 0);
      EXPECT_TRUE(spec.is_ok()) << spec.status().to_string();
      if (!spec.is_ok()) return {};
      c.spec = spec.value();
      c.spec.compressed_vocab_size = std::stoll(w[5]);
      c.spec.pad_id = std::stoll(w[6]);
      c.spec.seed = std::stoull(w[7]);
      EXPECT_TRUE(validate(c.spec).is_ok()) << line;
      out.push_back(std::move(c));
      continue;
    }
    if (w[0] == "end") continue;
    if (w[0] != "primes" && w[0] != "mult" && w[0] != "seq" && w[0] != "ids") continue;
    EXPECT_FALSE(out.empty()) << "record before any case: " << line;
    if (out.empty()) return {};
    Case& c = out.back();
    if (w[0] == "primes") c.primes[std::stoi(w[1])] = int64s(w, 2);
    if (w[0] == "mult") c.multipliers[std::stoi(w[1])] = int64s(w, 2);
    if (w[0] == "seq") {
      EXPECT_EQ(std::stoul(w[1]), c.sequences.size()) << line;
      c.sequences.push_back(int64s(w, 2));
    }
    if (w[0] == "ids") c.ids[w[1]][std::stoi(w[2])][std::stoi(w[3])] = int64s(w, 4);
  }
  return out;
}

DeadTokenRule rule_named(const std::string& name) {
  auto rule = parse_dead_token_rule(name);
  EXPECT_TRUE(rule.has_value()) << name;
  return rule.value_or(DeadTokenRule::kBarrier);
}

// The first [token][head] where two id lists differ, as text ("" = equal).
std::string first_difference(const std::vector<int64_t>& ours, const std::vector<int64_t>& numpy, size_t heads) {
  if (ours.size() != numpy.size())
    return "length " + std::to_string(ours.size()) + " vs numpy's " + std::to_string(numpy.size());
  for (size_t i = 0; i < ours.size(); ++i)
    if (ours[i] != numpy[i])
      return "token " + std::to_string(i / heads) + " head " + std::to_string(i % heads) + ": " +
             std::to_string(ours[i]) + " vs numpy's " + std::to_string(numpy[i]);
  return "";
}

TEST(HashingNumpy, MultipliersPrimesAndRowIdsMatchNumpy) {
  REQUIRE_REFERENCE();
  const std::vector<Case> all = cases();
  ASSERT_EQ(all.size(), 10u);
  // Distinct sequences and tokens, then what was compared: each sequence is
  // hashed per layer under each of the three DEAD rules.
  size_t sequences = 0, tokens = 0, v41_sequences = 0, v41_tokens = 0;
  size_t sequences_compared = 0, tokens_compared = 0, ids_compared = 0;
  for (const Case& c : all) {
    SCOPED_TRACE("case " + c.name);
    sequences += c.sequences.size();
    for (const auto& s : c.sequences) tokens += s.size();
    if (c.spec.engram_vocab_size == 16'000'000) {
      v41_sequences += c.sequences.size();
      for (const auto& s : c.sequences) v41_tokens += s.size();
    }
    for (size_t t = 0; t < c.spec.tables.size(); ++t) {
      const int layer = static_cast<int>(t);
      ASSERT_TRUE(c.primes.count(layer) && c.multipliers.count(layer));
      EXPECT_EQ(c.spec.tables[t].primes, c.primes.at(layer)) << "layer index " << layer;
      EXPECT_EQ(hash_multipliers(c.spec, layer), c.multipliers.at(layer)) << "layer id " << c.spec.tables[t].layer_id;
    }
    ASSERT_EQ(c.ids.size(), 3u);
    for (const auto& [rule_name, by_layer] : c.ids) {
      ModelSpec spec = c.spec;
      spec.dead_token_rule = rule_named(rule_name);
      for (const auto& [layer, by_sequence] : by_layer) {
        auto hasher = TableHasher::create(spec, layer);
        ASSERT_TRUE(hasher.is_ok()) << hasher.status().to_string();
        const size_t heads = static_cast<size_t>(hasher->head_count());
        // Each sequence alone, then all of them as one batch cut by
        // sequence-start flags: the same ids either way.
        std::vector<int64_t> batch, batch_want;
        std::vector<uint8_t> starts;
        for (const auto& [index, want] : by_sequence) {
          const std::vector<int64_t>& tokens = c.sequences.at(static_cast<size_t>(index));
          std::vector<int64_t> got(tokens.size() * heads);
          ASSERT_TRUE(hasher->hash(tokens, {}, got).is_ok());
          const std::string diff = first_difference(got, want, heads);
          EXPECT_EQ(diff, "") << rule_name << " layer index " << layer << " sequence " << index;
          ++sequences_compared;
          tokens_compared += tokens.size();
          ids_compared += got.size();
          for (size_t i = 0; i < tokens.size(); ++i) starts.push_back(i == 0);
          batch.insert(batch.end(), tokens.begin(), tokens.end());
          batch_want.insert(batch_want.end(), want.begin(), want.end());
        }
        std::vector<int64_t> got(batch.size() * heads);
        ASSERT_TRUE(hasher->hash(batch, starts, got).is_ok());
        EXPECT_EQ(first_difference(got, batch_want, heads), "") << rule_name << " layer index " << layer << " batch";
      }
    }
  }
  std::cout << "numpy reference: " << all.size() << " cases, " << sequences << " sequences of " << tokens
            << " tokens (" << v41_sequences << " / " << v41_tokens << " at V4.1's sizes); " << sequences_compared
            << " sequence hashes (layers x 3 DEAD rules) of " << tokens_compared << " tokens, " << ids_compared
            << " row ids, equal to numpy's (each layer and rule also as one batch)\n";
  EXPECT_GT(tokens_compared, 10000u);
}

}  // namespace
}  // namespace engram
