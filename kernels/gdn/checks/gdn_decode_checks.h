// The GDN decode kernel checks (defined in gdn_decode_checks.cu, which also says what a case checks
// and where each tolerance comes from), shared by the gtest binary kernels/gdn/tests/test_gdn_decode.cu
// and `kvbuf check` (bench/gpu_checks.cu).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/gdn/gdn_decode.h"
#include "reference/random_inputs.h"

namespace kvbuf::decode_check {

enum class Kernel { RecurrentInPlace, RecurrentOutOfPlace, KVBuffer, Direct };

struct DecodeCase {
  std::string name;
  Kernel kernel = Kernel::KVBuffer;
  int K = 128;              // = V
  int H = 2, HV = 4;        // GQA 2
  int batch = 3;            // requests
  int pad_rows = 1;         // extra rows with slot -1 every step
  int capacity = 4;
  BufferVariant variant = BufferVariant::CachedU;
  EntryType entry = EntryType::BF16;
  int cycles = 3;           // full flush cycles every request runs
  int recurrent_steps = 6;
  bool gates_in_kernel = false;
  ref::GateRange gates = ref::GateRange::typical();
  int direct_every = 0;     // request r starts in direct mode when direct_every && r % direct_every == 0
  int rows_per_block = 0;
  bool row_metadata = false;  // fill/has_state as per-row step inputs instead of pool arrays
  bool every_row_has_state = false;  // the scheduler's promise (only for cases without direct rows)
  // Auto: the dispatch's choice (with row metadata: split from batch 8, for gdn_decode_direct
  // from C 4, for gdn_decode_kvbuffer at C 64); Split / Single force a path. Every KVBuffer case
  // passes the split path's scratch.
  DecodePath path = DecodePath::Auto;
  int split_row_groups = 0;  // gdn_decode_direct's split state kernel: row groups (0 = one wave)
  // The state pools' element type (every kernel: recurrent pools, S0 of the buffered kernels); the
  // float64 reference rounds its state to it where the kernel writes one.
  StateType state = StateType::FP32;
  // The kernel runs with pools_ready_at_launch (gdn_decode.h) right after a kernel that writes the
  // step's token inputs only after it has let this one start (kernels/common/checks/late_copy.h):
  // an input read before the kernel's wait reads poison.
  bool late_inputs = false;
  // The control of late_inputs, which must fail: the kernel before writes the pools the kernel reads
  // (state and buffer) late too, and the kernel reads them before its wait as the flag allows.
  bool late_pools = false;
};

// The case as `field=value` (the fields that differ from DecodeCase's defaults, plus the kernel,
// K, batch and, for buffered kernels, the buffer; the state type when not fp32), for failure messages.
std::string describe(const DecodeCase& c);
// gtest's printer for the case (ADL), instead of its bytes.
void PrintTo(const DecodeCase& c, std::ostream* os);

struct CaseResult {
  bool passed = true;
  double max_out_err = 0, max_state_err = 0, tol_out = 0, tol_state = 0;
  long outputs_checked = 0, states_checked = 0;
  std::string message;
  // "PASS|FAIL name: errors, tolerances, counts -- first failure".
  std::string line(const std::string& name) const;
};

// Runs the case on inputs drawn from `seed`; throws on a CUDA error or a dispatch refusal.
CaseResult run_decode_case(const DecodeCase& cs, uint64_t seed);

// The cases `kvbuf check` and the gtest binary run. `quick` keeps a representative subset.
std::vector<DecodeCase> decode_cases(bool quick);

}  // namespace kvbuf::decode_check
