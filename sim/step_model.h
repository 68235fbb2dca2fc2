// The decode step of a whole model at batch B on one GPU of a TP group: each term separately, so
// a user sees what share of a step the linear-attention layers are.
//   linear attention: the measured per-layer kernel tables (results/*.csv, read at run time),
//       interpolated over batch and C and scaled to the model's layer by the bytes model; where no
//       measurement exists (a family without tables, C outside the measured range) the bytes model over the
//       GPU's bandwidth plus one kernel overhead, flagged "modelled";
//   full attention: KV-cache bytes read at the requests' context lengths;
//   projections, MLP / MoE, LM head: weight bytes read per step (MoE: the expected distinct experts
//       touched by the step's tokens under uniform routing) or GEMM time where compute-bound;
//   per-layer kernel overhead and, at TP > 1, two all-reduces per layer.
// Given an operator profile (sim/step_profile.h), the full-attention, GEMM/MoE and elementwise
// (overhead) terms are the measured operators' where the profile covers the configuration.
// Speculative decoding verifies T tokens per request per step (the last accepted token and T - 1
// drafts) and emits m of them, m = 1 + the leading drafts accepted, E[m] = (1 - a^T) / (1 - a).
#pragma once
#include <array>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "sim/catalog.h"
#include "sim/gpus.h"
#include "sim/layout.h"
#include "sim/step_profile.h"

namespace kvbuf {

enum class DecodeMethod { Classic, KVBuffer };
const char* method_name(DecodeMethod m);             // "classic" / "kvbuffer"
DecodeMethod parse_method(const std::string& name);  // throws std::invalid_argument

// The linear-attention kernels a step runs (names as the sweeps' CSV rows).
enum class LinearKernel { Recurrent, KVBuffer, Direct, VerifyClassic, VerifyKVBuffer };
const char* linear_kernel_name(LinearKernel k);

// Measured per-layer latency of one kernel, us (median), at (batch, C, T); C = 0 and T = 0 where
// the kernel has none.
struct MeasuredPoint {
  LinearKernel kernel = LinearKernel::Recurrent;
  int batch = 0, chunk = 0, drafts = 0;
  double latency_us = 0;
  std::string method;  // the sweep row's kernel or method name (verify-classic or verify-classic-inplace, ...)
};

// Where a linear-attention time came from.
enum class LinearSource { Measured, Extrapolated, Modelled };
const char* linear_source_name(LinearSource s);

struct LinearLookup {
  double latency_us = 0;  // per layer per step
  LinearSource source = LinearSource::Modelled;
};

// The measured tables of one reference layer shape (the model the sweeps ran).
class MeasuredLinearTable {
 public:
  MeasuredLinearTable() = default;
  MeasuredLinearTable(ModelSpec reference, std::vector<MeasuredPoint> points);
  // One layer family's rows of the sweeps' tables in results_dir at one state type: decode_h200.csv
  // and verify_h200.csv for fp32, decode16_h200.csv and verify16_h200.csv (their rows of that
  // state_dtype) for bf16 and fp16: recurrent in place, kvbuffer and direct (GDN: bf16 cached-u entries), the
  // faster of every verify-classic* chain method per point and verify-kvbuffer; Mamba-2's kernels
  // are the same names with the prefix mamba2-. A missing file adds no points (no rows of the family
  // at all: an empty table, every time modelled); a malformed one throws std::invalid_argument
  // naming file and line.
  static MeasuredLinearTable load(const std::string& results_dir, LayerKind kind, StateType state = StateType::FP32);
  const ModelSpec& reference() const { return reference_; }
  // One point per (kernel, batch, C, T): the faster of two methods where both were measured.
  const std::vector<MeasuredPoint>& points() const { return points_; }
  // Every measured row as loaded, each with its method.
  const std::vector<MeasuredPoint>& measured_rows() const { return measured_rows_; }
  bool empty() const { return points_.empty(); }
  // Latency at a (possibly fractional) batch: piecewise linear between measured batches, the
  // smallest batch's time below it, linear extrapolation from the last two above the largest
  // (source Extrapolated); between measured C values linear in C. False where the kernel, T or
  // C lies outside what was measured.
  bool lookup(LinearKernel k, double batch, int chunk, int drafts, LinearLookup* out) const;

