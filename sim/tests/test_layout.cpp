// The one layout (sim/layout.h) against the bytes and capacity models: the pools the GPU sweeps and
// the capacity measurement allocate (decode_pools, speculative_pools, placed by PoolPlan) hold
// exactly the per-request bytes that sim/bytes_model.h and sim/capacity.h count, for every catalog
// model, both buffer variants and both entry types; and the sizes themselves against hand formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sim/bytes_model.h"
#include "sim/capacity.h"
#include "sim/catalog.h"
#include "sim/layout.h"

namespace kvbuf {
namespace {

struct Config {
  const ModelSpec* model;
  BufferVariant variant;
  EntryType entry;
  std::string name() const {
    return model->name + "/" + variant_name(variant) + "/" + entry_type_name(entry);
  }
};

std::vector<Config> every_config() {
  std::vector<Config> c;
  for (const ModelSpec& m : model_catalog())
    for (BufferVariant v : {BufferVariant::CachedU, BufferVariant::Raw})
      for (EntryType e : {EntryType::BF16, EntryType::FP32}) c.push_back({&m, v, e});
  return c;
}

constexpr int kChunks[] = {1, 4, 16, 64};
constexpr size_t kAlign = 256;

TEST(Layout, DecodePoolsHoldWhatTheBytesModelCounts) {
  for (const Config& c : every_config())
    for (int C : kChunks) {
      const Precision p = precision_of(c.entry);
      const PoolLayout layout{c.model->layer, C, c.variant, p};
      const double model = state_bytes(c.model->layer, p) + C * buffer_entry_bytes(c.model->layer, p, c.variant);
      EXPECT_EQ(double(bytes_per_slot(decode_pools(layout, false))), model) << c.name() << " C " << C;
      // Out of place: one more state; recurrent (C = 0): the state alone.
      EXPECT_EQ(double(bytes_per_slot(decode_pools(layout, true))), model + state_bytes(c.model->layer, p))
          << c.name();
      const PoolLayout recurrent{c.model->layer, 0, c.variant, p};
      EXPECT_EQ(double(bytes_per_slot(decode_pools(recurrent, false))), state_bytes(c.model->layer, p)) << c.name();
      // The metadata (fill, has_state, done_count) is all the plan adds, plus alignment.
      const PoolPlan plan(decode_pools(layout, false), 7, c.model->linear_layers);
      const double meta = 3 * 4;
      const double exact = c.model->linear_layers * 7 * (model + meta);
      EXPECT_GE(double(plan.total_bytes()), exact) << c.name();
      EXPECT_LT(double(plan.total_bytes()), exact + c.model->linear_layers * plan.tensors().size() * kAlign)
          << c.name();
    }
}

TEST(Layout, SpeculativePoolsHoldWhatTheCapacityModelCounts) {
  for (const Config& c : every_config())
    for (int T : {1, 4, 8})
      for (int C : {8, 16, 64}) {
        if (c.entry == EntryType::FP32 && C != 16) continue;
        CapacityInputs in;
        in.model = *c.model;
        in.gpu_memory_bytes = 141e9;
        in.context = 4096;
        in.drafts = T;
        in.chunk = C;
        in.variant = c.variant;
        in.precision = precision_of(c.entry);
        in.count_verify_scratch = true;  // the measurement allocates the verify scratch too
        const CapacityResult r = capacity_model(in);
        const PoolLayout layout{c.model->layer, C, c.variant, in.precision};
        const double L = c.model->linear_layers;
        EXPECT_EQ(L * bytes_per_slot(speculative_pools(layout, T, true, true)), r.kvbuffer.linear_bytes_per_request)
            << c.name() << " T " << T << " C " << C;
        EXPECT_EQ(L * bytes_per_slot(speculative_pools(layout, T, false, true)), r.classic.linear_bytes_per_request)
            << c.name() << " T " << T;
      }
}

// Independent of the code under test: the serving layouts written out by hand.
TEST(Layout, SizesMatchHandFormulas) {
  const LayerShape q = find_model("qwen3-next-80b-a3b").layer;  // H 16, HV 32, K = V = 128
  const PoolLayout cached{q, 16, BufferVariant::CachedU, Precision{}};
  EXPECT_EQ(cached.state_bytes(), 32u * 128 * 128 * 4);                      // 2 MiB
  EXPECT_EQ(cached.entry_bytes(), 16u * 128 * 2 + 32u * 128 * 2 + 32u * 4);  // k, u, G: 12416
  const PoolLayout raw{q, 16, BufferVariant::Raw, precision_of(EntryType::FP32)};
  EXPECT_EQ(raw.entry_bytes(), 16u * 128 * 4 + 32u * 128 * 4 + 2 * 32u * 4);  // k, v, G, beta
  EXPECT_EQ(cached.conv_bytes(), (2u * 16 * 128 + 32u * 128) * 3 * 2);
  std::vector<std::string> names;
  for (const PoolTensor& t : raw.buffer()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"buf_k", "buf_val", "buf_gcum", "buf_beta"}));
  EXPECT_EQ(raw.buffer()[1].elems_per_slot, 16u * 32 * 128);  // [C, HV, V]

  const ModelSpec nano = find_model("nemotron-3-nano-30b-a3b");  // G 8, NH 64, N 128, P 64
  const PoolLayout m{nano.layer, 16, BufferVariant::CachedU, Precision{}};
  const size_t G = nano.layer.key_heads, NH = nano.layer.value_heads, N = nano.layer.head_k, P = nano.layer.head_v;
  EXPECT_EQ(m.state_bytes(), NH * P * N * 4);
  EXPECT_EQ(m.entry_bytes(), NH * P * 2 + G * N * 2 + 2 * NH * 4);  // x, B, dt and G
  EXPECT_EQ(m.conv_bytes(), (NH * P + 2 * G * N) * 3 * 2);
  EXPECT_EQ(m.buffer().size(), 4u);  // dt lives in buf_beta
}

TEST(Layout, PlanPlacesAlignedDisjointTensors) {
  const PoolLayout l{find_model("qwen3.5-0.8b").layer, 8, BufferVariant::Raw, Precision{}};
  const PoolPlan plan(speculative_pools(l, 3, true, true), 5, 3);
  std::vector<std::pair<size_t, size_t>> spans;
  for (int layer = 0; layer < 3; ++layer)
    for (const PoolTensor& t : plan.tensors()) {
      const size_t at = plan.offset(layer, t.name);
      EXPECT_EQ(at % kAlign, 0u) << t.name;
      spans.push_back({at, at + plan.tensor_bytes(t.name)});
    }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first);
  EXPECT_EQ(spans.back().second, plan.total_bytes());
  EXPECT_THROW(plan.offset(0, "nope"), std::invalid_argument);
  EXPECT_THROW(plan.offset(3, "state"), std::invalid_argument);
  EXPECT_THROW(PoolPlan({l.state(), l.state()}, 1, 1), std::invalid_argument);
  EXPECT_THROW(speculative_pools(l, 9, true, false), std::invalid_argument);  // T > C
}

}  // namespace
}  // namespace kvbuf
