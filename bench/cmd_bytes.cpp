// `kvbuf bytes`: the bytes model per mode and tensor, per linear layer per decode step, over batch
// and buffer size; stdout tables and an optional CSV (one row per batch, chunk, mode and tensor).
#include <fmt/format.h>

#include <memory>
#include <optional>

#include "bench/cmd_common.h"
#include "bench/csv.h"

namespace kvbuf::cli {
namespace {

struct BytesOptions {
  ModelOptions model;
  std::vector<int> batches{1};
  std::vector<int> chunks{16};
  int drafts = 0;  // 0: no verify rows
  int accept = 0;  // 0: accept all T
  std::string variant = "cached-u";
  std::string state_dtype = "fp32", entry_dtype = "bf16", io_dtype = "bf16";
  std::string csv;
  bool summary = false;  // omit the per-tensor tables
};

// One mode's bytes at one chunk (chunk 0 = does not depend on C), with the tokens it accepts.
struct ModeRow {
  StepBytes bytes;
  int chunk = 0;
  int accepted_tokens = 1;
};

std::vector<ModeRow> modes_at(const LayerShape& s, const Precision& p, BufferVariant v, int C,
                              int T, int m) {
  std::vector<ModeRow> rows;
  rows.push_back({bytes_kvbuffer_cycle(s, p, v, C), C, 1});
  rows.push_back({bytes_direct_mean(s, p, C), C, 1});
  if (T > 0) rows.push_back({bytes_verify_kvbuffer_cycle(s, p, v, C, T, m, modelled_verify_window(s.kind)), C, m});
  return rows;
}

int run_bytes(const BytesOptions& o) {
  const std::vector<ModelSpec> models = o.model.selected_after_tp();
  const ModelSpec& model = models.front();
  require_positive("--batch", o.batches);
  require_positive("--chunk", o.chunks);
  if (o.drafts < 0) throw UsageError(fmt::format("--drafts must be positive, got {}", o.drafts));
  const int accept = o.accept ? o.accept : o.drafts;
  if (o.accept && !o.drafts) throw UsageError("--accept needs --drafts");
  if (o.drafts && (accept < 1 || accept > o.drafts))
    throw UsageError(fmt::format("--accept must be in 1..T (T = {}), got {}", o.drafts, accept));
  for (int C : o.chunks)
    if (o.drafts > C)
      throw UsageError(fmt::format(
          "--drafts T = {} exceeds buffer capacity --chunk C = {} (need T <= C)", o.drafts, C));
  const Precision p{parse_state_type_option(o.state_dtype),
                    parse_dtype_option("--entry-dtype", o.entry_dtype),
                    parse_dtype_option("--io-dtype", o.io_dtype)};
  const BufferVariant v = parse_variant_option(o.variant);
  if (model.kind == LayerKind::Mamba2 && o.variant != "cached-u")
    throw UsageError("--variant applies to GDN only (a Mamba-2 entry is always x, B, dt, G)");
  const std::string variant = model.kind == LayerKind::Mamba2 ? "" : o.variant;

  std::unique_ptr<CsvWriter> csv;
  if (!o.csv.empty()) {
    try {
      csv = std::make_unique<CsvWriter>(
          o.csv, std::vector<std::string>{"model", "tp", "kind", "variant", "state_dtype",
                                          "entry_dtype", "io_dtype", "mode", "batch", "chunk",
                                          "drafts", "accepted", "tensor", "dtype", "read_bytes",
                                          "write_bytes", "total_bytes", "commit"});
    } catch (const std::runtime_error& e) {
      throw UsageError(fmt::format("--csv: {}", e.what()));
    }
  }

  const LayerShape& s = model.layer;
  fmt::print(
      "bytes per linear layer per decode step, {} (tp {}, {} linear layers): {} {}={} {}={} {}={} "
      "{}={}\n",
      model.name, model.tp, model.linear_layers, layer_kind_name(model.kind),
      model.kind == LayerKind::Mamba2 ? "G" : "H", s.key_heads,
      model.kind == LayerKind::Mamba2 ? "NH" : "HV", s.value_heads,
      model.kind == LayerKind::Mamba2 ? "N" : "K", s.head_k,
      model.kind == LayerKind::Mamba2 ? "P" : "V", s.head_v);
  fmt::print(
      "state {}, buffer entries {}, io {}{}; state {}, one buffer entry {}; per request (x batch "
      "for a batch)\n",
      o.state_dtype, o.entry_dtype, o.io_dtype, variant.empty() ? "" : ", variant " + variant,
      format_bytes(state_bytes(s, p)), format_bytes(buffer_entry_bytes(s, p, v)));
  fmt::print(
      "kvbuffer: averaged over a flush cycle of C steps; direct: averaged over fills 0..C-1 (no "
      "state read; the overflow fold at C-1 writes it once); "
      "verify: T tokens per step, m accepted{}\n",
      o.drafts ? fmt::format(" (T = {}, m = {}; verify-kvbuffer averaged over its fold cycle)",
                             o.drafts, accept)
               : " (give --drafts T)");

  // Per-request tensor tables: the recurrent and classic-verify rows once, the buffered ones per C.
  std::vector<ModeRow> fixed;
  fixed.push_back({bytes_recurrent(s, p), 0, 1});
  if (o.drafts) {
    fixed.push_back({bytes_verify_classic(s, p, o.drafts, true), 0, accept});
    fixed.push_back({bytes_verify_classic(s, p, o.drafts, false), 0, accept});
  }
  auto print_tensors = [&](const ModeRow& r) {
    fmt::print("\n{}{}\n", r.bytes.mode, r.chunk ? fmt::format("  C = {}", r.chunk) : "");
    fmt::print("  {:<22} {:<6} {:>16} {:>16}\n", "tensor", "dtype", "read_bytes", "write_bytes");
    for (const auto& t : r.bytes.tensors)
      fmt::print("  {:<22} {:<6} {:>16.1f} {:>16.1f}\n", t.tensor, t.dtype, t.read_bytes,
                 t.write_bytes);
    fmt::print("  {:<22} {:<6} {:>16.1f} {:>16.1f}   total {}\n", "total", "", r.bytes.read_bytes(),
               r.bytes.write_bytes(), format_bytes(r.bytes.total_bytes()));
  };
  if (!o.summary) {
    for (const ModeRow& r : fixed) print_tensors(r);
    for (int C : o.chunks)
      for (const ModeRow& r : modes_at(s, p, v, C, o.drafts, accept)) print_tensors(r);
  }

  // Summary over batch x chunk, and the CSV rows.
  const double recurrent_per_token = fixed.front().bytes.total_bytes();
  fmt::print("\n{:>6} {:>6} {:<24} {:>14} {:>14} {:>12}\n", "batch", "C", "mode", "MB/layer/step",
             "MB/token", "vs recurrent");
  auto emit = [&](int batch, const ModeRow& r) {
    StepBytes b = r.bytes;
    b.scale(batch);
    const double per_token = b.total_bytes() / r.accepted_tokens;
    fmt::print("{:>6} {:>6} {:<24} {:>14.3f} {:>14.3f} {:>11.3f}x\n", batch,
               r.chunk ? std::to_string(r.chunk) : "-", b.mode, b.total_bytes() / 1e6,
               per_token / 1e6, recurrent_per_token * batch / per_token);
    if (!csv) return;
    const bool verify = b.mode.rfind("verify", 0) == 0;
    for (const auto& t : b.tensors)
      csv->row({model.name, std::to_string(model.tp), layer_kind_name(model.kind), variant,
                o.state_dtype, o.entry_dtype, o.io_dtype, b.mode, std::to_string(batch),
                r.chunk ? std::to_string(r.chunk) : "", verify ? std::to_string(o.drafts) : "",
                verify ? std::to_string(accept) : "", t.tensor, t.dtype,
                fmt::format("{:.1f}", t.read_bytes), fmt::format("{:.1f}", t.write_bytes),
                fmt::format("{:.1f}", t.read_bytes + t.write_bytes), source_commit()});
  };
  for (int batch : o.batches) {
    for (const ModeRow& r : fixed) emit(batch, r);
    for (int C : o.chunks)
      for (const ModeRow& r : modes_at(s, p, v, C, o.drafts, accept)) emit(batch, r);
  }
  fmt::print(
      "(vs recurrent: recurrent bytes per token / this mode's bytes per accepted token; MB = 1e6 "
      "bytes)\n");
  if (csv) fmt::print("wrote {}\n", o.csv);
  return 0;
}

}  // namespace

Command add_bytes_command(CLI::App& app) {
  auto o = std::make_shared<BytesOptions>();
  Command c;
  c.app =
      app.add_subcommand("bytes", "bytes model: memory traffic per linear layer per decode step");
  o->model.add_to(c.app, false, false);
  c.app->add_option("--batch", o->batches, "batch sizes, comma separated")
      ->delimiter(',')
      ->capture_default_str();
  c.app->add_option("--chunk", o->chunks, "buffer capacities C, comma separated")
      ->delimiter(',')
      ->capture_default_str();
  c.app->add_option("--drafts", o->drafts, "speculative verify of T tokens (adds verify rows)");
  c.app->add_option("--accept", o->accept, "accepted tokens per verify step m (default T)");
  c.app->add_option("--variant", o->variant, "GDN buffer variant: raw | cached-u")
      ->capture_default_str();
  c.app->add_option("--state-dtype", o->state_dtype, "state element type")->capture_default_str();
  c.app->add_option("--entry-dtype", o->entry_dtype, "buffer element type (k, u or v)")
      ->capture_default_str();
  c.app->add_option("--io-dtype", o->io_dtype, "q/k/v and output element type")
      ->capture_default_str();
  c.app->add_option("--csv", o->csv, "also write the rows to this CSV file");
  c.app->add_flag("--summary", o->summary,
                  "print only the totals per batch, C and mode (the CSV keeps every tensor)");
  c.run = [o] { return run_bytes(*o); };
  return c;
}

}  // namespace kvbuf::cli
