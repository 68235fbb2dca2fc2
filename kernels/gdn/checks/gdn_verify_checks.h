// The GDN verify kernel checks (defined in gdn_verify_checks.cu, which also says what a case checks
// and where each tolerance comes from), shared by the gtest binary kernels/gdn/tests/test_gdn_verify.cu
// and `kvbuf check` (bench/gpu_checks.cu).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/common/decode_path.h"
#include "reference/random_inputs.h"
#include "sim/state_type.h"

namespace kvbuf::verify_check {

enum class VerifyMethod { KVBuffer, Classic };

struct VerifyCase {
  std::string name;
  VerifyMethod method;
  int K, V, H, HV, C, T;  // C: buffer capacity (KVBuffer only); T: draft tokens (nodes) per round
  bool bf16_entries;      // KVBuffer only
  bool tree;
  ref::GateRange gates;
  int rounds;
  bool in_place = false;  // Classic only: node states into pool slots, commit by index (gdn_verify.h)
  StateType state = StateType::FP32;  // the pools' state type (and classic's step states)
  // KVBuffer only: the verify runs with pools_ready_at_launch (gdn_verify.h) right after a kernel that
  // writes the window's inputs only after it has let the verify start
  // (kernels/common/checks/late_copy.h): an input read before the verify's wait reads poison.
  bool late_inputs = false;
  // KVBuffer only: the launch path (gdn_verify.h); Split runs the coefficient kernel and the state
  // kernel on a poisoned workspace, which the small grids of the checks never reach under Auto.
  DecodePath path = DecodePath::Auto;
};

// The name with its method, unique over verify_cases().
std::string qualified_name(const VerifyCase& c);
// Every field of the case as `field=value`, for failure messages.
std::string describe(const VerifyCase& c);
// gtest's printer for the case (ADL), instead of its bytes.
void PrintTo(const VerifyCase& c, std::ostream* os);

struct VerifyResult {
  VerifyMethod method = VerifyMethod::KVBuffer;
  bool passed = true;
  std::string message;  // the first failure
  double out_err = 0, tol_out = 0;
  // KVBuffer: the state each row accepted so far (S0 folded with the buffer) after every round.
  // Classic: the committed pool state after every round.
  double state_err = 0, tol_state = 0;
  // KVBuffer: the pool state S0 after every fold (tol_state); verify_folds + commit_folds > 0.
  double fold_err = 0;
  int verify_folds = 0, commit_folds = 0;
  int max_row_folds = 0;  // the most folds one row went through (16-bit states' tolerance, bf16 entries)
  // Classic: the state every node writes (step_states, or its step slot in place; tol_state).
  double node_state_err = 0;
  long outputs_checked = 0, states_checked = 0;  // node outputs (HV x V each), states (HV x K x V each)

  // "PASS|FAIL name: errors, tolerances, counts -- first failure".
  std::string line(const std::string& name) const;
};

// Runs the case on inputs drawn from `seed`; throws on a CUDA error or a dispatch refusal.
VerifyResult run_verify_case(const VerifyCase& c, uint64_t seed);

// The cases `kvbuf check` and the gtest binary run: KVBuffer cases first, then classic (fp32
// states), then the 16-bit state cases (bf16, then fp16; names "state-bf16-..." and
// "state-fp16-..."). `quick` keeps one chain and one tree case per method (bf16 and fp32 entries,
// T up to 8) and three 16-bit cases.
std::vector<VerifyCase> verify_cases(bool quick);

}  // namespace kvbuf::verify_check
