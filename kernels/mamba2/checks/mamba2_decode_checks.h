// The Mamba-2 decode kernel checks (defined in mamba2_decode_checks.cu, which also says what a case
// checks and where each tolerance comes from), shared by the gtest binary
// kernels/mamba2/tests/test_mamba2_decode.cu and `kvbuf check` (bench/gpu_checks.cu).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/common/checks/check_common.h"
#include "sim/layout.h"  // StateType

namespace kvbuf::mamba2_check {

enum class Kernel { Recurrent, KVBuffer, Direct };

using checks::DtRegime;

struct Mamba2DecodeCase {
  std::string name;
  Kernel kernel = Kernel::KVBuffer;
  int G = 2, NH = 4, P = 64, N = 128;
  int batch = 3;            // requests
  int pad_rows = 1;         // extra rows with slot -1 every step
  int capacity = 4;
  int cycles = 3;           // full flush cycles every request runs
  int recurrent_steps = 6;
  // Typical: dt_raw + dt_bias in about [-6, 3], dt in about [0.0025, 3]; NearZero: in about
  // [-17, -15].
  DtRegime dt = DtRegime::Typical;
  bool z_gate = false;
  int direct_every = 0;     // request r starts in direct mode when direct_every && r % direct_every == 0
  int rows_per_block = 0;
  int warp_rows = 0;        // Mamba2KVBufferParams::warp_rows (0 = chosen)
  bool row_metadata = false;  // fill/has_state as per-row step inputs instead of pool arrays
  bool every_row_has_state = false;  // the scheduler's promise (only for cases without direct rows)
  DecodePath path = DecodePath::Auto;  // mamba2_decode_direct's launch shape
  // The state pool's element type: the initial state is rounded to it and uploaded in it, and the
  // float64 reference rounds the state where the kernel writes it (mamba2_decode_checks.cu).
  StateType state = StateType::FP32;
  // The kernel runs with pools_ready_at_launch (mamba2_decode.h) right after a kernel that writes
  // the step's token inputs only after it has let this one start (kernels/common/checks/late_copy.h):
  // an input read before the kernel's wait reads poison.
  bool late_inputs = false;
  // The control of late_inputs, which must fail: the kernel before writes the pools (state and
  // buffer) late too, and the kernel reads them before its wait as the flag allows.
  bool late_pools = false;
};

struct CaseResult {
  bool passed = true;
  double max_out_ratio = 0, max_state_ratio = 0;  // worst |err| / tolerance (pass: <= 1)
  long outputs_checked = 0, states_checked = 0;
  std::string message;
  // "PASS|FAIL name: errors / tolerances, counts -- first failure".
  std::string line(const std::string& name) const;
};

// The case as `field=value` (the kernel, head shape, batch, the buffer for buffered kernels, and the
// fields that differ from Mamba2DecodeCase's defaults), for failure messages.
std::string describe(const Mamba2DecodeCase& c);
// gtest's printer for the case (ADL), instead of its bytes.
void PrintTo(const Mamba2DecodeCase& c, std::ostream* os);

// Runs the case on inputs drawn from `seed`; throws on a CUDA error or a dispatch refusal.
CaseResult run_decode_case(const Mamba2DecodeCase& cs, uint64_t seed);

// The cases `kvbuf check` and the gtest binary run. `quick` keeps a representative subset.
std::vector<Mamba2DecodeCase> decode_cases(bool quick);

}  // namespace kvbuf::mamba2_check
