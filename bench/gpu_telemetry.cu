// NVML through dlopen (bench/gpu_telemetry.h): the four entry points used, with NVML's C ABI.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include "bench/gpu_telemetry.h"

namespace kvbuf {
namespace {

using nvmlDevice = void*;
constexpr int kNvmlSuccess = 0, kNvmlClockSm = 1;

struct Nvml {
  int (*init)() = nullptr;
  int (*by_pci)(const char*, nvmlDevice*) = nullptr;
  int (*clock)(nvmlDevice, int, unsigned*) = nullptr;
  int (*power)(nvmlDevice, unsigned*) = nullptr;  // milliwatts
  nvmlDevice device = nullptr;
  bool ok = false;
  Nvml() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    by_pci = reinterpret_cast<int (*)(const char*, nvmlDevice*)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock = reinterpret_cast<int (*)(nvmlDevice, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    power = reinterpret_cast<int (*)(nvmlDevice, unsigned*)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
    if (!init || !by_pci || !clock || !power || init() != kNvmlSuccess) return;
    int dev = 0;
    char bus[32] = {};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) != cudaSuccess) return;
    ok = by_pci(bus, &device) == kNvmlSuccess;
  }
};

}  // namespace

GpuTelemetry read_gpu_telemetry() {
  static Nvml nvml;
  GpuTelemetry t;
  unsigned mhz = 0, mw = 0;
  if (!nvml.ok || nvml.clock(nvml.device, kNvmlClockSm, &mhz) != kNvmlSuccess ||
      nvml.power(nvml.device, &mw) != kNvmlSuccess)
    return t;
  t.valid = true, t.sm_clock_mhz = mhz, t.power_w = mw * 1e-3;
  return t;
}

std::string TelemetryMean::clock_mhz() const { return n ? fmt::format("{:.0f}", clock_sum / n) : ""; }
std::string TelemetryMean::power_w() const { return n ? fmt::format("{:.1f}", power_sum / n) : ""; }

}  // namespace kvbuf
