// `kvbuf accuracy`: how far the decode kernels' outputs and states drift from exact arithmetic over
// one long generation, with fp32, bf16 and fp16 states (docs/kvbuffer-math.md section 11). A classic
// kernel rounds a 16-bit state at every token; KVBuffer rounds S0 once per fold, C times less often.
// One request (batch 1), one layer of a catalog model's shapes (tp 1), decoded token by token on the
// GPU by each variant (method, state type, C), against the float64 reference (reference/, no
// rounding) stepping the same inputs.
//
// This file is the plain C++ half (CPU builds and tests too): the variants and sampled tokens, the
// inputs, the reference run, the error metrics and the CSV rows. bench/accuracy/accuracy_run.cu
// drives the kernels (CUDA builds), bench/cmd_accuracy.cpp is the command.
//
// Inputs, drawn on the host from the seed, per token from its own generator (token t's values do
// not depend on how many tokens run, so a short run decodes the first tokens of a long one), rounded
// to what the kernels take (bf16 token tensors, fp32 layer parameters); zero initial state:
//   GDN, as Qwen3-Next computes them: q, k ~ N(0, 1) un-normalised (the kernels and the reference
//     apply their own L2 normalisation, k / sqrt(|k|^2 + 1e-6), q likewise times K^-0.5); v ~ N(0, 1);
//     gates computed in kernel from a, b ~ N(0, 1) (bf16) and the layer's A_log, dt_bias (fp32):
//     g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b). A_log ~ U(log 1, log 16) per value
//     head. dt_bias sets each head's median decay (at a = 0): value head h of HV gets
//     |g| = exp(log(-ln 0.999) + (h + 1/2) / HV (log(ln 2) - log(-ln 0.999))), log-spaced, so the
//     heads' median decays e^g spread over 0.5 .. 0.999, and dt_bias = softplus^-1(|g| / exp(A_log));
//     a ~ N(0, 1) then moves a token's |g| by up to about e^{+-2} on the long-memory heads (where
//     softplus is nearly exp) and beta over sigmoid's range.
//   Mamba-2, as Nemotron-H: x, B, C ~ N(0, 1); dt_raw ~ N(0, 1) (bf16), the kernels take
//     dt = softplus(dt_raw + dt_bias) with Mamba's initialisation of dt_bias: softplus(dt_bias) = dt0,
//     dt0 ~ logU(1e-3, 1e-1) per head (dt_bias = dt0 + log(-expm1(-dt0))); A = -exp(A_log),
//     A_log ~ U(log 1, log 16); D = 1 (Mamba's initialisation); no z gate (vLLM's and HF's decode
//     call selective_state_update with z = None and gate in the RMSNorm after it). Median decays
//     e^{dt0 A} from 0.999 down to e^-1.6.
// Long memory on some heads (decays near 1) is what lets state rounding errors accumulate.
//
// The pool of a KVBuffer variant holds the whole state only right after a fold: with C the
// capacity, the token whose fill n has n + 1 == C folds (kernels/gdn/gdn_decode.h), i.e. after
// `decoded` tokens with decoded % C == 0 (the buffer starts empty at token 1). Outputs are complete
// at every token.
#pragma once
#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "reference/gdn.h"
#include "reference/mamba2.h"
#include "sim/catalog.h"
#include "sim/layout.h"

