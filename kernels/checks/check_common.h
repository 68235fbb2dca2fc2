// Pieces shared by the GPU kernel check families (gdn_decode_checks, gdn_verify_checks).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "reference/random_inputs.h"

namespace kvbuf::checks {

// The seed of one case's inputs, from the run's base seed (`kvbuf check --seed`, KVBUF_TEST_SEED
// for the gtest binaries) and the case's name: a case draws the same inputs whichever other cases
// run, in whatever order, on any compiler (FNV-1a of the name, not std::hash).
uint64_t case_seed(uint64_t base_seed, std::string_view case_name);

// "typical", "mild" or "extreme" for the presets of ref::GateRange, else every bound.
std::string gate_range_name(const ref::GateRange& gates);

}  // namespace kvbuf::checks
