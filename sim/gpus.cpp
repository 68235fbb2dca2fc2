#include "sim/gpus.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <cctype>

namespace kvbuf {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// This project's H200 (results/README.md, results/verify_h200.md, the device notes):
// device-to-device copy 4278 GB/s, streaming read 4571 GB/s, in-place state update 3958 GB/s
// (the recurrent kernel at batch 512), bf16 8192^3 GEMM 788 TFLOP/s on random data.
constexpr double kH200DatasheetGbps = 4800, kH200DatasheetTflops = 989;
constexpr double kH200Copy = 4278, kH200Read = 4571, kH200InPlace = 3958, kH200Gemm = 788;
// Launch + drain of one small kernel inside a CUDA graph: assumed until `kvbuf calibrate` runs
// (a batch-1 recurrent layer takes 3.5 us for 0.9 us of streaming).
constexpr double kAssumedKernelOverheadUs = 2.0;

// Device limits by compute capability (CUDA C++ Programming Guide, "Technical Specifications per
// Compute Capability": resident threads and blocks, shared memory per SM and the opt-in per block)
// with each GPU's SM count and L2 size from its datasheet / whitepaper.
constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;
DeviceLimits limits_of(int major, int minor, int sms, size_t l2_mib) {
  DeviceLimits d;
  d.cc_major = major;
  d.cc_minor = minor;
  d.sms = sms;
  const bool big_sm = major < 12 && minor == 0;  // 8.0, 9.0, 10.0: the data-centre SM
  d.max_threads_per_sm = big_sm ? 2048 : 1536;
  d.max_blocks_per_sm = major == 8 && minor == 6 ? 16 : major == 8 && minor == 9 ? 24 : 32;
  d.smem_per_sm = (major == 8 && minor == 0 ? 164 : big_sm ? 228 : 100) * kKiB;
  d.smem_per_block_optin = d.smem_per_sm - kKiB;  // 1 KiB per block stays reserved
  d.l2_bytes = l2_mib * kMiB;
  return d;
}

// A datasheet GPU, its bandwidths and GEMM rate scaled by the fractions of the datasheet that the
// H200 reached here (copy 0.89, read 0.95, in place 0.82, GEMM 0.80).
GpuSpec from_datasheet(const char* name, const char* source, double memory_gib, double tbps,
                       double tflops, double nvlink_gbps, const DeviceLimits& limits) {
  GpuSpec g;
  g.limits = limits;
  g.name = name;
  g.source = source;
  g.datasheet = true;
  g.memory_bytes = memory_gib * kGiB;
  g.copy_gbps = tbps * 1000 * kH200Copy / kH200DatasheetGbps;
  g.read_gbps = tbps * 1000 * kH200Read / kH200DatasheetGbps;
  g.inplace_gbps = tbps * 1000 * kH200InPlace / kH200DatasheetGbps;
  g.gemm_tflops = tflops * kH200Gemm / kH200DatasheetTflops;
  g.kernel_overhead_us = kAssumedKernelOverheadUs;
  g.interconnect_gbps = nvlink_gbps;
  return g;
}

std::invalid_argument bad(const std::string& what) { return std::invalid_argument(what); }

}  // namespace

double GpuSpec::gemm_tflops_at(double m) const {
  if (gemm_by_m.empty() || m >= gemm_by_m.back().m) return gemm_tflops;
  if (m <= gemm_by_m.front().m) return gemm_by_m.front().tflops;
  for (size_t i = 1; i < gemm_by_m.size(); ++i) {
    const GemmPoint& a = gemm_by_m[i - 1];
    const GemmPoint& b = gemm_by_m[i];
    if (m <= b.m) {
      const double t = std::log(m / a.m) / std::log(double(b.m) / a.m);
      return std::exp(std::log(a.tflops) + t * (std::log(b.tflops) - std::log(a.tflops)));
    }
  }
  return gemm_tflops;
}