namespace kvbuf::accuracy {

// One decode method at one state type; KVBuffer also at one entry type and capacity C.
struct Variant {
  bool kvbuffer = false;
  StateType state = StateType::FP32;
  EntryType entry = EntryType::BF16;  // KVBuffer (cached-u entries); unused by recurrent
  int chunk = 0;                      // C; 0 for recurrent
  const char* method() const { return kvbuffer ? "kvbuffer" : "recurrent"; }
  // "recurrent bf16", "kvbuffer bf16 C 16", "kvbuffer bf16 C 16 fp32 entries".
  std::string label() const;
};

// Per state type (in the order given): recurrent, then KVBuffer at each C for each entry type.
// Mamba-2 entries are bf16 only (x and B arrive in bf16, so its entries hold them exactly): its
// KVBuffer variants take the bf16 entries whatever `entries` holds.
std::vector<Variant> make_variants(LayerKind kind, const std::vector<StateType>& states, const std::vector<int>& chunks,
                                   const std::vector<EntryType>& entries);

// The sampled token counts (tokens decoded, the sampled one included): every, 2 every, ..., and
// `tokens` itself when it is not a multiple. Throws std::invalid_argument unless both are positive.
std::vector<int> sample_points(int tokens, int every);

// Whether the variant's state pool holds the state after `decoded` tokens: always for recurrent;
// for KVBuffer right after a fold (decoded % C == 0).
bool state_in_pool(const Variant& v, int decoded);

// ---- inputs (the header says how they are drawn) ------------------------------------------------

// Every value is what a kernel receives: bf16 values held as float for the token tensors, fp32 for
// the layer parameters.
struct GdnInputs {
  ref::GdnDims dims;
  int tokens = 0;
  std::vector<float> q, k, v;         // [T, H, K] raw, [T, H, K] raw, [T, HV, V]
  std::vector<float> a, b;            // [T, HV]: gate inputs
  std::vector<float> A_log, dt_bias;  // [HV]
};
struct Mamba2Inputs {
  ref::Mamba2Dims dims;
  int tokens = 0;
  std::vector<float> x, B, C, dt_raw;  // [T, NH, P], [T, G, N], [T, G, N], [T, NH]
  std::vector<float> dt_bias, A, D;    // [NH]; A < 0
};

// Draws `tokens` tokens of the layer shape's inputs from `seed` on `threads` threads (0 = every
// hardware thread); the values do not depend on `threads`. Throws std::invalid_argument for bad
// dims or tokens < 1.
GdnInputs make_gdn_inputs(const ref::GdnDims& dims, int tokens, uint64_t seed, int threads = 0);
Mamba2Inputs make_mamba2_inputs(const ref::Mamba2Dims& dims, int tokens, uint64_t seed, int threads = 0);

// Tokens [begin, begin + count) for the float64 reference: the same values, gates computed in
// float64 from them (GDN: ref::gdn_gate_g and ref::gdn_gate_beta; Mamba-2: dt = softplus of the
// kernel's fp32 sum dt_raw + dt_bias, taken in float64).
ref::GdnTokens<double> gdn_reference_tokens(const GdnInputs& in, int begin, int count);
ref::Mamba2Tokens<double> mamba2_reference_tokens(const Mamba2Inputs& in, int begin, int count);

// Each head's median per-token decay: GDN e^g at a = 0, Mamba-2 e^{dt A} at dt_raw = 0.
std::vector<double> median_decays(const GdnInputs& in);
std::vector<double> median_decays(const Mamba2Inputs& in);

// The catalog shape as reference dims (GDN: H, HV, K, V; Mamba-2: G, NH, N = head_k, P = head_v).
ref::GdnDims gdn_dims(const LayerShape& s);
ref::Mamba2Dims mamba2_dims(const LayerShape& s);

// What the inputs are, in one line per family (printed by the command before it runs).
std::string inputs_description(LayerKind kind);

// ---- the float64 ground truth -------------------------------------------------------------------

// The exact recurrence of one request (ref::gdn_decode_recurrent / ref::mamba2_decode_recurrent,
// no StateStore), stepped window by window from a zero state. The value heads are split into
// slices, each one key head's (group's) heads or part of them, run on their own threads: heads are
// independent, so the results equal one call on all heads exactly.
class GdnReference {
 public:
  GdnReference(const GdnInputs& in, int threads = 0);
  // Steps tokens [begin, end) (begin = the tokens stepped so far); o [(end - begin), HV, V].
  void step(int begin, int end, std::vector<double>& o);
  int stepped() const { return stepped_; }
  // The state after the tokens stepped: HV matrices K x V.
  ref::GdnState<double> state() const;

 private:
  const GdnInputs& in_;
  int threads_, stepped_ = 0;
  std::vector<int> first_head_, heads_;       // per slice: first value head, value heads
  std::vector<ref::GdnState<double>> state_;  // per slice
};

class Mamba2Reference {
 public:
  Mamba2Reference(const Mamba2Inputs& in, int threads = 0);
  void step(int begin, int end, std::vector<double>& y);  // y [(end - begin), NH, P]
  int stepped() const { return stepped_; }
  ref::Mamba2State<double> state() const;  // NH matrices P x N

