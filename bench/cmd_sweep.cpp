// `kvbuf sweep`: the grid of bench/sweep/sweep_grid.h from the command line, a TOML file (--config) or a
// preset, checked and expanded here (every build: --dry-run lists the points without a GPU); the
// measurement runs in bench/sweep/sweep_run.cu (CUDA builds). The resolved grid is saved next to each
// CSV as <csv>.grid.toml, which --config reads back to repeat (or resume) the run.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bench/cmd_common.h"
#include "bench/gpu_commands.h"
#include "bench/sweep/sweep_grid.h"

namespace kvbuf::cli {
namespace {

struct SweepOptions {
  SweepAxes axes;
  SweepSettings settings;
  std::string preset, shard, config;
  bool dry_run = false;
};

std::string kernels_help() {
  std::string h = "kernels to time, comma-separated (default: each model family's " +
                  fmt::format("{}; {}", fmt::join(default_sweep_kernels(LayerKind::GatedDeltaNet), ","),
                              fmt::join(default_sweep_kernels(LayerKind::Mamba2), ",")) +
                  "); each runs on the models of its family:";
  for (const SweepKernel& k : sweep_kernels()) h += "\n  " + k.name + ": " + k.help;
  return h;
}

// The options of a TOML file (CLI11's reader) that the command line did not give. (CLI11 2.1 reads
// set_config files of the main app only, so the subcommand reads its own.)
void read_config(CLI::App* app, const std::string& path) {
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    throw UsageError("--config " + path + ": " + e.what());
  }
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section marks
    CLI::Option* opt = app->get_option_no_throw("--" + item.name);
    if (!opt || !opt->get_configurable())
      throw UsageError("--config " + path + ": unknown option '" + item.fullname() + "'");
    const bool empty = item.inputs.empty() || (item.inputs.size() == 1 && item.inputs[0].empty());
    if (opt->count() > 0 || empty) continue;  // the command line wins; an empty value is the default
    opt->add_result(item.inputs);
    try {
      opt->run_callback();
    } catch (const CLI::Error& e) {
      throw UsageError("--config " + path + ": " + e.what());
    }
  }
}

template <class T>
std::vector<std::string> as_strings(const std::vector<T>& v) {
  std::vector<std::string> r;
  for (const T& x : v) r.push_back(fmt::format("{}", x));
  return r;
}

// Axes not given (on the command line or in --config) take the preset's values; then every axis
// holds its values as results, so that config_to_str writes them as TOML arrays (CLI11 would write
// a list default as one quoted string, which does not read back).
void resolve_axes(CLI::App* app, SweepOptions& o) {
  SweepAxes p = paper_axes();
  const bool preset = !o.preset.empty();
  if (preset && app->get_option("--model")->count() > 0) {
    // The preset's kernels of the families of the models given.
    std::vector<std::string> kernels;
    for (const std::string& name : p.kernels)
      for (const std::string& model : o.axes.models)
        if (find_sweep_kernel(name)->kind == find_model(model).layer.kind) {
          kernels.push_back(name);
          break;
        }
    p.kernels = kernels;
  }
  auto axis = [&](const char* option, auto& field, const auto& preset_value) {
    CLI::Option* opt = app->get_option(option);
    if (opt->count() > 0) return;
    if (preset) field = preset_value;
    if (!field.empty()) opt->add_result(as_strings(field));
  };
  axis("--model", o.axes.models, p.models);
  axis("--kernels", o.axes.kernels, p.kernels);
  axis("--batch", o.axes.batches, p.batches);
  axis("--chunk", o.axes.chunks, p.chunks);
  axis("--context", o.axes.contexts, p.contexts);
  axis("--drafts", o.axes.drafts, p.drafts);
  axis("--acceptance", o.axes.acceptances, p.acceptances);
  axis("--tp", o.axes.tps, p.tps);
  axis("--state-dtype", o.axes.state_dtypes, p.state_dtypes);
  axis("--entry-dtype", o.axes.entry_dtypes, p.entry_dtypes);
  CLI::Option* budget = app->get_option("--budget-s");
  if (preset && budget->count() == 0) {
    o.settings.budget_s = kPaperBudgetS;
    budget->default_str(fmt::format("{}", kPaperBudgetS));
  }
}

