// GPUs as data for the step model and the serving simulator: memory, bandwidths, bf16 GEMM
// throughput, per-kernel overhead, interconnect. The H200 carries this project's measurements; the
// A100 (40 and 80 GB), L40S, RTX 4090, H100 (PCIe, SXM) and B200 carry datasheet numbers (scaled by
// the H200's measured-to-datasheet ratios) and say so (`datasheet`). A calibration file written by `kvbuf calibrate` on a machine overrides the entries it measured.
#pragma once
#include <string>
#include <vector>

#include "sim/launch_rules.h"  // DeviceLimits

namespace kvbuf {

// Effective bf16 GEMM throughput measured by cuBLAS at M rows (M = tokens in the step).
struct GemmPoint {
  int m = 0;
  double tflops = 0;
};

// The step model's attention, GEMM/MoE and elementwise terms fitted to measured whole-step profiles
// (`kvbuf calibrate-step`, sim/step_calibration.h). Each term is linear in its coefficients over
// the features StepModel::features() counts; without a fit the terms are bytes over bandwidth.
struct StepTermFit {
  bool fitted = false;
  std::string source;  // the step CSV's measurement commit
  int rows = 0;        // measured rows the fit used
  // attention: us per attention layer, per attention layer and token of the step, per KV byte
  double attn_layer_us = 0, attn_token_us = 0, attn_us_per_byte = 0;
  // GEMM / MoE: us per GEMM kernel, per dense weight byte, per routed-expert weight byte, per FLOP
  double gemm_kernel_us = 0, gemm_us_per_dense_byte = 0, gemm_us_per_expert_byte = 0, gemm_us_per_flop = 0;
  // elementwise (norms, activations, routing, residuals): us per kernel, per activation byte
  double elementwise_kernel_us = 0, elementwise_us_per_byte = 0;
};

struct GpuSpec {
  std::string name;    // "h200"
  std::string source;  // where the numbers come from, printed with every result
  bool datasheet = false;          // true: not measured on this project's hardware
  double memory_bytes = 0;         // device memory
  double copy_gbps = 0;            // device-to-device copy, bytes read + written (1 GB = 1e9 B)
  double read_gbps = 0;            // streaming read (weights, KV cache, buffered linear layers)
  double inplace_gbps = 0;         // read-modify-write of a state in place (recurrent update)
  double gemm_tflops = 0;          // dense bf16 peak as measured (large square GEMM)
  std::vector<GemmPoint> gemm_by_m;  // calibration: throughput at small M; empty: peak only
  double kernel_overhead_us = 0;   // launch + drain of one kernel inside a CUDA graph
  bool overhead_measured = false;  // false: an assumption until `kvbuf calibrate` runs
  double interconnect_gbps = 0;    // NVLink, one direction, per GPU (datasheet)
  DeviceLimits limits;             // what the launch rules read (datasheet / CUDA's tuning guides)
  StepTermFit step_terms;          // from a calibration file's "step_terms"; unfitted: bytes over bandwidth

  // bf16 GEMM throughput in TFLOP/s at M rows: log-linear between calibrated points, the peak
  // above the last one and without calibration.
  double gemm_tflops_at(double m) const;
};

const std::vector<GpuSpec>& gpu_catalog();
// Throws std::invalid_argument("unknown GPU ...") listing the known names.
const GpuSpec& find_gpu(const std::string& name);
// The catalog's names, in its order (for option validators and help texts).
std::vector<std::string> gpu_names();
// The name results files carry for a device as the driver names it (decode_<key>.csv, figures_<key>):
// the catalog's name where the device is a catalog GPU ("NVIDIA H200" -> h200, "NVIDIA H100 80GB
// HBM3" -> h100-sxm, "NVIDIA GeForce RTX 4090" -> rtx4090), else the name in lower case without
// "NVIDIA" and "GeForce", runs of other characters as '-' ("NVIDIA GeForce RTX 5090" -> rtx-5090).
std::string gpu_file_key(const std::string& device_name);

// What `kvbuf calibrate` measured on one GPU (the JSON file's contents).
struct Calibration {
  std::string gpu_name;  // as the driver names it
  std::string commit;
  double copy_gbps = 0;
  double kernel_overhead_us = 0;
  std::vector<GemmPoint> gemm_by_m;  // ascending m
  int gemm_n = 0, gemm_k = 0;        // the weight shape the GEMMs were timed at
  StepTermFit step_terms;            // optional ("step_terms"), written by `kvbuf calibrate-step`
};

// Reads and validates a calibration file; throws std::invalid_argument naming the file and field.
Calibration read_calibration(const std::string& path);
void write_calibration(const std::string& path, const Calibration& c);
// The GPU with the calibration's numbers in place: copy bandwidth (the read and in-place
// bandwidths scaled by the same factor), per-kernel overhead, GEMM throughput by M (the peak
// becomes the largest M's), the fitted step terms where the file has them.
GpuSpec apply_calibration(const GpuSpec& gpu, const Calibration& c);

}  // namespace kvbuf