 private:
  const Mamba2Inputs& in_;
  int threads_, stepped_ = 0;
  std::vector<int> first_head_, heads_;
  std::vector<ref::Mamba2State<double>> state_;
};

// fn(i) for i in [0, n) on `threads` threads (0 = every hardware thread); the first exception a call
// throws is rethrown once all have finished.
void parallel_for(int n, int threads, const std::function<void(int)>& fn);

// Slices of value heads for `threads` threads: each key head's HV / H value heads in
// min(HV / H, ceil(threads / H)) contiguous parts (at least one slice per key head). Pairs of
// (first value head, count), in head order.
std::vector<std::pair<int, int>> head_slices(int key_heads, int value_heads, int threads);
// 0 -> the hardware's threads (at least 1).
int resolve_threads(int threads);

// ---- error metrics ------------------------------------------------------------------------------

// sqrt(err_sq / ref_sq): 0 when both are 0, +inf when only the reference is 0.
double relative(double err_sq, double ref_sq);

// Output error of n values against the reference: sums of squares (for windows of several tokens),
// the relative rms error and the largest absolute error. NaN in `out` gives NaN.
struct OutputError {
  double err_sq = 0, ref_sq = 0, max_abs = 0;
  size_t count = 0;  // values summed
  double rel() const { return relative(err_sq, ref_sq); }
  double ref_rms() const { return count ? std::sqrt(ref_sq / double(count)) : 0.0; }
  void add(const OutputError& o);
};
OutputError output_error(const float* out, const double* ref, size_t n);

// A state held in a pool, as doubles in the pool's layout [heads, rows, cols] (GDN [HV, V, K]:
// row v, column k is the reference's (k, v), ref_transposed; Mamba-2 [NH, P, N]: the reference's
// (p, n)), against the reference state:
//   rel           ||pool - ref||_F / ||ref||_F over all heads;
//   max_head_rel  the largest per-head ||pool_h - ref_h||_F / ||ref_h||_F (heads whose reference is
//                 zero count when their pool is not);
//   one_rounding  ||round_t(ref) - ref||_F / ||ref||_F with round_t the pool type's rounding to
//                 nearest (ref::round_to_state): the smallest error a state stored in that type can
//                 have, since each stored element is a point of the type's grid. So rel >= one_rounding
//                 for every state a kernel stores (up to the float64 sums).
struct StateError {
  double rel = 0, max_head_rel = 0, one_rounding = 0, ref_norm = 0;
};
StateError state_error(const std::vector<double>& pool, const std::vector<Eigen::MatrixXd>& ref, bool ref_transposed,
                       StateType type);

// ---- CSV ----------------------------------------------------------------------------------------

// Columns (units in the names; errors are relative unless named abs):
//   family, model, method, state_dtype, entry_dtype ("none" for recurrent), chunk (C, 0 for
//   recurrent), tokens (decoded, this one included), out_rel_err (rms over the token's HV x V
//   outputs / rms of the reference's), out_max_abs_err, window_tokens and out_rel_err_window (the
//   same over every token since the previous row), out_ref_rms, state_rel_err, state_rel_err_max_head,
//   state_rel_err_one_rounding, state_ref_norm (empty where the pool holds no whole state: a KVBuffer
//   row between folds, the note says so), seed, gpu, commit, note.
const std::vector<std::string>& csv_columns();

struct Row {
  std::string family, model;
  Variant variant;
  int tokens = 0, window_tokens = 0;
  OutputError out, window;
  std::optional<StateError> state;
  uint64_t seed = 0;
  std::string gpu, commit, note;
};
std::vector<std::string> csv_fields(const Row& r);

// results/accuracy_<gpu>.csv with <gpu> the device name's last word in lower case ("NVIDIA H200" ->
// h200), as scripts/run.sh names the results of a GPU.
std::string default_out_path(const std::string& gpu_name);

// ---- the command --------------------------------------------------------------------------------

struct Options {
  std::vector<std::string> models{"qwen3-next-80b-a3b", "nemotron-3-nano-30b-a3b"};
  int tokens = 16384;
  std::vector<int> chunks{8, 16, 64};
  std::vector<StateType> states{StateType::FP32, StateType::BF16, StateType::FP16};
  std::vector<EntryType> entries{EntryType::BF16};
  int every = 64;
  uint64_t seed = 1;
  int threads = 0;
  std::string out;  // empty: default_out_path
};
constexpr int kMaxTokens = 1 << 18;  // 4 GiB of GDN token inputs on the device at most

// Checks the options (std::invalid_argument with the option's name): known catalog models, tokens
// in 1..kMaxTokens, every >= 1, C in 1..64, at least one state type, chunk and entry type.
void validate(const Options& o);

// Rows the run writes: per model, variants x sampled tokens.
size_t planned_rows(const Options& o);

// Empty when every sampled token count is a multiple of every C (--every and --tokens multiples of
// their lcm: each KVBuffer row has its state); else a line saying which rows lack it.
std::string sampling_note(const Options& o);

}  // namespace kvbuf::accuracy
