// SM clock and board power of the current CUDA device while a point is timed, so that a results
// row shows the power state it ran in (the KVBuffer kernels' times follow it; results/README.md).
// Read through NVML from the driver's libnvidia-ml.so.1, loaded at run time: where it cannot be
// loaded or answers an error, nothing is read and the CSV columns stay empty.
#pragma once
#include <string>

namespace kvbuf {

struct GpuTelemetry {
  bool valid = false;
  double sm_clock_mhz = 0, power_w = 0;
};
GpuTelemetry read_gpu_telemetry();

// Running mean of the valid readings; empty strings when there were none.
struct TelemetryMean {
  int n = 0;
  double clock_sum = 0, power_sum = 0;
  void add(const GpuTelemetry& t) {
    if (!t.valid) return;
    ++n, clock_sum += t.sm_clock_mhz, power_sum += t.power_w;
  }
  std::string clock_mhz() const;
  std::string power_w() const;
};

}  // namespace kvbuf
