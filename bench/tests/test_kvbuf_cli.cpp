// Runs the built `kvbuf` binary: commands that must succeed do, every bad input exits exactly 2
// with a message, and `kvbuf export` writes .npy files whose shapes match the manifest and whose
// outputs and final states equal a fresh recurrent reference run on the exported inputs.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "bench/npy.h"
#include "reference/cross_checks.h"
#include "reference/gdn.h"
#include "reference/mamba2.h"

namespace kvbuf {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int status = -1;
  std::string out, err;
};

fs::path scratch_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("kvbuf_cli_tests_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CliRun kvbuf(const std::string& args) {
  static int counter = 0;
  const fs::path dir = scratch_dir("run" + std::to_string(counter++));
  const std::string cmd = std::string(KVBUF_CLI_PATH) + " " + args + " >" + (dir / "out").string() +
                          " 2>" + (dir / "err").string();
  const int raw = std::system(cmd.c_str());
  CliRun r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  return r;
}

void expect_usage_error(const std::string& args, const std::string& message_part) {
  const CliRun r = kvbuf(args);
  EXPECT_EQ(r.status, 2) << "kvbuf " << args << "\nstdout: " << r.out << "\nstderr: " << r.err;
  EXPECT_NE(r.err.find(message_part), std::string::npos)
      << "kvbuf " << args << ": stderr lacks '" << message_part << "':\n"
      << r.err;
}

