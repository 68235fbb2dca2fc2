// SM clock, board power and the driver's clock limits of the current CUDA device while a point is
// timed, so that a results row shows the power state it ran in (the KVBuffer kernels' times follow
// it; results/README.md). Read through NVML from the driver's libnvidia-ml.so.1, loaded at run time:
// where it cannot be loaded or answers an error, nothing is read and the CSV columns stay empty.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kvbuf {

// What held the SM clock below the clock the application asked for, from NVML's clock event
// (formerly "throttle") reasons: the board's power cap (the H200's 700 W), a hardware slowdown
// (power brake, overcurrent) or a thermal slowdown. A point timed under any of them ran slower
// than the same kernel at full clock.
struct ClockLimits {
  bool power_cap = false, hw_slowdown = false, thermal = false;
  bool any() const { return power_cap || hw_slowdown || thermal; }
};
// NVML's bits (nvml.h, nvmlClocksEventReason*): SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown
// 0x20, HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80; the others (idle, application clocks,
// sync boost, display) do not slow a timed kernel.
inline ClockLimits clock_limits_from_nvml(uint64_t reasons) {
  ClockLimits l;
  l.power_cap = reasons & 0x4;
  l.hw_slowdown = reasons & (0x8 | 0x80);
  l.thermal = reasons & (0x20 | 0x40);
  return l;
}

// The start of a row's note when a sample found the clock held down (clock_limit_note below; the
// sweep's --redo-clock-limited and scripts/results_csv.py's CLOCK_LIMITED look for it).
inline constexpr const char* kClockLimitedNote = "SM clock held down while timed";

struct GpuTelemetry {
  bool valid = false;
  double sm_clock_mhz = 0, power_w = 0;
  bool limits_known = false;  // the driver answered the clock event reasons
  ClockLimits limits;
};
GpuTelemetry read_gpu_telemetry();

// Running mean of the valid readings (empty strings when there were none) and how many of them
// found the clock held down, by cause.
struct TelemetryMean {
  int n = 0;
  double clock_sum = 0, power_sum = 0;
  int limits_n = 0, power_cap_n = 0, hw_slowdown_n = 0, thermal_n = 0;
  void add(const GpuTelemetry& t) {
    if (!t.valid) return;
    ++n, clock_sum += t.sm_clock_mhz, power_sum += t.power_w;
    if (!t.limits_known) return;
    ++limits_n;
    power_cap_n += t.limits.power_cap, hw_slowdown_n += t.limits.hw_slowdown, thermal_n += t.limits.thermal;
  }
  // Another timing's readings (a measurement made of several timed graphs).
  void merge(const TelemetryMean& o) {
    n += o.n, clock_sum += o.clock_sum, power_sum += o.power_sum, limits_n += o.limits_n;
    power_cap_n += o.power_cap_n, hw_slowdown_n += o.hw_slowdown_n, thermal_n += o.thermal_n;
  }
  std::string clock_mhz() const { return n ? fmt::format("{:.0f}", clock_sum / n) : ""; }
  std::string power_w() const { return n ? fmt::format("{:.1f}", power_sum / n) : ""; }
  // For the row's note: empty when no sample found the clock held down, else e.g. "SM clock held
  // down while timed: power cap in 37 of 50 samples".
  std::string clock_limit_note() const {
    std::vector<std::string> causes;
    for (const auto& [count, what] : {std::pair{power_cap_n, "power cap"}, std::pair{hw_slowdown_n, "hardware slowdown"},
                                      std::pair{thermal_n, "thermal slowdown"}})
      if (count) causes.push_back(fmt::format("{} in {} of {} samples", what, count, limits_n));
    if (causes.empty()) return "";
    std::string s = std::string(kClockLimitedNote) + ": " + causes[0];
    for (size_t i = 1; i < causes.size(); ++i) s += ", " + causes[i];
    return s;
  }
};

// A row's note with the clock limits after what the row already says ("a; b"; either may be empty).
inline std::string note_with_clock_limits(const std::string& note, const TelemetryMean& t) {
  const std::string limits = t.clock_limit_note();
  if (limits.empty()) return note;
  return note.empty() ? limits : note + "; " + limits;
}

}  // namespace kvbuf
