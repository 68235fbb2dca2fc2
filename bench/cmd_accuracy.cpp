// `kvbuf accuracy`: output and state error of the decode kernels with fp32, bf16 and fp16 states over
// one long generation, against the float64 reference (bench/accuracy/accuracy.h says what is
// measured and how the inputs are drawn; bench/accuracy/accuracy_run.cu runs it). The options are
// checked in every build; --dry-run lists the variants and rows without a GPU.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/accuracy/accuracy.h"
#include "bench/cmd_common.h"
#ifdef KVBUF_WITH_CUDA
#include "bench/gpu_commands.h"
#endif

namespace kvbuf::cli {
namespace {

struct AccuracyCli {
  accuracy::Options o;
  std::vector<std::string> states{"fp32", "bf16", "fp16"}, entries{"bf16"};
  long long seed = 1;
  bool dry_run = false;
};

int run_accuracy(AccuracyCli& c) {
  accuracy::Options& o = c.o;
  o.states.clear(), o.entries.clear();
  for (const std::string& s : c.states) o.states.push_back(parse_state_type_option(s));
  for (const std::string& e : c.entries) o.entries.push_back(e == "fp32" ? EntryType::FP32 : EntryType::BF16);
  o.seed = uint64_t(c.seed);
  try {
    accuracy::validate(o);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (!o.out.empty()) {
    const std::filesystem::path parent = std::filesystem::path(o.out).parent_path();
    if (!parent.empty() && !std::filesystem::is_directory(parent))
      throw UsageError("--out " + o.out + ": cannot write (no folder " + parent.string() + ")");
  }
  if (c.dry_run) {
    const std::vector<int> samples = accuracy::sample_points(o.tokens, o.every);
    for (const std::string& name : o.models) {
      const ModelSpec& m = find_model(name);
      const LayerShape& s = m.layer;
      fmt::print("{}: {} x {} heads of {} x {}; {}\n", m.name, s.key_heads, s.value_heads, s.head_k, s.head_v,
                 accuracy::inputs_description(m.kind));
      for (const accuracy::Variant& v : accuracy::make_variants(m.kind, o.states, o.chunks, o.entries))
        fmt::print("  {}\n", v.label());
    }
    fmt::print("{} rows: {} sampled tokens ({} tokens, every {}) per variant; out {}\n", accuracy::planned_rows(o),
               samples.size(), o.tokens, o.every, o.out.empty() ? "results/accuracy_<gpu>.csv" : o.out);
    if (const std::string note = accuracy::sampling_note(o); !note.empty()) fmt::print("{}\n", note);
    return 0;
  }
#ifdef KVBUF_WITH_CUDA
  return run_accuracy_on_gpu(o, source_commit());
#else
  throw UsageError("kvbuf accuracy requires a CUDA build (--dry-run lists the variants without one)");
#endif
}

}  // namespace

Command add_accuracy_command(CLI::App& app) {
  auto c = std::make_shared<AccuracyCli>();
  accuracy::Options& o = c->o;
  Command cmd;
  cmd.app = app.add_subcommand(
      "accuracy",
      "GPU: output and state error of fp32 / bf16 / fp16 states over one long generation, classic recurrent and "
      "KVBuffer decode against the float64 reference, CSV row by row");
  CLI::App* a = cmd.app;
  std::vector<std::string> model_names;
  for (const ModelSpec& m : model_catalog()) model_names.push_back(m.name);
  a->add_option("--model", o.models, "catalog models, each run with its family's kernels (one layer, tp 1)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember(model_names));
  a->add_option("--tokens", o.tokens, "tokens of the one request, decoded one by one")
      ->capture_default_str()
      ->check(positive_integer());
  a->add_option("--chunk", o.chunks, "KVBuffer capacities C")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  a->add_option("--state-dtype", c->states, "state element types, each run by recurrent and KVBuffer decode")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  a->add_option("--entry-dtype", c->entries,
                "KVBuffer entry types (cached-u); fp32 applies to GDN only (Mamba-2 entries hold bf16 inputs exactly)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp32"}));
  a->add_option("--every", o.every,
                "a row every this many tokens (and at the last); a KVBuffer state is compared where the token "
                "count is a multiple of its C")
      ->capture_default_str()
      ->check(positive_integer());
  a->add_option("--seed", c->seed, "seed of the inputs")->capture_default_str()->check(non_negative_integer());
  a->add_option("--threads", o.threads, "CPU threads of the float64 reference (0 = all)")
      ->capture_default_str()
      ->check(non_negative_integer());
  a->add_option("--out", o.out,
                "CSV to write (replaced); default results/accuracy_<gpu>.csv, <gpu> the device name's last word in "
                "lower case");
  a->add_flag("--dry-run", c->dry_run, "list the models, variants and rows; no GPU");
  cmd.run = [c] { return run_accuracy(*c); };
  return cmd;
}

}  // namespace kvbuf::cli