const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> catalog = [] {
    GpuSpec h200;
    h200.name = "h200";
    h200.source = "measured on this project's H200 (copy, read, in-place bandwidth, GEMM)";
    h200.memory_bytes = 141 * kGiB;  // as `kvbuf capacity` counts it
    h200.copy_gbps = kH200Copy;
    h200.read_gbps = kH200Read;
    h200.inplace_gbps = kH200InPlace;
    h200.gemm_tflops = kH200Gemm;
    h200.kernel_overhead_us = kAssumedKernelOverheadUs;
    h200.interconnect_gbps = 450;  // NVLink 4, 900 GB/s both directions (datasheet)
    h200.limits = limits_of(9, 0, 132, 50);
    return std::vector<GpuSpec>{
        h200,
        // Datasheet GPUs (memory, DRAM bandwidth, dense bf16 tensor throughput with fp32
        // accumulation, interconnect one direction: NVLink, or PCIe where the GPU has none).
        from_datasheet("a100-40gb", "datasheet (A100 SXM 40 GB: 1.555 TB/s, 312 TFLOP/s bf16, NVLink 3 300 GB/s), scaled by the H200's measured fractions",
                       40, 1.555, 312, 300, limits_of(8, 0, 108, 40)),
        from_datasheet("a100-80gb", "datasheet (A100 SXM 80 GB: 2.039 TB/s, 312 TFLOP/s bf16, NVLink 3 300 GB/s), scaled by the H200's measured fractions",
                       80, 2.039, 312, 300, limits_of(8, 0, 108, 40)),
        from_datasheet("l40s", "datasheet (L40S: 48 GB, 0.864 TB/s, 362 TFLOP/s bf16, PCIe 4.0 x16 32 GB/s, no NVLink), scaled by the H200's measured fractions",
                       48, 0.864, 362, 32, limits_of(8, 9, 142, 96)),
        from_datasheet("rtx4090", "datasheet (RTX 4090: 24 GB, 1.008 TB/s, 165 TFLOP/s bf16 with fp32 accumulation, PCIe 4.0 x16 32 GB/s, no NVLink), scaled by the H200's measured fractions",
                       24, 1.008, 165.2, 32, limits_of(8, 9, 128, 72)),
        from_datasheet("h100-pcie", "datasheet (H100 PCIe: 80 GB, 2.0 TB/s, 756 TFLOP/s bf16, NVLink bridge 300 GB/s), scaled by the H200's measured fractions",
                       80, 2.0, 756, 300, limits_of(9, 0, 114, 50)),
        from_datasheet("h100-sxm", "datasheet (H100 SXM: 80 GB, 3.35 TB/s, 989 TFLOP/s bf16, NVLink 4 450 GB/s), scaled by the H200's measured fractions",
                       80, 3.35, 989, 450, limits_of(9, 0, 132, 50)),
        from_datasheet("b200", "datasheet (B200: 180 GB, 8 TB/s, 2250 TFLOP/s bf16, NVLink 5 900 GB/s), scaled by the H200's measured fractions",
                       180, 8.0, 2250, 900, limits_of(10, 0, 148, 126)),
    };
  }();
  return catalog;
}

const GpuSpec& find_gpu(const std::string& name) {
  std::string known;
  for (const GpuSpec& g : gpu_catalog()) {
    if (g.name == name) return g;
    known += (known.empty() ? "" : ", ") + g.name;
  }
  throw bad("unknown GPU '" + name + "' (known: " + known + ")");
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> names;
  for (const GpuSpec& g : gpu_catalog()) names.push_back(g.name);
  return names;
}

std::string gpu_file_key(const std::string& device_name) {
  std::string lower;
  for (char c : device_name) lower += char(std::tolower(static_cast<unsigned char>(c)));
  const auto has = [&](const char* part) { return lower.find(part) != std::string::npos; };
  if (has("h200")) return "h200";
  if (has("h100")) return has("pcie") ? "h100-pcie" : "h100-sxm";
  if (has("a100")) return has("80gb") ? "a100-80gb" : "a100-40gb";
  if (has("l40s")) return "l40s";
  if (has("rtx 4090")) return "rtx4090";
  if (has("b200")) return "b200";
  std::string key;
  std::istringstream words(lower);
  std::string w;
  while (words >> w) {
    if (w == "nvidia" || w == "geforce") continue;
    for (char c : w) {
      const bool keep = std::isalnum(static_cast<unsigned char>(c)) != 0;
      if (keep)
        key += c;
      else if (!key.empty() && key.back() != '-')
        key += '-';
    }
    if (!key.empty() && key.back() != '-') key += '-';
  }
  while (!key.empty() && key.back() == '-') key.pop_back();
  return key.empty() ? "gpu" : key;
}