// The resolved options as TOML (CLI11's config_to_str).
std::string grid_toml(const CLI::App* app) { return app->config_to_str(true, false); }

void save_grid(const CLI::App* app, const std::string& csv) {
  const std::string path = csv + ".grid.toml";
  std::ofstream out(path);
  if (!out) throw UsageError("cannot write " + path);
  out << "# kvbuf sweep --config " << path << " repeats this grid (and resumes it: finished rows are kept)\n"
      << grid_toml(app);
}

int run_sweep(CLI::App* app, SweepOptions& o) {
  if (!o.config.empty()) read_config(app, o.config);
  resolve_axes(app, o);
  std::vector<SweepPoint> points = expand_grid(o.axes);
  std::set<const SweepKernel*> kernels;
  for (const SweepPoint& p : points) kernels.insert(p.kernel);
  for (const SweepKernel* k : kernels) {
    if (k->kind == LayerKind::GatedDeltaNet && o.settings.rows_per_block == 8 &&
        (k->family != SweepFamily::Decode || k->buffered))
      throw UsageError("--rows-per-block 8 (one warp per block) is for the recurrent kernels only, not " + k->name);
    if (k->kind == LayerKind::Mamba2 && o.settings.rows_per_block == 128)
      throw UsageError("--rows-per-block 128: the Mamba-2 kernels take 8, 16, 32 or 64 rows, not " + k->name);
  }
  const size_t grid_size = points.size();
  if (!o.shard.empty()) {
    const auto [index, count] = parse_shard(o.shard);
    points = shard_points(points, index, count);
  }
  if (o.dry_run) {
    size_t decode = 0, noted = 0;
    for (const SweepPoint& p : points) {
      fmt::print("{}\n", p.label());
      decode += p.decode();
      noted += !p.note.empty();
    }
    fmt::print("{} points ({} decode, {} verify; {} with a note, written as rows without a measurement){}; about {:.0f} s "
               "of GPU at --budget-s {}{}\n",
               points.size(), decode, points.size() - decode, noted,
               o.shard.empty() ? "" : fmt::format(" of {} in the grid, shard {}", grid_size, o.shard),
               estimate_seconds(points, o.settings.budget_s, o.settings.rest_s), o.settings.budget_s,
               o.settings.rest_s > 0 ? fmt::format(" and --rest-s {}", o.settings.rest_s) : "");
    fmt::print("# the resolved grid (kvbuf sweep --config FILE reads it; a run saves it next to each CSV):\n{}",
               grid_toml(app));
    return 0;
  }
#ifdef KVBUF_WITH_CUDA
  bool any_decode = false, any_verify = false;
  for (const SweepPoint& p : points) (p.decode() ? any_decode : any_verify) = true;
  o.settings.commit = source_commit();
  return run_sweep_on_gpu(points, o.settings, [&] {
    if (any_decode) save_grid(app, o.settings.decode_csv);
    if (any_verify) save_grid(app, o.settings.verify_csv);
  });
#else
  throw UsageError("kvbuf sweep requires a CUDA build (--dry-run lists the points without one)");
#endif
}

}  // namespace