 private:
  bool series(LinearKernel k, int chunk, int drafts, double batch, LinearLookup* out) const;
  ModelSpec reference_;
  std::vector<MeasuredPoint> points_;
  std::vector<MeasuredPoint> measured_rows_;
  std::map<std::tuple<int, int, int>, std::vector<std::pair<int, double>>> by_series_;  // (kernel, C, T) -> (batch, us)
};

// The held-out check: the table built without the points at `held_out_batches` predicts them; the
// bytes-model fallback next to it sizes the state in `state` (the state type the table was loaded at).
struct HeldOutRow {
  MeasuredPoint measured;
  double predicted_us = 0;
  double modelled_us = 0;  // the bytes-model fallback's prediction at the same point
  double error() const { return predicted_us / measured.latency_us - 1; }
  double modelled_error() const { return modelled_us / measured.latency_us - 1; }
};
std::vector<HeldOutRow> held_out_check(const MeasuredLinearTable& full, const GpuSpec& gpu,
                                       const std::vector<int>& held_out_batches, StateType state = StateType::FP32);

struct StepConfig {
  ModelSpec model;  // as the catalog has it (before tensor parallelism)
  int tp = 1;
  GpuSpec gpu;
  DecodeMethod method = DecodeMethod::KVBuffer;
  int chunk = 16;  // C, KVBuffer only
  int drafts = 0;  // T tokens verified per step; 0: plain decode
  double acceptance = 0.7;
  StateType state = StateType::FP32;  // the linear-attention state's element type (both methods)
  std::string routing = "uniform";    // MoE routing of the profile rows the step looks up
};

// What the fitted terms (GpuSpec::step_terms) multiply their coefficients with, for one step on
// one GPU of the TP group. Each term is linear in its coefficients, so the fit is least squares.
struct GemmFeatures {
  double kernels = 0;       // GEMM launches (fused qkv, o, gate-up, down, router, grouped experts, LM head)
  double dense_bytes = 0;   // weight bytes read by the dense GEMMs
  double expert_bytes = 0;  // weight bytes of the routed experts the step's tokens touch (uniform routing)
  double flops = 0;         // 2 x rows x parameters used
  static constexpr int kCount = 4;
  std::array<double, kCount> values() const { return {kernels, dense_bytes, expert_bytes, flops}; }
  GemmFeatures& operator+=(const GemmFeatures& o);
};
struct StepFeatures {
  double attn_layers = 0;        // full-attention layers
  double attn_layer_tokens = 0;  // full-attention layers x tokens in the step
  double kv_bytes = 0;           // KV cache read
  GemmFeatures projections, mlp, lm_head;
  double elementwise_kernels = 0;  // norms, activations, routing, residual adds: what the overhead term counts
  double elementwise_bytes = 0;    // activations read + written: tokens x hidden x 2 B x 2 per block
  static constexpr int kAttentionCount = 3, kElementwiseCount = 2;
  std::array<double, kAttentionCount> attention() const { return {attn_layers, attn_layer_tokens, kv_bytes}; }
  GemmFeatures gemm() const;  // the three groups summed
  std::array<double, kElementwiseCount> elementwise() const { return {elementwise_kernels, elementwise_bytes}; }
};
// The coefficients of a fit in the features' order, and each term's time under a fit.
std::array<double, StepFeatures::kAttentionCount> attention_coefficients(const StepTermFit& f);
std::array<double, GemmFeatures::kCount> gemm_coefficients(const StepTermFit& f);
std::array<double, StepFeatures::kElementwiseCount> elementwise_coefficients(const StepTermFit& f);
double fitted_attention_us(const StepTermFit& f, const StepFeatures& x);
double fitted_gemm_us(const StepTermFit& f, const GemmFeatures& x);
double fitted_elementwise_us(const StepTermFit& f, const StepFeatures& x);

struct StepTerms {
  double linear_attn_us = 0;
  double attn_kv_us = 0;
  double projections_us = 0;  // linear-attention and attention in/out projections
  double mlp_us = 0;          // dense MLP, or shared expert(s), router and routed experts
  double lm_head_us = 0;
  double overhead_us = 0;     // per-kernel launch and drain
  double comm_us = 0;         // TP all-reduces
  LinearSource linear_source = LinearSource::Measured;
  // true: attention, GEMM/MoE and elementwise (overhead_us) from the GPU's fit to measured step
  // profiles; false: bytes over bandwidth, GEMM rooflines and the per-kernel overhead
  bool fitted_terms = false;
  // Where the attention, GEMM/MoE (projections + MLP + LM head) and elementwise (overhead) terms
  // came from: an operator profile (StepModel's profile), or the parametric terms above.
  std::array<TermSource, kOperatorTerms> operator_sources{TermSource::Parametric, TermSource::Parametric,
                                                          TermSource::Parametric};
  bool mlp_compute_bound = false;
  double experts_touched = 0;  // per MoE layer, expected
  double total_us() const {
    return linear_attn_us + attn_kv_us + projections_us + mlp_us + lm_head_us + overhead_us + comm_us;
  }
};

class StepModel {
 public:
  // Throws std::invalid_argument on a bad configuration (tp not dividing the heads, C < T, ...).
  // With a profile, the attention, GEMM/MoE and elementwise terms come from it where it covers the
  // configuration (sim/step_profile.h).
  StepModel(const StepConfig& config, MeasuredLinearTable table,
            std::shared_ptr<const StepProfileTable> profile = nullptr);
  // The profile key of this configuration.
  ProfileKey profile_key() const;
  const StepConfig& config() const { return cfg_; }
  const ModelSpec& model_per_gpu() const { return per_gpu_; }
  // Tokens each request feeds per step (1, or T) and emits on average (1, or E[m]).
  int tokens_per_request() const { return cfg_.drafts > 0 ? cfg_.drafts : 1; }
  double expected_emitted() const;
  // One decode step of the requests whose current context lengths are `contexts`. In plain
  // KVBuffer decode a request whose context is below C runs in direct mode (no state yet).
  StepTerms step(const std::vector<long>& contexts) const;
  // The fitted terms' features for the same step.
  StepFeatures features(const std::vector<long>& contexts) const;
  // The same at batch B, every request at context L.
  StepTerms step_uniform(int batch, long context) const;
  // Per-layer time of one linear-attention kernel at batch B (0 at B = 0).
  LinearLookup linear_layer(LinearKernel k, int batch) const;
  // The bytes-model fallback for one layer at batch B of the model's own shape.
  double modelled_layer_us(LinearKernel k, int batch) const;
  // Prefill of one prompt of `tokens` tokens, us: weights read once or GEMM time, attention
  // FLOPs (causal), linear-attention chunked FLOPs, kernel overhead.
  double prefill_us(long tokens) const;
  // GPU memory one request holds: linear-attention pools (the method's) + full-attention KV of
  // `context_tokens` tokens; weight bytes per GPU.
  double request_bytes(long context_tokens) const;
  double weight_bytes_per_gpu() const { return 2.0 * weights_.total() / cfg_.tp; }

 private:
  struct Roofline {
    double us = 0;
    bool compute_bound = false;
  };
  Roofline gemm(double params, double rows, double rows_per_weight) const;
  StepTerms parametric_step(const std::vector<long>& contexts) const;
  double bytes_per_request(LinearKernel k, const LayerShape& s) const;
  StepConfig cfg_;
  ModelSpec per_gpu_;
  WeightCounts weights_;
  MeasuredLinearTable table_;
  bool table_applies_ = false;  // same layer kind as the table's reference
  std::shared_ptr<const StepProfileTable> profile_;
};

}  // namespace kvbuf
