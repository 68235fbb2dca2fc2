// The serving simulator's sanity properties: zero load gives zero queueing, memory never exceeds
// the GPU's, a trace replays to the same numbers, every output token is emitted exactly once, and
// bad traces are refused with their line numbers.
#include <gtest/gtest.h>

#include <fstream>

#include "sim/serving.h"

namespace kvbuf {
namespace {

const MeasuredLinearTable& table() {
  static const MeasuredLinearTable t = MeasuredLinearTable::load(KVBUF_RESULTS_DIR, LayerKind::GatedDeltaNet);
  return t;
}

// Qwen3-Next's 160 GB of bf16 weights need two H200s.
StepModel model(DecodeMethod method, int drafts = 0, const char* name = "qwen3-next-80b-a3b", int tp = 2) {
  StepConfig c;
  c.model = find_model(name);
  c.tp = tp;
  c.gpu = find_gpu("h200");
  c.method = method;
  c.chunk = 16;
  c.drafts = drafts;
  c.acceptance = 0.7;
  return StepModel(c, table());
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Serving, ZeroLoadGivesZeroQueueing) {
  const StepModel m = model(DecodeMethod::KVBuffer);
  std::vector<ServingRequest> reqs;
  for (int i = 0; i < 5; ++i) reqs.push_back({1000.0 * i, 512 + 100 * i, 64});
  const ServingResult r = simulate_serving(m, ServingConfig{}, reqs);
  EXPECT_EQ(r.queue_s.p99, 0.0);
  EXPECT_EQ(r.max_running, 1);
  // Alone on the GPU: TTFT is the prompt's prefill, no wait.
  EXPECT_NEAR(r.ttft_s.p50, m.prefill_us(712) * 1e-6, 1e-12);
  EXPECT_NEAR(r.ttft_s.p99, m.prefill_us(912) * 1e-6, 1e-12);
  EXPECT_GT(r.tpot_s.p50, 0);
}

TEST(Serving, MemoryNeverExceedsTheGpu) {
  for (DecodeMethod method : {DecodeMethod::Classic, DecodeMethod::KVBuffer}) {
    for (int drafts : {0, 4}) {
      const StepModel m = model(method, drafts);
      // Far more load than fits: long contexts, arrivals much faster than service.
      const std::vector<ServingRequest> reqs = poisson_requests(400, 2, 32768, 128, 7);
      const ServingResult r = simulate_serving(m, ServingConfig{}, reqs);
      EXPECT_LE(r.peak_memory_bytes, r.memory_limit_bytes) << method_name(method);
      for (const TimelineRow& row : r.timeline) ASSERT_LE(row.memory_bytes, r.memory_limit_bytes);
      EXPECT_GT(r.queue_s.p99, 0) << "the load should queue";
      // The admission limit binds: running requests are bounded by what one request needs.
      const double pool = r.memory_limit_bytes - r.weight_bytes;
      EXPECT_LE(r.max_running, long(pool / m.request_bytes(32768 / 2 + 128 / 2)) + 1);
      EXPECT_EQ(r.requests, long(reqs.size()));
    }
  }
}

TEST(Serving, KVBufferAdmitsMoreConcurrentSpeculativeRequests) {
  const std::vector<ServingRequest> reqs = poisson_requests(400, 2, 8192, 128, 3);
  const ServingResult classic = simulate_serving(model(DecodeMethod::Classic, 4), ServingConfig{}, reqs);
  const ServingResult kvb = simulate_serving(model(DecodeMethod::KVBuffer, 4), ServingConfig{}, reqs);
  EXPECT_GT(kvb.max_running, classic.max_running);
  EXPECT_GT(kvb.throughput_tok_s, classic.throughput_tok_s);
}

TEST(Serving, EveryOutputTokenEmittedOnce) {
  const std::vector<ServingRequest> reqs = poisson_requests(20, 5, 300, 90, 11);
  long expected = 0;
  for (const ServingRequest& q : reqs) expected += q.output_tokens;
  for (int drafts : {0, 5}) {
    const ServingResult r = simulate_serving(model(DecodeMethod::KVBuffer, drafts), ServingConfig{}, reqs);
    EXPECT_EQ(r.output_tokens, expected);
    long timeline_tokens = 0;
    for (const TimelineRow& row : r.timeline) timeline_tokens += row.tokens;
    EXPECT_EQ(timeline_tokens, expected);
  }
}

TEST(Serving, TraceReplaysToTheSameNumbers) {
  const std::vector<ServingRequest> reqs = poisson_requests(30, 4, 700, 120, 5);
  std::string text = "arrival_s,prompt_tokens,output_tokens\n";
  char line[128];
  for (const ServingRequest& q : reqs) {
    std::snprintf(line, sizeof line, "%.17g,%ld,%ld\n", q.arrival_s, q.prompt_tokens, q.output_tokens);
    text += line;
  }
  const std::vector<ServingRequest> replay = read_trace(write_file("replay.csv", text));
  ASSERT_EQ(replay.size(), reqs.size());
  const StepModel m = model(DecodeMethod::KVBuffer, 4);
  ServingConfig sc;
  sc.seed = 9;
  const ServingResult a = simulate_serving(m, sc, reqs);
  const ServingResult b = simulate_serving(m, sc, replay);
  EXPECT_EQ(a.throughput_tok_s, b.throughput_tok_s);
  EXPECT_EQ(a.ttft_s.p99, b.ttft_s.p99);
  EXPECT_EQ(a.tpot_s.p50, b.tpot_s.p50);
  EXPECT_EQ(a.steps, b.steps);
  ASSERT_EQ(a.timeline.size(), b.timeline.size());
  for (size_t i = 0; i < a.timeline.size(); ++i) EXPECT_EQ(a.timeline[i].time_s, b.timeline[i].time_s);
  // Another seed draws other acceptances.
  sc.seed = 10;
  EXPECT_NE(simulate_serving(m, sc, reqs).steps, a.steps);
  // The same seed gives the same Poisson arrivals.
  const std::vector<ServingRequest> again = poisson_requests(30, 4, 700, 120, 5);
  ASSERT_EQ(again.size(), reqs.size());
  EXPECT_EQ(again.back().arrival_s, reqs.back().arrival_s);
}

TEST(Serving, BadTracesNameTheLine) {
  auto message = [](const std::string& text) {
    try {
      read_trace(write_file("bad.csv", text));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,x,5\n").find("bad.csv:3:"), std::string::npos);
  EXPECT_NE(message("arrival_s,prompt_tokens,output_tokens\n0,10\n").find(":2:"), std::string::npos);
  EXPECT_NE(message("arrival_s,prompt_tokens,output_tokens\n-1,10,5\n").find(":2:"), std::string::npos);
  EXPECT_NE(message("arrival_s,prompt_tokens,output_tokens\n0,0,5\n").find(":2:"), std::string::npos);
  EXPECT_NE(message("arrival_s,prompt_tokens,output_tokens\n0,1.5,5\n").find(":2:"), std::string::npos);
  EXPECT_NE(message("time,prompt\n").find("header"), std::string::npos);
  EXPECT_NE(message("arrival_s,prompt_tokens,output_tokens\n").find("no requests"), std::string::npos);
  EXPECT_NE(message("").find("no requests"), std::string::npos);
  // Columns in any order, rows in any order.
  const auto ok = read_trace(write_file("ok.csv", "output_tokens,arrival_s,prompt_tokens\n7,2.5,10\n3,0.5,20\n"));
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[0].arrival_s, 0.5);
  EXPECT_EQ(ok[0].prompt_tokens, 20);
  EXPECT_EQ(ok[1].output_tokens, 7);
}

TEST(Serving, ModelThatDoesNotFitIsRefused) {
  const std::vector<ServingRequest> reqs = {{0, 100, 10}};
  EXPECT_THROW(simulate_serving(model(DecodeMethod::KVBuffer, 0, "qwen3.5-397b-a17b", 1), ServingConfig{}, reqs),
               std::invalid_argument);
  // A request whose KV alone exceeds the memory left.
  const std::vector<ServingRequest> huge = {{0, 900000000, 10}};
  EXPECT_THROW(simulate_serving(model(DecodeMethod::KVBuffer), ServingConfig{}, huge), std::invalid_argument);
  EXPECT_THROW(poisson_requests(0, 1, 10, 10, 1), std::invalid_argument);
}

}  // namespace
}  // namespace kvbuf
