// NVML through dlopen (bench/gpu_telemetry.h): the entry points used, with NVML's C ABI.
#include <cuda_runtime.h>
#include <dlfcn.h>

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
  // Clock event reasons (bits of nvmlClocksEventReason*); drivers before r535 name it "throttle"
  // reasons. Optional: without it the clock limits stay unknown.
  int (*reasons)(nvmlDevice, unsigned long long*) = nullptr;
  nvmlDevice device = nullptr;
  bool ok = false;
  Nvml() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    by_pci = reinterpret_cast<int (*)(const char*, nvmlDevice*)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock = reinterpret_cast<int (*)(nvmlDevice, int, unsigned*)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    power = reinterpret_cast<int (*)(nvmlDevice, unsigned*)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
    void* r = dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!r) r = dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    reasons = reinterpret_cast<int (*)(nvmlDevice, unsigned long long*)>(r);
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
  unsigned long long bits = 0;
  if (nvml.reasons && nvml.reasons(nvml.device, &bits) == kNvmlSuccess)
    t.limits_known = true, t.limits = clock_limits_from_nvml(bits);
  return t;
}

}  // namespace kvbuf
