// The Mamba-2 verify kernel checks (defined in mamba2_verify_checks.cu, which also says what a case
// checks and where each tolerance comes from), shared by the gtest binary
// kernels/mamba2/tests/test_mamba2_verify.cu and `kvbuf check` (bench/gpu_checks.cu); the twin of
// gdn_verify_checks.h.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/common/checks/check_common.h"
#include "sim/state_type.h"  // StateType

namespace kvbuf::mamba2_verify_check {

enum class VerifyMethod { KVBuffer, Classic };

using checks::DtRegime;

struct VerifyCase {
  std::string name;
  VerifyMethod method = VerifyMethod::KVBuffer;
  int G = 2, NH = 4, P = 64, N = 128;
  int C = 16;  // buffer capacity (KVBuffer only)
  int heads_per_block = 0;  // KVBuffer: heads per verify block (Mamba2VerifyKVBufferParams), 0 = the kernel's choice
  bool row_order = false;   // KVBuffer: rows launched in mamba2_verify_kvbuffer_order's order (checked too)
  bool pools_ready_at_launch = false;  // KVBuffer: the pools read before the wait for the kernel before
  int rows_per_warp = 0;    // classic: state rows per warp (Mamba2VerifyClassicParams), 0 = the kernel's choice
  int T = 4;   // draft tokens (nodes) per round
  int batch = 3;     // requests
  int pad_rows = 1;  // extra rows with slot -1
  bool tree = false;
  bool z_gate = false;
  // Typical: dt_raw + dt_bias in about [-9, 6], dt in about [1e-4, 6]; NearZero: in [-16, -15].
  DtRegime dt = DtRegime::Typical;
  int rounds = 0;  // 0: enough for 3 flush cycles (KVBuffer) or 12 (classic)
  StateType state = StateType::FP32;  // the state pool's type (the Params' state_type)
};

// The name with its method, unique over verify_cases().
std::string qualified_name(const VerifyCase& c);
// Every field of the case as `field=value`, for failure messages.
std::string describe(const VerifyCase& c);
void PrintTo(const VerifyCase& c, std::ostream* os);

struct VerifyResult {
  bool passed = true;
  std::string message;  // the first failure
  double max_out_ratio = 0, max_state_ratio = 0;  // worst |err| / tolerance (pass: <= 1)
  int verify_folds = 0, commit_folds = 0;         // KVBuffer
  long outputs_checked = 0, states_checked = 0;   // node outputs (NH x P each), states (NH x P x N each)
  // "PASS|FAIL name: ratios, counts -- first failure".
  std::string line(const std::string& name) const;
};

// Runs the case on inputs drawn from `seed`; throws on a CUDA error or a dispatch refusal.
VerifyResult run_verify_case(const VerifyCase& c, uint64_t seed);

// The cases `kvbuf check` (quick) and the gtest binary (all) run.
std::vector<VerifyCase> verify_cases(bool quick);

}  // namespace kvbuf::mamba2_verify_check