TEST(KvbufCli, ModelsListsTheCatalog) {
  const CliRun r = kvbuf("models");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* name : {"qwen3-next-80b-a3b", "qwen3.5-397b-a17b", "nemotron-3-super-120b-a12b"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
  const size_t next = r.out.find("qwen3-next-80b-a3b");
  const std::string next_line = r.out.substr(next, r.out.find('\n', next) - next);
  EXPECT_NE(next_line.rfind("bf16"), std::string::npos) << next_line;  // its engine state dtype
}

TEST(KvbufCli, BytesTableAndCsv) {
  const fs::path csv = scratch_dir("bytes") / "bytes.csv";
  const CliRun r =
      kvbuf("bytes --model qwen3-next-80b-a3b --batch 1,64 --chunk 4,16 --drafts 4 --csv " +
            csv.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("verify-kvbuffer"), std::string::npos);
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header.rfind("model,tp,kind,variant", 0), 0u);
  EXPECT_NE(header.find("read_bytes"), std::string::npos);
  int rows = 0;
  bool saw_state = false;
  while (std::getline(in, line)) {
    ++rows;
    // The recurrent state row at batch 64: 64 x 32 x 128 x 128 x 4 bytes read and written.
    if (line.find(",recurrent,64,") != std::string::npos &&
        line.find(",state,fp32,") != std::string::npos) {
      saw_state = true;
      EXPECT_NE(line.find(",134217728.0,134217728.0,268435456.0,"), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(saw_state);
  // Per batch: recurrent 6 tensors, verify-classic 7 x 2, per C: kvbuffer 9, direct 9 (8 and the
  // state its overflow fold creates), verify-kvbuffer 12.
  EXPECT_EQ(rows, 2 * (6 + 14 + 2 * (9 + 9 + 12)));
  // --summary drops the per-tensor tables but keeps the totals.
  const CliRun summary = kvbuf("bytes --model qwen3-next-80b-a3b --batch 1 --chunk 16 --summary");
  ASSERT_EQ(summary.status, 0) << summary.err;
  EXPECT_EQ(summary.out.find("read_bytes"), std::string::npos);
  EXPECT_NE(summary.out.find("1.789x"), std::string::npos) << summary.out;
}

// A bundle's binary names the bundle's commit when $KVBUF_COMMIT is unset (a GPU run without
// scripts/run.sh), and $KVBUF_COMMIT wins when set.
TEST(KvbufCli, CommitFromTheBundleOrTheEnvironment) {
  const fs::path bundle = scratch_dir("bundle");
  fs::create_directories(bundle / "bin");
  fs::copy_file(KVBUF_CLI_PATH, bundle / "bin" / "kvbuf");
  std::ofstream(bundle / "COMMIT") << "feedc0de1234-dirty";
  auto commit_column = [&](const std::string& env) {
    const fs::path csv = bundle / "bytes.csv";
    const std::string cmd = env + " " + (bundle / "bin" / "kvbuf").string() +
                            " bytes --model qwen3-next-80b-a3b --batch 1 --chunk 4 --summary --csv " + csv.string() +
                            " >/dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(csv);
    std::string header, line;
    std::getline(in, header);
    std::getline(in, line);
    EXPECT_EQ(header.substr(header.rfind(',') + 1), "commit");
    return line.substr(line.rfind(',') + 1);
  };
  EXPECT_EQ(commit_column("env -u KVBUF_COMMIT"), "feedc0de1234-dirty");
  EXPECT_EQ(commit_column("env KVBUF_COMMIT=0123456789ab"), "0123456789ab");
  fs::remove(bundle / "COMMIT");
  EXPECT_EQ(commit_column("env -u KVBUF_COMMIT"), "unknown");
}

TEST(KvbufCli, CapacityModelled) {
  const fs::path csv = scratch_dir("capacity") / "capacity.csv";
  const CliRun r = kvbuf(
      "capacity --model all --tp 2 --drafts all --chunk 8 --context 4096 --csv " + csv.string());
  ASSERT_EQ(r.status, 0) << r.err;
  std::ifstream in(csv);
  std::string line;
  int rows = -1;
  while (std::getline(in, line)) ++rows;
  EXPECT_EQ(rows, 11 * 8);
  const CliRun one = kvbuf("capacity --model qwen3-next-80b-a3b --tp 2 --drafts 4 --chunk 16");
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_NE(one.out.find("4.576x"), std::string::npos) << one.out;
  // A 16-bit state halves the states, not the entries: KVBuffer's advantage shrinks.
  const fs::path csv16 = scratch_dir("capacity") / "capacity_bf16.csv";
  const CliRun bf16 = kvbuf("capacity --model qwen3-next-80b-a3b --tp 2 --drafts 4 --chunk 16 --state-dtype bf16 --csv " +
                            csv16.string());
  ASSERT_EQ(bf16.status, 0) << bf16.err;
  EXPECT_NE(bf16.out.find("bf16 states"), std::string::npos) << bf16.out;
  std::ifstream in16(csv16);
  std::string header, row;
  std::getline(in16, header);
  std::getline(in16, row);
  EXPECT_NE(header.find(",variant,state_dtype,scheduler,"), std::string::npos) << header;
  EXPECT_NE(row.find(",cached-u,bf16,reserve,"), std::string::npos) << row;
  const size_t x = bf16.out.find("x |");
  ASSERT_NE(x, std::string::npos) << bf16.out;
  const double ratio = std::stod(bf16.out.substr(bf16.out.rfind(' ', x) + 1));
  EXPECT_GT(ratio, 3.0);
  EXPECT_LT(ratio, 4.576);
}

// --state-dtype all (or a list): a table and a CSV row per state dtype, in the order given, each with
// the model's ratio counting what --measure allocates (the T verify-scratch entries) next to the
// plain one; the measured columns stay empty without --measure.
TEST(KvbufCli, CapacityPerStateDtype) {
  const fs::path csv = scratch_dir("capacity_states") / "capacity.csv";
  const CliRun r = kvbuf("capacity --model qwen3-next-80b-a3b --drafts 4 --chunk 16 --weights-gib 0 --state-dtype all --csv " +
                         csv.string());
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* table : {"\nfp32 states\n", "\nbf16 states\n", "\nfp16 states\n"})
    EXPECT_NE(r.out.find(table), std::string::npos) << table << r.out;
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  for (std::stringstream ss(line); std::getline(ss, line, ',');) header.push_back(line);
  auto at = [&](const std::string& row, const std::string& column) {
    std::vector<std::string> f;
    std::stringstream ss(row);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    if (!row.empty() && row.back() == ',') f.push_back("");
    const size_t i = size_t(std::find(header.begin(), header.end(), column) - header.begin());
    return i < f.size() ? f[i] : std::string("<no column " + column + ">");
  };
  std::vector<std::string> rows;
  while (std::getline(in, line)) rows.push_back(line);
  ASSERT_EQ(rows.size(), 3u);
  // 141 GiB at T = 4, C = 16: classic keeps 5 states, KVBuffer one and 16 (+ 4 scratch) entries.
  const std::vector<std::vector<std::string>> want = {{"fp32", "4.576419", "4.481505"},
                                                      {"bf16", "4.233807", "4.077596"},
                                                      {"fp16", "4.233807", "4.077596"}};
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(at(rows[i], "state_dtype"), want[i][0]) << rows[i];
    EXPECT_EQ(at(rows[i], "ratio_linear"), want[i][1]) << rows[i];
    EXPECT_EQ(at(rows[i], "ratio_linear_allocated"), want[i][2]) << rows[i];
    for (const char* c : {"measured_kvbuffer_max_requests", "measured_ratio", "measured_over_model", "gpu"})
      EXPECT_EQ(at(rows[i], c), "") << c << ": " << rows[i];
  }
  // A list keeps its order and drops repeats.
  const CliRun two = kvbuf("capacity --model qwen3-next-80b-a3b --drafts 4 --chunk 16 --state-dtype bf16,fp32,bf16");
  ASSERT_EQ(two.status, 0) << two.err;
  const size_t b = two.out.find("\nbf16 states\n"), f = two.out.find("\nfp32 states\n");
  ASSERT_NE(b, std::string::npos) << two.out;
  ASSERT_NE(f, std::string::npos) << two.out;
  EXPECT_LT(b, f);
  EXPECT_EQ(two.out.find("bf16 states", b + 2), std::string::npos) << two.out;
  expect_usage_error("capacity --model qwen3-next-80b-a3b --state-dtype fp32,fp8", "--state-dtype: unknown state dtype 'fp8'");
}

TEST(KvbufCli, BadInputExitsTwoWithAMessage) {
  const std::string q = "--model qwen3-next-80b-a3b ";
  expect_usage_error("", "subcommand");
  expect_usage_error("frobnicate", "frobnicate");
  expect_usage_error("bytes --model nope", "unknown model 'nope'");
  expect_usage_error("bytes " + q + "--batch 0", "--batch must be a positive integer");
  expect_usage_error("bytes " + q + "--batch -3", "--batch");
  expect_usage_error("bytes " + q + "--batch abc", "batch");
  expect_usage_error("bytes " + q + "--chunk 0", "--chunk must be a positive integer");
  expect_usage_error("bytes " + q + "--chunk 100000", "buffer capacity C must be in 1..65536");
  expect_usage_error("bytes " + q + "--batch 99999999999", "batch");
  expect_usage_error("bytes " + q + "--chunk 4 --drafts 5", "exceeds buffer capacity");
  expect_usage_error("bytes " + q + "--drafts 4 --accept 5", "--accept");
  expect_usage_error("bytes " + q + "--tp 3", "not divisible by --tp 3");
  expect_usage_error("bytes " + q + "--tp 0", "--tp must be at least 1");
  expect_usage_error("bytes " + q + "--variant fast", "unknown buffer variant");
  expect_usage_error("bytes " + q + "--state-dtype int4", "unknown state dtype");
  expect_usage_error("bytes " + q + "--csv /nonexistent-dir/x.csv", "cannot write");
  expect_usage_error("bytes " + q + "--kind gdn", "not both");
  expect_usage_error("bytes", "give --model");
  expect_usage_error(
      "bytes --kind gdn --key-heads 3 --value-heads 4 --head-k 8 --head-v 8 --layers 2",
      "multiple of key heads");
  expect_usage_error(
      "bytes --kind gdn --key-heads 2 --value-heads 4 --head-k 0 --head-v 8 --layers 2",
      "--head-k");
  expect_usage_error(
      "bytes --kind rwkv --key-heads 2 --value-heads 4 --head-k 8 --head-v 8 --layers 2",
      "unknown layer kind");
  expect_usage_error("bytes --model all", "not supported");
  expect_usage_error("check --seed abc", "seed");
  expect_usage_error("check --seed -1", "--seed must be non-negative");
  expect_usage_error("capacity " + q + "--chunk 0", "--chunk: Value 0 not in range 1 to 65536");
  expect_usage_error("capacity " + q + "--drafts 5 --chunk 4", "exceeds buffer capacity");
  expect_usage_error("capacity " + q + "--drafts all --chunk 4", "exceeds buffer capacity");
  expect_usage_error("capacity " + q + "--drafts 0", "--drafts must be a positive integer");
  expect_usage_error("capacity " + q + "--drafts x", "--drafts");
  expect_usage_error("capacity " + q + "--context 0", "--context: must be a positive integer, got 0");
  expect_usage_error("capacity " + q + "--gpu-mem-gib -1", "--gpu-mem-gib: must be a positive finite number, got -1");
  expect_usage_error("capacity " + q + "--gpu-mem-gib inf", "--gpu-mem-gib: must be a positive finite number, got inf");
  expect_usage_error("capacity " + q + "--weights-gib -1", "--weights-gib: Value -1 not in range");
  expect_usage_error("capacity " + q + "--scheduler fifo", "--scheduler: fifo not in {reserve,mean}");
  expect_usage_error("capacity " + q + "--state-dtype fp8", "--state-dtype: unknown state dtype 'fp8'");
  expect_usage_error("capacity --model all --tp 16", "not divisible by --tp 16");
  expect_usage_error("capacity --model nope", "unknown model");
  expect_usage_error("capacity " + q + "--csv /nonexistent-dir/c.csv", "cannot write");
  const std::string ex =
      "export --kind gdn --key-heads 1 --value-heads 2 --head-k 8 --head-v 8 --layers 1 ";
  const std::string out = " --out " + scratch_dir("bad_export").string();
  expect_usage_error(ex + "--mode bogus --steps 3" + out, "--mode: bogus not in");
  expect_usage_error(ex + "--mode kvbuffer --steps 0" + out, "--steps: must be a positive integer, got 0");
  expect_usage_error(ex + "--mode kvbuffer --steps 3 --batch -1" + out, "--batch");
  expect_usage_error(ex + "--mode kvbuffer --steps 3 --chunk 0" + out,
                     "--chunk: Value 0 not in range 1 to 65536");
  expect_usage_error(ex + "--mode kvbuffer --steps 3 --chunk 70000" + out,
                     "--chunk: Value 70000 not in range 1 to 65536");
  expect_usage_error(ex + "--mode verify --steps 3 --chunk 4 --drafts 5" + out,
                     "exceeds buffer capacity");
  expect_usage_error(ex + "--mode verify --steps 3 --chunk 4 --drafts 2 --accept 3" + out,
                     "--accept");
  expect_usage_error(ex + "--mode kvbuffer --steps 3 --variant fast" + out,
                     "--variant: fast not in");
  expect_usage_error(ex + "--mode kvbuffer --steps 3 --dtype f16" + out, "--dtype: f16 not in");
  expect_usage_error(ex + "--mode kvbuffer --steps 3 --seed -5" + out,
                     "--seed: must be a non-negative integer, got -5");
  expect_usage_error(ex + "--mode kvbuffer --steps 3", "--out");
  expect_usage_error(ex + "--mode kvbuffer --steps 3 --out /proc/kvbuf-cannot-write",
                     "cannot write");
  expect_usage_error(ex + "--mode kvbuffer --steps 100000 --batch 100000" + out, "too large");
  expect_usage_error("export --model nope --mode kvbuffer --steps 3" + out, "unknown model");
  expect_usage_error(
      "export --model nemotron-3-nano-30b-a3b --mode kvbuffer --steps 3 --variant raw" + out,
      "GDN only");
#ifndef KVBUF_WITH_CUDA
  expect_usage_error("sweep --batch 1", "kvbuf sweep requires a CUDA build");
  expect_usage_error("capacity " + q + "--tp 2 --measure", "requires a CUDA build");
#endif
  // The sweep's arguments are checked in every build, before any device is looked for.
  expect_usage_error("sweep --rows-per-block 48", "--rows-per-block: 48 not in");
  expect_usage_error("sweep --kernels recurrent,fastest", "--kernels: fastest not in");
  expect_usage_error("sweep --chunk 65", "--chunk: Value 65 not in range 1 to 64");
  expect_usage_error("sweep --batch 8,0", "--batch: must be a positive integer, got 0");
  expect_usage_error("sweep --drafts 9", "--drafts: Value 9 not in range 1 to 8");
  expect_usage_error("sweep --acceptance 0.5,1.5", "--acceptance");
  expect_usage_error("sweep --budget-s 0", "--budget-s: must be a positive finite number");
  expect_usage_error("sweep --rest-s -1 --dry-run", "--rest-s: must be a non-negative finite number, got -1");
  expect_usage_error("sweep --rest-s nan --dry-run", "--rest-s: must be a non-negative finite number, got nan");
  expect_usage_error("sweep --model nemotron-3-nano-30b-a3b --kernels kvbuffer", "is Mamba-2");
  expect_usage_error("sweep --kernels recurrent,mamba2-recurrent", "is Gated DeltaNet");
  expect_usage_error("sweep --model nemotron-3-nano-30b-a3b --rows-per-block 128", "take 8, 16, 32 or 64 rows");
  expect_usage_error("sweep --rows-per-block 8 --kernels recurrent,kvbuffer", "recurrent kernels only, not kvbuffer");
  expect_usage_error("sweep --model qwen3-next-80b-a3b,nope --dry-run", "--model: nope not in");
  expect_usage_error("sweep --context 0,-4 --dry-run", "--context: must be a non-negative integer, got -4");
  expect_usage_error("sweep --tp 0 --dry-run", "--tp: must be a positive integer, got 0");
  expect_usage_error("sweep --state-dtype fp32,fp8 --dry-run", "--state-dtype: fp8 not in");
  expect_usage_error("sweep --entry-dtype fp8 --dry-run", "--entry-dtype: fp8 not in");
  expect_usage_error("sweep --shard 2/2 --dry-run", "--shard: part 2 of 2 does not exist");
  expect_usage_error("sweep --shard half --dry-run", "--shard: expected i/n");
  expect_usage_error("sweep --preset fast --dry-run", "--preset: fast not in");
  expect_usage_error("sweep --config /nonexistent/grid.toml --dry-run", "/nonexistent/grid.toml");
}

// The points a dry run lists (the lines before its count), in order.
std::vector<std::string> dry_run_points(const CliRun& r) {
  std::vector<std::string> points;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line) && line.find(" points (") == std::string::npos;)
    points.push_back(line);
  return points;
}