Command add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  SweepAxes& x = o->axes;
  SweepSettings& s = o->settings;
  Command c;
  c.app = app.add_subcommand("sweep", "GPU timing sweep over a grid of named axes, CSV row by row (resumable)");
  CLI::App* cmd = c.app;
  cmd->add_option("--config", o->config,
                  "TOML file of options (a saved <csv>.grid.toml repeats that run); the command line overrides it")
      ->check(CLI::ExistingFile)
      ->configurable(false);
  cmd->add_option("--preset", o->preset,
                  "paper: the main job's grid (both families, decode and verify, short contexts, fp32 and each "
                  "model's engine-default state dtype); options given override its axes")
      ->check(CLI::IsMember({"paper"}));
  std::vector<std::string> model_names;
  for (const ModelSpec& m : model_catalog()) model_names.push_back(m.name);
  cmd->add_option("--model", x.models, "catalog models (kvbuf models)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember(model_names));
  std::vector<std::string> names;
  for (const SweepKernel& k : sweep_kernels()) names.push_back(k.name);
  cmd->add_option("--kernels", x.kernels, kernels_help())->delimiter(',')->check(CLI::IsMember(names));
  cmd->add_option("--batch", x.batches, "batch sizes (requests per step)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(positive_integer());
  cmd->add_option("--chunk", x.chunks, "buffer capacities C of the buffered kernels")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--context", x.contexts,
                  "context lengths (tokens per request before the step); 0 = steady state (staggered fills). A "
                  "buffered kernel runs a context <= C - 2 in direct mode")
      ->delimiter(',')
      ->capture_default_str()
      ->check(non_negative_integer());
  cmd->add_option("--drafts", x.drafts, "verify: tokens per verify step T")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, kSweepMaxDrafts));
  cmd->add_option("--acceptance", x.acceptances, "verify: acceptance rates")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--tp", x.tps, "tensor-parallel degrees (divide the heads; a degree that does not is a row saying so)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(positive_integer());
  cmd->add_option("--state-dtype", x.state_dtypes,
                  "state element types: fp32, bf16, fp16, or engine (each model's engine default, kvbuf models); every "
                  "kernel runs each, a model's engine default once where it is also listed")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", kEngineStateDtype}));
  cmd->add_option("--entry-dtype", x.entry_dtypes,
                  "buffer entry types; each buffered kernel runs as its table twin of that type (default: its own)")
      ->delimiter(',')
      ->check(CLI::IsMember({"bf16", "fp32"}));
  cmd->add_option("--out", s.decode_csv, "decode CSV path (appended to: finished points are skipped)")
      ->capture_default_str();
  cmd->add_option("--verify-out", s.verify_csv, "verify CSV path (appended to, likewise)")->capture_default_str();
  cmd->add_option("--layer-pools", x.layer_pools, "layer pools per step (0 = the model's linear layers)")
      ->capture_default_str()
      ->check(non_negative_integer());
  cmd->add_option("--rows-per-block", s.rows_per_block,
                  "state rows per thread block (0 = auto; 8 = one warp per block, recurrent only)")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 8, 16, 32, 64, 128}));
  cmd->add_option("--budget-s", s.budget_s, "sampling time per point, seconds")
      ->capture_default_str()
      ->check(positive_number());
  cmd->add_option("--rest-s", s.rest_s,
                  "idle seconds before each timed point, so the board cools between points (rows timed with the SM "
                  "clock held down by the power cap or a thermal slowdown say so in their note)")
      ->capture_default_str()
      ->check(non_negative_number());
  cmd->add_flag("--redo-clock-limited", s.redo_clock_limited,
               "resuming: measure again the points whose rows were timed with the SM clock held down (the new row "
               "is appended; readers take each point's fastest)");
  cmd->add_option("--max-point-s", s.max_point_s, "skip points whose minimum sampling takes longer, seconds")
      ->capture_default_str()
      ->check(positive_number());
  cmd->add_option("--seed", s.seed, "seed of the device-side random fills")
      ->capture_default_str()
      ->check(non_negative_integer());
  cmd->add_option("--shard", o->shard,
                  "i/n: run part i (0-based) of n of the grid (every n-th point); the parts' CSVs concatenate into "
                  "one (keep the first header)");
  cmd->add_flag("--dry-run", o->dry_run,
                "print the resolved points, their count, the GPU time estimate and the grid as TOML; no GPU")
      ->configurable(false);
  c.run = [o, cmd] { return run_sweep(cmd, *o); };
  return c;
}

}  // namespace kvbuf::cli