Calibration read_calibration(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw bad("cannot read calibration file '" + path + "'");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw bad("calibration file '" + path + "' is not JSON: " + e.what());
  }
  Calibration c;
  try {
    c.gpu_name = j.at("gpu").get<std::string>();
    c.commit = j.value("commit", std::string("unknown"));
    c.copy_gbps = j.at("copy_gbps").get<double>();
    c.kernel_overhead_us = j.at("kernel_overhead_us").get<double>();
    c.gemm_n = j.at("gemm_n").get<int>();
    c.gemm_k = j.at("gemm_k").get<int>();
    for (const auto& p : j.at("gemm"))
      c.gemm_by_m.push_back({p.at("m").get<int>(), p.at("tflops").get<double>()});
    if (j.contains("step_terms")) {
      const auto& t = j.at("step_terms");
      StepTermFit& f = c.step_terms;
      f.fitted = true;
      f.source = t.value("source", std::string("unknown"));
      f.rows = t.value("rows", 0);
      f.attn_layer_us = t.at("attention_layer_us").get<double>();
      f.attn_token_us = t.at("attention_layer_token_us").get<double>();
      f.attn_us_per_byte = t.at("attention_us_per_kv_byte").get<double>();
      f.gemm_kernel_us = t.at("gemm_kernel_us").get<double>();
      f.gemm_us_per_dense_byte = t.at("gemm_us_per_dense_byte").get<double>();
      f.gemm_us_per_expert_byte = t.at("gemm_us_per_expert_byte").get<double>();
      f.gemm_us_per_flop = t.at("gemm_us_per_flop").get<double>();
      f.elementwise_kernel_us = t.at("elementwise_kernel_us").get<double>();
      f.elementwise_us_per_byte = t.at("elementwise_us_per_byte").get<double>();
      for (double v : {f.attn_layer_us, f.attn_token_us, f.attn_us_per_byte, f.gemm_kernel_us, f.gemm_us_per_dense_byte,
                       f.gemm_us_per_expert_byte, f.gemm_us_per_flop, f.elementwise_kernel_us, f.elementwise_us_per_byte})
        if (!(v >= 0)) throw bad("calibration file '" + path + "': step_terms coefficients must be non-negative");
    }
  } catch (const nlohmann::json::exception& e) {
    throw bad("calibration file '" + path + "': " + e.what());
  }
  if (!(c.copy_gbps > 0) || !(c.kernel_overhead_us >= 0) || c.gemm_by_m.empty())
    throw bad("calibration file '" + path +
              "': copy_gbps must be positive, kernel_overhead_us non-negative, gemm non-empty");
  for (size_t i = 0; i < c.gemm_by_m.size(); ++i) {
    if (c.gemm_by_m[i].m < 1 || !(c.gemm_by_m[i].tflops > 0))
      throw bad("calibration file '" + path + "': gemm entries need m >= 1 and tflops > 0");
    if (i > 0 && c.gemm_by_m[i].m <= c.gemm_by_m[i - 1].m)
      throw bad("calibration file '" + path + "': gemm entries must have ascending m");
  }
  return c;
}

void write_calibration(const std::string& path, const Calibration& c) {
  nlohmann::json j;
  j["gpu"] = c.gpu_name;
  j["commit"] = c.commit;
  j["copy_gbps"] = c.copy_gbps;
  j["kernel_overhead_us"] = c.kernel_overhead_us;
  j["gemm_n"] = c.gemm_n;
  j["gemm_k"] = c.gemm_k;
  j["gemm"] = nlohmann::json::array();
  for (const GemmPoint& p : c.gemm_by_m) j["gemm"].push_back({{"m", p.m}, {"tflops", p.tflops}});
  if (c.step_terms.fitted) {
    const StepTermFit& f = c.step_terms;
    j["step_terms"] = {{"source", f.source},
                       {"rows", f.rows},
                       {"attention_layer_us", f.attn_layer_us},
                       {"attention_layer_token_us", f.attn_token_us},
                       {"attention_us_per_kv_byte", f.attn_us_per_byte},
                       {"gemm_kernel_us", f.gemm_kernel_us},
                       {"gemm_us_per_dense_byte", f.gemm_us_per_dense_byte},
                       {"gemm_us_per_expert_byte", f.gemm_us_per_expert_byte},
                       {"gemm_us_per_flop", f.gemm_us_per_flop},
                       {"elementwise_kernel_us", f.elementwise_kernel_us},
                       {"elementwise_us_per_byte", f.elementwise_us_per_byte}};
  }
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << j.dump(2) << '\n';
}

GpuSpec apply_calibration(const GpuSpec& gpu, const Calibration& c) {
  GpuSpec g = gpu;
  const double scale = c.copy_gbps / gpu.copy_gbps;
  g.copy_gbps = c.copy_gbps;
  g.read_gbps *= scale;
  g.inplace_gbps *= scale;
  g.kernel_overhead_us = c.kernel_overhead_us;
  g.overhead_measured = true;
  g.gemm_by_m = c.gemm_by_m;
  g.gemm_tflops = c.gemm_by_m.back().tflops;
  g.step_terms = c.step_terms;
  g.source += "; calibrated on " + c.gpu_name + " (commit " + c.commit + ")";
  return g;
}

}  // namespace kvbuf