TEST(KvbufCliSweep, DryRunListsTheGrid) {
  const CliRun r = kvbuf("sweep --dry-run --model qwen3-next-80b-a3b --kernels recurrent,kvbuffer,direct --batch 1,8 "
                         "--chunk 4 --context 0,2,8 --tp 1,3");
  ASSERT_EQ(r.status, 0) << r.err;
  // Per tp: recurrent 2 batches x 3 contexts, kvbuffer and direct 2 x 1 C x 3 contexts.
  EXPECT_NE(r.out.find("36 points (36 decode, 0 verify; 20 with a note"), std::string::npos) << r.out;
  const auto points = dry_run_points(r);
  ASSERT_EQ(points.size(), 36u);
  EXPECT_EQ(points[0], "qwen3-next-80b-a3b tp 1 recurrent batch 1 C 0 context 0 state fp32 [recurrent]");
  auto has = [&](const std::string& line) {
    return std::find(points.begin(), points.end(), line) != points.end();
  };
  EXPECT_TRUE(has("qwen3-next-80b-a3b tp 1 kvbuffer batch 8 C 4 context 2 entry bf16 state fp32 [direct]"));
  EXPECT_TRUE(has("qwen3-next-80b-a3b tp 1 kvbuffer batch 8 C 4 context 8 entry bf16 state fp32 [buffered]"));
  EXPECT_TRUE(has("qwen3-next-80b-a3b tp 1 direct batch 8 C 4 context 8 entry bf16 state fp32 [direct] -- context 8 does not "
                  "fit a direct-mode buffer of C = 4 (needs C >= 10)"));
  for (const std::string& p : points)
    if (p.find(" tp 3 ") != std::string::npos) EXPECT_NE(p.find("-- tp 3: "), std::string::npos) << p;
}

