// `kvbuf sweep` (CUDA builds): GPU timing of the decode and verify kernels named by --kernels (the
// table of bench/sweep_kernels.h), CSV row by row (decode rows to --out, verify rows to
// --verify-out), a summary table per family at the end. Method in bench/gpu_timing.h.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cmd_common.h"
#include "bench/sweep.h"
#include "kernels/gdn_verify.h"

namespace kvbuf::cli {
namespace {

struct SweepOptions {
  ModelOptions model;
  SweepArgs args;
  std::vector<std::string> kernels;  // empty: the model family's default rows below
};

const std::vector<std::string>& default_kernels(LayerKind kind) {
  static const std::vector<std::string> gdn{"recurrent", "recurrent-oop", "kvbuffer", "kvbuffer-raw", "direct"};
  static const std::vector<std::string> mamba2{"mamba2-recurrent", "mamba2-kvbuffer", "mamba2-direct"};
  return kind == LayerKind::Mamba2 ? mamba2 : gdn;
}

std::string joined(const std::vector<std::string>& names) {
  std::string r;
  for (const std::string& n : names) r += (r.empty() ? "" : ",") + n;
  return r;
}

std::string kernels_help() {
  std::string h = "kernels to time, comma-separated:";
  for (const SweepKernel& k : sweep_kernels()) h += "\n  " + k.name + ": " + k.help;
  return h;
}

int run_sweep(SweepOptions& o) {
  if (o.model.model.empty() && o.model.kind.empty()) o.model.model = "qwen3-next-80b-a3b";
  const std::vector<ModelSpec> models = o.model.selected_after_tp();
  if (models.size() != 1) throw UsageError("kvbuf sweep: give exactly one model");
  SweepArgs& a = o.args;
  a.model = models[0];
  a.kernels.clear();
  bool any_decode = false, any_verify = false;
  const LayerShape& s = a.model.layer;
  for (const std::string& name : o.kernels.empty() ? default_kernels(s.kind) : o.kernels) {
    const SweepKernel* k = find_sweep_kernel(name);
    a.kernels.push_back(k);
    (k->family == SweepFamily::Decode ? any_decode : any_verify) = true;
    if (k->kind != s.kind)
      throw UsageError("kvbuf sweep: kernel " + name + " runs " +
                       (k->kind == LayerKind::Mamba2 ? "Mamba-2" : "Gated DeltaNet") + " layers; " + a.model.name +
                       " is " + (s.kind == LayerKind::Mamba2 ? "Mamba-2" : "Gated DeltaNet"));
    if (k->kind == LayerKind::GatedDeltaNet && a.rows_per_block == 8 && (k->family != SweepFamily::Decode || k->buffered))
      throw UsageError("--rows-per-block 8 (one warp per block) is for the recurrent kernels only, not " + name);
    if (k->kind == LayerKind::Mamba2 && a.rows_per_block == 128)
      throw UsageError("--rows-per-block 128: the Mamba-2 kernels take 8, 16, 32 or 64 rows, not " + name);
  }
  if (s.kind == LayerKind::GatedDeltaNet && !(s.head_k == s.head_v && (s.head_k == 64 || s.head_k == 128)))
    throw UsageError(fmt::format("kvbuf sweep: unsupported head dims K={} V={} (the kernels support 64x64 and 128x128)",
                                 s.head_k, s.head_v));
  if (!gpu_present()) throw std::runtime_error("kvbuf sweep: no CUDA device answers");
  a.gpu = gpu_name();
  a.commit = source_commit();
  a.copy_gbps = measure_copy_gbps();
  fmt::print("measured copy bandwidth (read + write, cudaMemcpyAsync D2D 2 GiB): {:.0f} GB/s\n", a.copy_gbps);
  std::vector<DecodePoint> decode_points;
  int failed = 0;
  if (any_decode) failed += run_decode_sweep(a, decode_points);
  if (any_verify) failed += run_verify_sweep(a, decode_points);
  if (failed) throw std::runtime_error(std::to_string(failed) + " sweep points failed");
  return 0;
}

}  // namespace

Command add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  SweepArgs& a = o->args;
  Command c;
  c.app = app.add_subcommand("sweep", "GPU timing sweep of the decode and verify kernels, CSV row by row");
  o->model.add_to(c.app, false, false);
  c.app->add_option("--batch", a.batches, "batch sizes (requests per step)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(positive_integer());
  c.app->add_option("--chunk", a.chunks, "buffer capacities C of the buffered kernels")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  std::vector<std::string> names;
  for (const SweepKernel& k : sweep_kernels()) names.push_back(k.name);
  c.app->add_option("--kernels", o->kernels,
                    kernels_help() + "\n(default: " + joined(default_kernels(LayerKind::GatedDeltaNet)) +
                        " for GDN models, " + joined(default_kernels(LayerKind::Mamba2)) + " for Mamba-2)")
      ->delimiter(',')
      ->check(CLI::IsMember(names));
  c.app->add_option("--out", a.decode_csv, "decode CSV path")->capture_default_str();
  c.app->add_option("--verify-out", a.verify_csv, "verify CSV path")->capture_default_str();
  c.app->add_option("--layer-pools", a.layers, "layer pools per step (0 = the model's linear layers)")
      ->capture_default_str()
      ->check(non_negative_integer());
  c.app->add_option("--rows-per-block", a.rows_per_block,
                    "state rows per thread block (0 = auto; 8 = one warp per block, recurrent only)")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 8, 16, 32, 64, 128}));
  c.app->add_option("--budget-s", a.budget_s, "sampling time per point, seconds")
      ->capture_default_str()
      ->check(positive_number());
  c.app->add_option("--max-point-s", a.max_point_s, "skip points whose minimum sampling takes longer, seconds")
      ->capture_default_str()
      ->check(positive_number());
  c.app->add_option("--seed", a.seed, "seed of the device-side random fills")
      ->capture_default_str()
      ->check(non_negative_integer());
  c.app->add_option("--drafts", a.drafts, "verify: tokens per verify step T")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(1, kGdnVerifyMaxTokens));
  c.app->add_option("--acceptance", a.acceptance, "verify: acceptance rate")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  c.run = [o] { return run_sweep(*o); };
  return c;
}

}  // namespace kvbuf::cli
