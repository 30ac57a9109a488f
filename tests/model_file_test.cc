// Model files: the shipped V4.1 files give the published figures, the
// one-layer file is layer 1 of the two-layer model, a model of one's own
// (3 layers of 16 heads, BF16 rows, a vocabulary per order) builds, every
// value is bounded with an error naming the file, line, field and fix, and
// the prime search ends fast for any accepted value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/model/model_file.h"
#include "core/model/table_spec.h"
#include "core/model/gpu_models.h"
#include "tests/golden_messages.h"
#include "tests/temp_dir.h"

namespace engram {
namespace {

using ::engram::testing::golden_message;

using ::testing::HasSubstr;

const std::string kModels = std::string(ENGRAM_SOURCE_DIR) + "/models/";

TEST(ModelFile, TheV41FileGivesThePublishedRowsAndBytes) {
  auto spec = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  ASSERT_EQ(spec->tables.size(), 2u);
  EXPECT_EQ(spec->tables[0].layer_id, 1);
  EXPECT_EQ(spec->tables[1].layer_id, 14);
  EXPECT_EQ(spec->tables[0].row_count(), 384'006'168);
  EXPECT_EQ(spec->tables[1].row_count(), 384'016'682);
  EXPECT_EQ(spec->tables[0].table_bytes(), 101'377'628'352ull);
  EXPECT_EQ(spec->tables[1].table_bytes(), 101'380'404'048ull);
  EXPECT_EQ(spec->tables[0].row_bytes(), 264u);
  EXPECT_EQ(spec->compressed_vocab_size, 99'092);
  EXPECT_EQ(spec->pad_id, 2);
  // The same file read from its path gives the same model.
  auto from_file = model_preset(kModels + "deepseek-v4.1-flash.yaml");
  ASSERT_TRUE(from_file.is_ok()) << from_file.status().to_string();
  EXPECT_EQ(from_file->tables[1].primes, spec->tables[1].primes);
  EXPECT_EQ(from_file->source_path, kModels + "deepseek-v4.1-flash.yaml");
}

TEST(ModelFile, TheOneLayerFileIsLayerOneOfTheTwoLayerModel) {
  auto one = model_preset("deepseek-v4.1-flash-layer1");
  auto both = model_preset("deepseek-v4.1-flash");
  ASSERT_TRUE(one.is_ok() && both.is_ok());
  ASSERT_EQ(one->tables.size(), 1u);
  EXPECT_EQ(one->tables[0].primes, both->tables[0].primes);
  EXPECT_EQ(one->table_bytes_total(), 101'377'628'352ull);  // 94.415 GiB: fits one H200
  EXPECT_EQ(one->seed, both->seed);
}

TEST(ModelFile, EveryShippedFileIsAPresetOfItsOwnName) {
  const std::vector<std::string> names = model_preset_names();
  EXPECT_THAT(names, ::testing::IsSupersetOf({"deepseek-v4.1-flash", "deepseek-v4.1-flash-layer1", "tiny", "tiny-8h",
                                              "tiny-7h", "example-3x16-bf16"}));
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kModels)) files += entry.path().extension() == ".yaml";
  EXPECT_EQ(files, names.size()) << "every models/*.yaml is compiled in";
  for (const std::string& name : names) {
    auto spec = model_preset(name);
    ASSERT_TRUE(spec.is_ok()) << name << ": " << spec.status().to_string();
    EXPECT_EQ(spec->name, name);
  }
}

TEST(ModelFile, AModelOfOnesOwnThreeLayersOfSixteenHeadsInBf16) {
  auto spec = model_preset(kModels + "example-3x16-bf16.yaml");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  ASSERT_EQ(spec->tables.size(), 3u);
  for (const TableSpec& t : spec->tables) {
    EXPECT_EQ(t.head_count(), 16);
    EXPECT_EQ(t.row_format, RowFormat::kBf16);
    EXPECT_EQ(t.row_bytes(), 256u);
    // Each order's search starts above its own vocabulary size.
    for (int h = 0; h < 8; ++h) EXPECT_GT(t.primes[static_cast<size_t>(h)], 599);
    for (int h = 8; h < 16; ++h) EXPECT_GT(t.primes[static_cast<size_t>(h)], 899);
  }
  EXPECT_EQ(spec->serving.weights_bytes_per_gpu(2), uint64_t{30} << 30);
  EXPECT_EQ(spec->serving.weights_bytes_per_gpu(3), std::nullopt);
  EXPECT_EQ(spec->serving.kv_bytes_per_token, 70u * 1024);
}

// The fields of a small valid file, with one line replaced.
std::string model_text(const std::string& replace_line = "", const std::string& with = "") {
  std::string text =
      "name: mine\n"
      "tables:\n"
      "  layers: [1]\n"
      "  orders: [2, 3]\n"
      "  heads_per_order: 2\n"
      "  engram_vocab_size: 100\n"
      "  dim: 64\n"
      "  row_format: fp8_e4m3_ue8m0\n"
      "hashing:\n"
      "  compressed_vocab_size: 50\n"
      "  pad_id: 2\n";
  if (!replace_line.empty()) {
    const size_t at = text.find(replace_line);
    EXPECT_NE(at, std::string::npos) << replace_line;
    text.replace(at, replace_line.size(), with);
  }
  return text;
}

std::string error_of(const std::string& text) {
  auto spec = parse_model_file(text, "mine.yaml");
  EXPECT_FALSE(spec.is_ok());
  if (spec.is_ok()) return "";
  EXPECT_EQ(spec.status().code(), ErrorCode::kInvalidArgument);
  return spec.status().message();
}

// model_preset keeps a file's model by the file's identity: a long-lived
// process (a Python session) sees an edit, in place or by a new file put in
// its stead. The edit in place changes the size and the new file has a new
// inode, so the identity differs however coarse the file system's
// timestamps are.
TEST(ModelFile, AnEditedFileIsReadAgain) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/mine.yaml";
  auto write = [&](const std::string& at, const std::string& text) { std::ofstream(at) << text; };
  write(path, model_text());
  auto first = model_preset(path);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_EQ(first->tables[0].dim, 64);
  write(path, model_text("dim: 64", "dim: 128"));  // in place
  auto edited = model_preset(path);
  ASSERT_TRUE(edited.is_ok()) << edited.status().to_string();
  EXPECT_EQ(edited->tables[0].dim, 128);
  write(path + ".new", model_text("heads_per_order: 2", "heads_per_order: 4"));
  std::filesystem::rename(path + ".new", path);  // replaced, as editors save
  auto replaced = model_preset(path);
  ASSERT_TRUE(replaced.is_ok()) << replaced.status().to_string();
  EXPECT_EQ(replaced->tables[0].head_count(), 8);
  EXPECT_EQ(replaced->tables[0].dim, 64);
}

TEST(ModelFile, EveryValueIsBoundedWithAnErrorNamingTheLineTheFieldAndTheFix) {
  ASSERT_TRUE(parse_model_file(model_text(), "mine.yaml").is_ok());
  EXPECT_THAT(error_of(model_text("  dim: 64", "  dim: 60")),
              HasSubstr("mine.yaml: line 7, column 8: tables.dim: 60 is not a multiple of 32"));
  EXPECT_THAT(error_of(model_text("  engram_vocab_size: 100", "  engram_vocab_size: 9223372036854775783")),
              HasSubstr("line 6, column 22: tables.engram_vocab_size: '9223372036854775783' is not a whole number in "
                        "[2, 1099511627776]"));
  EXPECT_THAT(error_of(model_text("  engram_vocab_size: 100", "  engram_vocab_size: [100, 200, 300]")),
              HasSubstr("tables.engram_vocab_size: 3 sizes for 2 n-gram orders"));
  EXPECT_THAT(error_of(model_text("  orders: [2, 3]", "  orders: [2, 2]")),
              HasSubstr("tables.orders: order 2 is given twice"));
  EXPECT_THAT(error_of(model_text("  layers: [1]", "  layers: [1, 1]")),
              HasSubstr("tables.layers: layer id 1 is given twice"));
  EXPECT_THAT(error_of(model_text("  row_format: fp8_e4m3_ue8m0", "  row_format: fp16")),
              HasSubstr("tables.row_format: 'fp16' is not a row format; write fp8_e4m3_ue8m0"));
  EXPECT_THAT(error_of(model_text("  pad_id: 2", "  pad_id: 50")),
              HasSubstr("hashing.pad_id: '50' is not a whole number in [0, 49]"));
  EXPECT_THAT(error_of(model_text("  heads_per_order: 2", "  heads_per_order: 0")),
              HasSubstr("tables.heads_per_order: '0' is not a whole number in [1, 1024]"));
  EXPECT_THAT(error_of(model_text("  heads_per_order: 2\n", "")), HasSubstr("tables.heads_per_order: missing"));
  EXPECT_THAT(error_of(model_text("hashing:\n  compressed_vocab_size: 50\n  pad_id: 2\n", "")),
              HasSubstr("hashing: missing"));
  EXPECT_THAT(error_of(model_text("  dim: 64", "  dims: 64")), HasSubstr("dims"));
  EXPECT_THAT(error_of(model_text() + "serving: {kv_bytes_per_token: 70}\n"), HasSubstr(golden_message("size.no_unit")));
  EXPECT_THAT(error_of(model_text() + "serving: {weights_per_gpu: {0: 1GiB}}\n"),
              HasSubstr("serving.weights_per_gpu: '0' is not a whole number"));
}

TEST(ModelFile, AFileWithFiveMistakesReportsAllFiveInOneRun) {
  const std::string text =
      "name: mine\n"
      "tables:\n"
      "  layers: [1, x]\n"           // not a number
      "  orders: [2, 3]\n"
      "  heads_per_order: 0\n"       // out of range
      "  engram_vocab_size: 100\n"
      "  dim: 64\n"
      "  row_format: fp16\n"         // no such format
      "  colour: blue\n"             // unknown field
      "hashing:\n"
      "  compressed_vocab_size: 50\n"
      "  pad_id: 2\n"
      "  dead_tokens: skip\n";       // no such rule
  const std::string all = error_of(text);
  EXPECT_THAT(all, HasSubstr("line 3, column 15: tables.layers[1]: 'x' is not a whole number"));
  EXPECT_THAT(all, HasSubstr("line 5, column 20: tables.heads_per_order: '0'"));
  EXPECT_THAT(all, HasSubstr("line 8, column 15: tables.row_format: 'fp16'"));
  EXPECT_THAT(all, HasSubstr("line 9, column 3: tables.colour: unknown field 'colour'"));
  EXPECT_THAT(all, HasSubstr("line 13, column 16: hashing.dead_tokens: 'skip'"));
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 4) << all;
}

TEST(ModelFile, ThePrimeTestIsFastAndExactNearTwoToTheSixtyThree) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(is_prime(9'223'372'036'854'775'783));   // the largest prime below 2^63
  EXPECT_FALSE(is_prime(9'223'372'036'854'775'807));  // 2^63 - 1 = 7^2 x 73 x 127 x 337 x 92737 x 649657
  EXPECT_FALSE(is_prime(9'223'372'036'854'775'781));
  EXPECT_TRUE(is_prime(4'294'967'291));               // the largest prime below 2^32
  EXPECT_FALSE(is_prime(3'215'031'751));              // a strong pseudoprime to bases 2, 3, 5 and 7
  // Trial division takes tens of seconds near 2^63 (3 x 10^9 divisions), the
  // deterministic Miller-Rabin test microseconds: 5 s tells them apart on
  // any machine, under any load.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Against trial division over a range.
  auto slow = [](int64_t n) {
    if (n < 2) return false;
    for (int64_t d = 2; d * d <= n; ++d)
      if (n % d == 0) return false;
    return true;
  };
  for (int64_t n = 0; n < 20000; ++n) ASSERT_EQ(is_prime(n), slow(n)) << n;
  // The largest accepted vocabulary draws its primes fast.
  const auto drawn = std::chrono::steady_clock::now();
  auto big = make_model_spec("big", kMaxEngramVocabSize, {1}, {2, 3, 4}, 8, RowFormat::kBf16, 2, 0);
  ASSERT_TRUE(big.is_ok()) << big.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - drawn, std::chrono::seconds(5));
}

TEST(ModelFile, AGpuFileDescribesAGpuTheTableLacks) {
  auto h20 = find_gpu_model("h20");
  ASSERT_TRUE(h20.is_ok());
  EXPECT_EQ(h20->name, "H20");
  EXPECT_THAT(h20->memory_source, HasSubstr("95.1 GiB"));
  EXPECT_EQ(h20->vmm_granularity_bytes, kVmmGranularityBytes);
  EXPECT_TRUE(find_gpu_model("GB300")->fabric);
  EXPECT_FALSE(find_gpu_model("H200")->fabric);
  auto file = parse_gpu_file("name: L40S\nmemory: 44.4GiB\nmemory_source: measured here\nfabric: false\n", "l40s.yaml");
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ(file->name, "L40S");
  EXPECT_NEAR(static_cast<double>(file->memory_bytes), 44.4 * 1024 * 1024 * 1024, 1024.0);
  const Status bad = parse_gpu_file("name: X\nmemory: 44\n", "x.yaml").status();
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("x.yaml: line 2, column 9: memory"));
  EXPECT_THAT(bad.message(), HasSubstr(golden_message("size.no_unit")));
  EXPECT_THAT(find_gpu_model("A100").status().message(), HasSubstr("the path of a GPU file"));
}

}  // namespace
}  // namespace engram