// --rest-s adds its idle time per timed point to the estimate and travels in the saved grid.
TEST(KvbufCliSweep, DryRunCountsTheRest) {
  const std::string grid = "sweep --dry-run --kernels recurrent --batch 1,8,64 --budget-s 0.1";
  auto estimate = [](const CliRun& r) {
    const size_t at = r.out.find("; about ");
    return at == std::string::npos ? -1.0 : std::stod(r.out.substr(at + 8));
  };
  const CliRun plain = kvbuf(grid), rested = kvbuf(grid + " --rest-s 10");
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(rested.status, 0) << rested.err;
  EXPECT_NEAR(estimate(rested), estimate(plain) + 30, 1.0) << plain.out << rested.out;
  EXPECT_NE(rested.out.find("at --budget-s 0.1 and --rest-s 10"), std::string::npos) << rested.out;
  EXPECT_NE(rested.out.find("rest-s=10"), std::string::npos) << rested.out;
}

TEST(KvbufCliSweep, ShardsCoverTheGridOnce) {
  const std::string grid = "sweep --dry-run --kernels recurrent,kvbuffer,verify-classic,verify-kvbuffer --batch 1,8,64 "
                           "--chunk 2,4 --drafts 1,2 --context 0,2";
  const CliRun all = kvbuf(grid);
  ASSERT_EQ(all.status, 0) << all.err;
  const auto points = dry_run_points(all);
  std::vector<std::string> joined;
  for (const char* shard : {"0/3", "1/3", "2/3"}) {
    const CliRun part = kvbuf(grid + " --shard " + shard);
    ASSERT_EQ(part.status, 0) << part.err;
    const auto p = dry_run_points(part);
    joined.insert(joined.end(), p.begin(), p.end());
  }
  std::vector<std::string> a = points, b = joined;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::adjacent_find(b.begin(), b.end()), b.end());  // no point twice
}

