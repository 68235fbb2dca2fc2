// Shared pieces of the kvbuf subcommands: the command record, usage errors (exit 2), and the
// model selection options (--model NAME | custom dims, --tp).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/bytes_model.h"
#include "sim/catalog.h"

namespace kvbuf::cli {

// Bad input from the command line: kvbuf prints "kvbuf: error: <what>" and exits 2.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// A subcommand and what runs when it was given; run() returns the exit status.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_models_command(CLI::App& app);
Command add_bytes_command(CLI::App& app);
Command add_check_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_capacity_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);
Command add_step_command(CLI::App& app);
Command add_calibrate_step_command(CLI::App& app);
Command add_validate_step_command(CLI::App& app);
// Every build; without CUDA only --dry-run runs (bench/cmd_sweep.cpp).
Command add_sweep_command(CLI::App& app);
// Every build; without CUDA only --dry-run runs (bench/cmd_accuracy.cpp).
Command add_accuracy_command(CLI::App& app);
// CUDA builds only (bench/cmd_calibrate.cu); kvbuf_main.cpp registers a stub that exits 2 otherwise.
Command add_calibrate_command(CLI::App& app);

// --model NAME (a catalog name; "all" where allowed) or the custom dims --kind --key-heads
// --value-heads --head-k --head-v --layers; then --tp divides the heads.
struct ModelOptions {
  std::string model;
  std::string kind;
  int key_heads = 0, value_heads = 0, head_k = 0, head_v = 0, layers = 0;
  int tp = 1;
  // Only with add_attention: full-attention layers and weights of a custom model.
  int attn_layers = 0, attn_kv_heads = 0, attn_head_dim = 0;
  double params_billion = 0;

  void add_to(CLI::App* cmd, bool allow_all, bool add_attention);
  // The selected models (the whole catalog for "all") before tensor parallelism.
  std::vector<ModelSpec> selected() const;
  // The same after --tp; every error as UsageError.
  std::vector<ModelSpec> selected_after_tp() const;
  bool custom() const { return model.empty(); }

 private:
  bool allow_all_ = false;
};

// parse(value), its std::invalid_argument turned into a UsageError that names the option.
template <class Parse>
auto parse_option(const std::string& option, const std::string& value, Parse parse) -> decltype(parse(value)) {
  try {
    return parse(value);
  } catch (const std::invalid_argument& e) {
    throw UsageError(option + ": " + e.what());
  }
}
// "fp32" etc. -> bytes; "cached-u" or "raw"; "fp32", "bf16" or "fp16" state.
inline int parse_dtype_option(const std::string& option, const std::string& value) {
  return parse_option(option, value, dtype_bytes);
}
inline BufferVariant parse_variant_option(const std::string& value) { return parse_option("--variant", value, parse_variant); }
inline StateType parse_state_type_option(const std::string& value) {
  return parse_option("--state-dtype", value, parse_state_type);
}

// CLI11 validators whose messages name the rule ("--steps: must be a positive integer, got 0");
// on a list option they check every element.
const CLI::Validator& positive_integer();
const CLI::Validator& non_negative_integer();
const CLI::Validator& positive_number();
const CLI::Validator& non_negative_number();

// Positive integer (or list element) checks, as UsageError naming the option.
void require_positive(const std::string& option, long value);
void require_positive(const std::string& option, const std::vector<int>& values);

// The commit of the binaries, for every row and file written: $KVBUF_COMMIT (scripts/run.sh sets
// it), else the COMMIT file of the bundle the executable runs from (BUNDLE/bin/kvbuf and
// BUNDLE/COMMIT, written by scripts/gpu_bundle.sh), else "unknown".
std::string source_commit();

// Human-readable bytes: "2.00 MiB".
std::string format_bytes(double bytes);

}  // namespace kvbuf::cli
