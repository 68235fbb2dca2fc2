// Pieces shared by the GPU kernel check families (gdn_decode_checks, gdn_verify_checks,
// mamba2_decode_checks, mamba2_verify_checks).
#pragma once
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/common/decode_path.h"
#include "reference/random_inputs.h"
#include "sim/state_type.h"

namespace kvbuf::checks {

// The seed of one case's inputs, from the run's base seed (`kvbuf check --seed`, KVBUF_TEST_SEED
// for the gtest binaries) and the case's name: a case draws the same inputs whichever other cases
// run, in whatever order, on any compiler (FNV-1a of the name, not std::hash).
uint64_t case_seed(uint64_t base_seed, std::string_view case_name);

// "typical", "mild" or "extreme" for the presets of ref::GateRange, else every bound.
std::string gate_range_name(const ref::GateRange& gates);

// The step sizes dt a Mamba-2 kernel computes from its raw input (dt_raw + dt_bias, then softplus),
// and the decays A, per case (mamba2_decode_checks.h and mamba2_verify_checks.h give each family's
// ranges of dt_raw + dt_bias).
enum class DtRegime {
  Typical,   // dt_raw + dt_bias a few units around 0; A in [-4, -0.5]
  NearZero,  // dt_raw + dt_bias about -16: softplus output ~1e-7 (states barely decay)
  Large,     // dt_raw + dt_bias >= 10 and A in [-16, -6]: dt A <= -60, every decay underflows
  Given,     // dt_softplus off, no dt_bias: dt_raw itself in [0.01, 0.5]
};
// "typical", "near-zero", "large" or "given".
const char* dt_regime_name(DtRegime regime);
// "auto", "single" or "split".
const char* path_name(DecodePath path);

// Speculative windows as the verify checks draw them: parent0[t] is node t's parent, 0-based, -1 for
// the committed state. The root path of node t (root first), and the window's depth (the longest
// root path of its T nodes, T for a chain: the verify's fold rule, verify_folds_first).
std::vector<int> root_path(const std::vector<int>& parent0, int t);
int window_depth(const std::vector<int>& parent0, int T);

// describe()'s ` name=value` for the fields of a case that differ from their defaults:
// `FieldsOffDefault field(s); field("cycles", c.cycles, d.cycles);`.
class FieldsOffDefault {
 public:
  explicit FieldsOffDefault(std::ostream& s) : s_(s) {}
  template <class T, class U>
  void operator()(const char* name, const T& value, const U& default_value) {
    if (value != default_value) s_ << " " << name << "=" << value;
  }

 private:
  std::ostream& s_;
};

// Where and when the requests of a decode check run (both families' decode checks): request r
// lives in slot slot_perm[r] of `slots` and row row_perm[r] of `rows` (both shuffled), starts at
// step start[r] (recurrent: 0 or 1; buffered: at fill offset 0..C-1) and runs own_steps[r] steps
// (recurrent_steps, or `cycles` whole flush cycles of C); direct[r]: it starts in direct mode
// (every direct_every-th request of a buffered case; the check clears it at the request's first
// fold). Drawn from rng in that order.
struct DecodeSchedule {
  std::vector<int> slot_perm, row_perm, start, own_steps;
  std::vector<bool> direct;
  int total_steps = 0;  // until the last request ends
};
DecodeSchedule decode_schedule(int batch, int rows, int slots, bool recurrent, int C, int cycles, int recurrent_steps,
                               int direct_every, std::mt19937_64& rng);

// A state element of type t on the host: its bytes at dst from a value already representable in t
// (ref::round_to_state), and its value from its bytes. u_t, the unit roundoff the checks' 16-bit
// tolerances are written in: 2^-8 for bf16 (8 significant bits), 2^-11 for fp16, 0 for fp32 (whose
// error the fp32 tolerances already hold).
void encode_state(StateType t, float v, unsigned char* dst);
double decode_state(StateType t, const unsigned char* src);
// A pool of such values as bytes of t.
std::vector<uint8_t> encode_states(const std::vector<float>& x, StateType t);
double state_unit(StateType t);
// The spacing of t's smallest numbers (its subnormals): 2^-133 for bf16, 2^-24 for fp16, 0 for fp32.
double state_floor(StateType t);
// What the reference rounds to where the kernels write a state: t for 16-bit types; nothing for fp32
// (its float64 reference stays exact: the fp32 tolerances hold the fp32 rounding).
ref::StateStore state_store(StateType t);

// A case result's line: "PASS|FAIL name: details -- message" (no " -- message" without one).
std::string result_line(bool passed, const std::string& name, const std::string& details,
                        const std::string& message);

}  // namespace kvbuf::checks