TEST(KvbufCliSweep, ResolvedGridRepeatsThroughConfig) {
  // The TOML a dry run prints (and a run saves next to its CSVs) gives the same grid back.
  const CliRun first = kvbuf("sweep --dry-run --preset paper --batch 8,64 --context 0,4");
  ASSERT_EQ(first.status, 0) << first.err;
  const size_t toml_at = first.out.find("# the resolved grid");
  ASSERT_NE(toml_at, std::string::npos) << first.out;
  const std::string toml = first.out.substr(toml_at);
  EXPECT_NE(toml.find("nemotron-3-nano-30b-a3b"), std::string::npos) << toml;  // the preset's models, written out
  const fs::path file = scratch_dir("grid") / "grid.toml";
  std::ofstream(file) << toml;
  const CliRun again = kvbuf("sweep --dry-run --config " + file.string());
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(dry_run_points(again), dry_run_points(first));
  EXPECT_GT(dry_run_points(first).size(), 100u);
}

TEST(KvbufCliSweep, PaperPresetIsAboutTwelveMinutes) {
  const CliRun r = kvbuf("sweep --dry-run --preset paper");
  ASSERT_EQ(r.status, 0) << r.err;
  const size_t at = r.out.find("about ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double s = std::stod(r.out.substr(at + 6));
  EXPECT_GT(s, 480);
  EXPECT_LT(s, 840);
}

// The paper preset runs fp32 and each model's engine-default state dtype: Qwen3-Next (engine bf16)
// twice over its grid, Nemotron-3 Nano (engine fp32) once; the TOML keeps "engine", which reads back.
TEST(KvbufCliSweep, PaperPresetAddsEachModelsEngineState) {
  const CliRun r = kvbuf("sweep --dry-run --preset paper");
  ASSERT_EQ(r.status, 0) << r.err;
  // Qwen3-Next: 448 decode + 252 verify points per state dtype; Nemotron-3 Nano: 420 + 224 at fp32.
  EXPECT_NE(r.out.find("2044 points (1316 decode, 728 verify; "), std::string::npos) << r.out.substr(r.out.rfind(" points (") - 6);
  std::map<std::string, size_t> count;  // "model state" -> points
  for (const std::string& p : dry_run_points(r)) {
    const size_t state = p.find(" state ");
    ASSERT_NE(state, std::string::npos) << p;
    count[p.substr(0, p.find(' ')) + " " + p.substr(state + 7, 4)]++;
  }
  EXPECT_EQ(count, (std::map<std::string, size_t>{{"nemotron-3-nano-30b-a3b fp32", 644},
                                                  {"qwen3-next-80b-a3b bf16", 700},
                                                  {"qwen3-next-80b-a3b fp32", 700}}));
  EXPECT_NE(r.out.find("state-dtype=[\"fp32\", \"engine\"]"), std::string::npos) << r.out.substr(r.out.find("# the resolved"));
  // A model given picks the preset's kernels of its family; its engine default is fp32: one state dtype.
  const CliRun nano = kvbuf("sweep --dry-run --preset paper --model nemotron-3-nano-30b-a3b");
  ASSERT_EQ(nano.status, 0) << nano.err;
  EXPECT_NE(nano.out.find("644 points ("), std::string::npos);
  EXPECT_EQ(nano.out.find(" state bf16 "), std::string::npos);
  // --state-dtype given replaces the preset's axis.
  const CliRun only = kvbuf("sweep --dry-run --preset paper --state-dtype fp32");
  ASSERT_EQ(only.status, 0) << only.err;
  EXPECT_NE(only.out.find("1344 points ("), std::string::npos);
}

// `kvbuf accuracy`'s options are checked in every build, before any device is looked for.
TEST(KvbufCliAccuracy, BadInputExitsTwoWithAMessage) {
  expect_usage_error("accuracy --tokens 0", "--tokens: must be a positive integer, got 0");
  expect_usage_error("accuracy --tokens -5", "--tokens");
  expect_usage_error("accuracy --tokens 1000000", "--tokens must be in 1..262144, got 1000000");
  expect_usage_error("accuracy --tokens many", "--tokens");
  expect_usage_error("accuracy --chunk 0", "--chunk: Value 0 not in range 1 to 64");
  expect_usage_error("accuracy --chunk 8,65", "--chunk: Value 65 not in range 1 to 64");
  expect_usage_error("accuracy --chunk eight", "--chunk");
  expect_usage_error("accuracy --state-dtype fp32,int8", "--state-dtype: int8 not in");
  expect_usage_error("accuracy --entry-dtype fp16", "--entry-dtype: fp16 not in");
  expect_usage_error("accuracy --every 0", "--every: must be a positive integer, got 0");
  expect_usage_error("accuracy --seed -1", "--seed: must be a non-negative integer, got -1");
  expect_usage_error("accuracy --threads -2", "--threads: must be a non-negative integer, got -2");
  expect_usage_error("accuracy --model qwen3-next-80b-a3b,nope", "--model: nope not in");
  expect_usage_error("accuracy --out /nonexistent-dir/acc.csv", "cannot write");
  expect_usage_error("accuracy --frobnicate", "frobnicate");
#ifndef KVBUF_WITH_CUDA
  expect_usage_error("accuracy --tokens 64", "kvbuf accuracy requires a CUDA build");
#endif
}

TEST(KvbufCliAccuracy, DryRunListsTheVariants) {
  const CliRun r = kvbuf("accuracy --dry-run");
  ASSERT_EQ(r.status, 0) << r.err;
  // Both families by default, 3 state types x (recurrent + C 8, 16, 64), a row every 64 of 16384 tokens.
  EXPECT_NE(r.out.find("qwen3-next-80b-a3b: 16 x 32 heads of 128 x 128"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nemotron-3-nano-30b-a3b: 8 x 64 heads of 128 x 64"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  kvbuffer fp16 C 64\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("6144 rows: 256 sampled tokens (16384 tokens, every 64)"), std::string::npos) << r.out;
  const CliRun one = kvbuf("accuracy --dry-run --model nemotron-3-nano-30b-a3b --tokens 90 --every 64 --chunk 4 "
                           "--state-dtype bf16 --entry-dtype bf16,fp32");
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_EQ(one.out.find("qwen3-next"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("4 rows: 2 sampled tokens (90 tokens, every 64)"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("holds no state (S0 between folds"), std::string::npos) << one.out;  // 90 % 4 != 0
  EXPECT_EQ(r.out.find("holds no state"), std::string::npos) << r.out;
}

// The exported arrays, checked against the manifest, by name.
std::map<std::string, npy::Array> load_export(const fs::path& dir, const std::string& descr) {
  std::ifstream in(dir / "manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(in);
  EXPECT_FALSE(manifest.at("semantics").get<std::string>().empty());
  std::map<std::string, npy::Array> arrays;
  for (const auto& a : manifest.at("arrays")) {
    const std::string name = a.at("name");
    npy::Array arr = npy::read((dir / a.at("file").get<std::string>()).string());
    EXPECT_EQ(arr.shape, a.at("shape").get<std::vector<size_t>>()) << name;
    EXPECT_EQ(arr.descr, descr) << name;
    EXPECT_EQ(a.at("dtype").get<std::string>(), descr) << name;
    arrays[name] = std::move(arr);
  }
  return arrays;
}

std::vector<double> slice(const npy::Array& a, size_t n) {
  const size_t per = a.values.size() / a.shape.at(0);
  return std::vector<double>(a.values.begin() + n * per, a.values.begin() + (n + 1) * per);
}

template <class M>
std::vector<double> flatten(const std::vector<M>& state) {
  std::vector<double> flat;
  for (const auto& m : state)
    for (int r = 0; r < m.rows(); ++r)
      for (int c = 0; c < m.cols(); ++c) flat.push_back(m(r, c));
  return flat;
}

template <class M>
void unflatten(const std::vector<double>& flat, std::vector<M>& state) {
  size_t i = 0;
  for (auto& m : state)
    for (int r = 0; r < m.rows(); ++r)
      for (int c = 0; c < m.cols(); ++c) m(r, c) = flat.at(i++);
}

// GDN export, custom dims H = 2, HV = 4 (GQA 2), K = 16, V = 8, batch 2, 13 tokens (not a multiple
// of any C below). Reference: gdn_decode_recurrent in float64 on the exported inputs and state0.
// Tolerance: float64 modes differ from the recurrence only by rounding, bounded by the reference's
// own derived gdn_rel_tolerance (16 (K + V + steps) u); float32 exports use the float32 bound, as
// the values themselves were computed in float32. The recurrent mode must match exactly.
void check_gdn_export(const std::string& mode_args, bool f32, bool exact) {
  const int H = 2, HV = 4, K = 16, V = 8, N = 2, T = 13;
  const fs::path dir = scratch_dir("export_gdn");
  const CliRun r = kvbuf(
      "export --kind gdn --key-heads 2 --value-heads 4 --head-k 16 --head-v 8 --layers 1 --batch 2 "
      "--steps 13 "
      "--seed 7 --dtype " +
      std::string(f32 ? "f32" : "f64") + " --out " + dir.string() + " " + mode_args);
  ASSERT_EQ(r.status, 0) << mode_args << "\n" << r.err;
  auto a = load_export(dir, f32 ? "<f4" : "<f8");
  for (const char* name : {"q", "k", "v", "g", "beta", "state0", "state_final", "o"})
    ASSERT_EQ(a.count(name), 1u) << name;
  EXPECT_EQ(a["q"].shape, (std::vector<size_t>{N, T, H, K}));
  EXPECT_EQ(a["state0"].shape, (std::vector<size_t>{N, HV, K, V}));
  const double tol =
      f32 ? ref::gdn_rel_tolerance<float>(K, V, T) : ref::gdn_rel_tolerance<double>(K, V, T);
  for (size_t n = 0; n < size_t(N); ++n) {
    ref::GdnTokens<double> x;
    x.dims = {H, HV, K, V};
    x.steps = T;
    x.q = slice(a["q"], n), x.k = slice(a["k"], n), x.v = slice(a["v"], n);
    x.g = slice(a["g"], n), x.beta = slice(a["beta"], n);
    ref::GdnState<double> state = ref::gdn_zero_state<double>(x.dims);
    unflatten(slice(a["state0"], n), state);
    std::vector<double> o;
    ref::gdn_decode_recurrent(x, state, o);
    const double err_o = ref::max_rel_err(slice(a["o"], n), o);
    const double err_s = ref::max_rel_err(slice(a["state_final"], n), flatten(state));
    if (exact) {
      EXPECT_EQ(err_o, 0.0) << mode_args;
      EXPECT_EQ(err_s, 0.0) << mode_args;
    } else {
      EXPECT_LE(err_o, tol) << mode_args << " request " << n;
      EXPECT_LE(err_s, tol) << mode_args << " request " << n;
    }
    EXPECT_GT(*std::max_element(o.begin(), o.end()), 0.0);  // real, non-zero outputs
  }
}

TEST(KvbufCliExport, GdnRecurrentIsExact) { check_gdn_export("--mode recurrent", false, true); }
TEST(KvbufCliExport, GdnChunk) { check_gdn_export("--mode chunk --chunk 4", false, false); }
TEST(KvbufCliExport, GdnKvbufferCachedU) {
  check_gdn_export("--mode kvbuffer --chunk 3", false, false);
}
TEST(KvbufCliExport, GdnKvbufferRaw) {
  check_gdn_export("--mode kvbuffer --chunk 5 --variant raw", false, false);
}
TEST(KvbufCliExport, GdnVerify) {
  check_gdn_export("--mode verify --chunk 5 --drafts 3 --accept 2", false, false);
}
TEST(KvbufCliExport, GdnDirectOverflows) {
  check_gdn_export("--mode direct --chunk 4", false, false);
}
TEST(KvbufCliExport, GdnKvbufferFloat32) {
  check_gdn_export("--mode kvbuffer --chunk 4", true, false);
}

TEST(KvbufCliExport, DirectStateZeroIsZeros) {
  const fs::path dir = scratch_dir("export_direct");
  const CliRun r = kvbuf(
      "export --kind gdn --key-heads 1 --value-heads 1 --head-k 8 --head-v 8 --layers 1 --steps 3 "
      "--mode direct --chunk 8 --out " +
      dir.string());
  ASSERT_EQ(r.status, 0) << r.err;
  auto a = load_export(dir, "<f8");
  for (double v : a["state0"].values) EXPECT_EQ(v, 0.0);
}

// Mamba-2 export, custom dims G = 2, NH = 4, N = 8, P = 6; recurrent reference on the exported
// inputs, same tolerance reasoning (mamba2 has no delta rule; the GDN bound is looser still).
TEST(KvbufCliExport, Mamba2KvbufferAndVerify) {
  const int G = 2, NH = 4, Nst = 8, P = 6, N = 2, T = 11;
  for (const std::string mode :
       {"--mode kvbuffer --chunk 4", "--mode verify --chunk 4 --drafts 3 --accept 1"}) {
    const fs::path dir = scratch_dir("export_mamba2");
    const CliRun r = kvbuf(
        "export --kind mamba2 --key-heads 2 --value-heads 4 --head-k 8 --head-v 6 --layers 1 "
        "--batch 2 --steps 11 --seed 3 --out " +
        dir.string() + " " + mode);
    ASSERT_EQ(r.status, 0) << r.err;
    auto a = load_export(dir, "<f8");
    EXPECT_EQ(a["B"].shape, (std::vector<size_t>{N, T, G, Nst}));
    EXPECT_EQ(a["A"].shape, (std::vector<size_t>{NH}));
    EXPECT_EQ(a["state_final"].shape, (std::vector<size_t>{N, NH, P, Nst}));
    for (size_t n = 0; n < size_t(N); ++n) {
      ref::Mamba2Tokens<double> x;
      x.dims = {G, NH, Nst, P};
      x.steps = T;
      x.x = slice(a["x"], n), x.B = slice(a["B"], n), x.C = slice(a["C"], n),
      x.dt = slice(a["dt"], n);
      x.A = a["A"].values, x.D = a["D"].values;
      ref::Mamba2State<double> state = ref::mamba2_zero_state<double>(x.dims);
      unflatten(slice(a["state0"], n), state);
      std::vector<double> y;
      ref::mamba2_decode_recurrent(x, state, y);
      const double tol = ref::gdn_rel_tolerance<double>(Nst, P, T);
      EXPECT_LE(ref::max_rel_err(slice(a["y"], n), y), tol) << mode;
      EXPECT_LE(ref::max_rel_err(slice(a["state_final"], n), flatten(state)), tol) << mode;
    }
  }
}

}  // namespace
}  // namespace kvbuf
