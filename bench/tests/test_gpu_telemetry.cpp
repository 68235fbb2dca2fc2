// The clock limits a timed point records (bench/gpu_telemetry.h): NVML's reason bits sorted into
// causes, counted over the samples, and the note a row carries, without a GPU.
#include <gtest/gtest.h>

#include "bench/gpu_telemetry.h"

namespace kvbuf {
namespace {

GpuTelemetry reading(uint64_t nvml_reasons) {
  GpuTelemetry t;
  t.valid = true, t.sm_clock_mhz = 1800, t.power_w = 690;
  t.limits_known = true, t.limits = clock_limits_from_nvml(nvml_reasons);
  return t;
}

TEST(GpuTelemetry, NvmlReasonsSortIntoCauses) {
  EXPECT_FALSE(clock_limits_from_nvml(0).any());
  // Idle (0x1), application clocks (0x2), sync boost (0x10), display (0x100) do not slow a kernel.
  EXPECT_FALSE(clock_limits_from_nvml(0x1 | 0x2 | 0x10 | 0x100).any());
  const ClockLimits cap = clock_limits_from_nvml(0x4);
  EXPECT_TRUE(cap.power_cap && !cap.hw_slowdown && !cap.thermal);
  for (uint64_t bit : {0x8u, 0x80u}) {
    const ClockLimits hw = clock_limits_from_nvml(bit);
    EXPECT_TRUE(hw.hw_slowdown && !hw.power_cap && !hw.thermal) << bit;
  }
  for (uint64_t bit : {0x20u, 0x40u}) {
    const ClockLimits th = clock_limits_from_nvml(bit);
    EXPECT_TRUE(th.thermal && !th.power_cap && !th.hw_slowdown) << bit;
  }
}

TEST(GpuTelemetry, NoteCountsTheLimitedSamples) {
  TelemetryMean m;
  EXPECT_EQ(m.clock_limit_note(), "");
  EXPECT_EQ(m.clock_mhz(), "");
  for (int i = 0; i < 3; ++i) m.add(reading(0));
  EXPECT_EQ(m.clock_limit_note(), "");
  m.add(reading(0x4));
  m.add(reading(0x4 | 0x40));
  EXPECT_EQ(m.clock_limit_note(), "SM clock held down while timed: power cap in 2 of 5 samples, thermal slowdown in 1 of 5 samples");
  EXPECT_EQ(m.clock_mhz(), "1800");
  EXPECT_EQ(m.power_w(), "690.0");
  EXPECT_EQ(note_with_clock_limits("", m), m.clock_limit_note());
  EXPECT_EQ(note_with_clock_limits("z gate", m), "z gate; " + m.clock_limit_note());
  EXPECT_EQ(note_with_clock_limits("z gate", TelemetryMean{}), "z gate");
}

// Merging two timings' readings counts both.
TEST(GpuTelemetry, MergeCountsBothTimings) {
  TelemetryMean a, b;
  a.add(reading(0));
  b.add(reading(0x4));
  b.add(reading(0x4));
  a.merge(b);
  EXPECT_EQ(a.n, 3);
  EXPECT_EQ(a.clock_limit_note(), "SM clock held down while timed: power cap in 2 of 3 samples");
  EXPECT_EQ(a.power_w(), "690.0");
}

// Readings without the reasons (an older driver) count in the means, not in the limits' totals;
// invalid readings count nowhere.
TEST(GpuTelemetry, UnknownReasonsAreNotCounted) {
  TelemetryMean m;
  GpuTelemetry no_reasons = reading(0x4);
  no_reasons.limits_known = false;
  m.add(no_reasons);
  m.add(GpuTelemetry{});
  EXPECT_EQ(m.n, 1);
  EXPECT_EQ(m.clock_limit_note(), "");
  m.add(reading(0x8));
  EXPECT_EQ(m.clock_limit_note(), "SM clock held down while timed: hardware slowdown in 1 of 1 samples");
}

}  // namespace
}  // namespace kvbuf
