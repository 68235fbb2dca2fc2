#include "bench/cmd_common.h"

#include <cmath>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace kvbuf::cli {

void ModelOptions::add_to(CLI::App* cmd, bool allow_all, bool add_attention) {
  cmd->add_option("--model", model,
                  allow_all ? "catalog model name, or 'all' (see `kvbuf models`)"
                            : "catalog model name (see `kvbuf models`)");
  cmd->add_option("--kind", kind, "custom model: gdn | mamba2");
  cmd->add_option("--key-heads", key_heads, "custom model: key heads H (Mamba-2: groups G)");
  cmd->add_option("--value-heads", value_heads, "custom model: value heads HV (Mamba-2: heads NH)");
  cmd->add_option("--head-k", head_k, "custom model: key head dim K (Mamba-2: d_state N)");
  cmd->add_option("--head-v", head_v, "custom model: value head dim V (Mamba-2: head_dim P)");
  cmd->add_option("--layers", layers, "custom model: linear-attention layers");
  cmd->add_option("--tp", tp, "tensor-parallel degree (divides the heads)")->capture_default_str();
  if (add_attention) {
    cmd->add_option("--attn-layers", attn_layers, "custom model: full-attention layers")
        ->capture_default_str();
    cmd->add_option("--attn-kv-heads", attn_kv_heads, "custom model: full-attention KV heads");
    cmd->add_option("--attn-head-dim", attn_head_dim, "custom model: full-attention head dim");
    cmd->add_option("--params-billion", params_billion,
                    "custom model: parameters (weights at 2 bytes each)");
  }
  allow_all_ = allow_all;
}

std::vector<ModelSpec> ModelOptions::selected() const {
  const bool any_custom = !kind.empty() || key_heads || value_heads || head_k || head_v || layers ||
                          attn_layers || attn_kv_heads || attn_head_dim || params_billion;
  if (!model.empty()) {
    if (any_custom)
      throw UsageError(
          "give either --model or the custom dims (--kind, --key-heads, ...), not both");
    if (model == "all") {
      if (!allow_all_) throw UsageError("--model all is not supported by this command");
      return model_catalog();
    }
    try {
      return {find_model(model)};
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  if (kind.empty())
    throw UsageError("give --model NAME or a custom model (--kind gdn|mamba2 with its dims)");
  ModelSpec m;
  m.name = "custom";
  try {
    m.kind = parse_layer_kind(kind);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const char* names[] = {"--key-heads", "--value-heads", "--head-k", "--head-v", "--layers"};
  const int values[] = {key_heads, value_heads, head_k, head_v, layers};
  for (int i = 0; i < 5; ++i)
    if (values[i] <= 0)
      throw UsageError(
          fmt::format("custom model: {} must be a positive integer, got {}", names[i], values[i]));
  m.layer = LayerShape{m.kind, key_heads, value_heads, head_k, head_v, 4};
  m.linear_layers = layers;
  m.attn_layers = attn_layers;
  m.total_layers = layers + attn_layers;
  m.attn_q_heads = attn_kv_heads;  // only the KV heads matter for memory
  m.attn_kv_heads = attn_kv_heads;
  m.attn_head_dim = attn_head_dim;
  m.params_billion = params_billion;
  try {
    validate_model(m);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("custom model: ") + e.what());
  }
  return {m};
}

std::vector<ModelSpec> ModelOptions::selected_after_tp() const {
  std::vector<ModelSpec> out;
  for (const ModelSpec& m : selected()) {
    try {
      out.push_back(apply_tensor_parallel(m, tp));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  return out;
}

namespace {
CLI::Validator number_rule(const char* name, const char* rule, bool integer, bool allow_zero) {
  return CLI::Validator(
      [=](std::string& in) -> std::string {
        double v = 0;
        long long i = 0;
        const bool parsed = integer ? CLI::detail::lexical_cast(in, i) : CLI::detail::lexical_cast(in, v);
        if (integer) v = double(i);
        if (!parsed || !(allow_zero ? v >= 0 : v > 0) || !std::isfinite(v)) return std::string(rule) + ", got " + in;
        return {};
      },
      name);
}
}  // namespace

const CLI::Validator& positive_integer() {
  static const CLI::Validator v = number_rule("POSITIVE", "must be a positive integer", true, false);
  return v;
}
const CLI::Validator& non_negative_integer() {
  static const CLI::Validator v = number_rule("NONNEGATIVE", "must be a non-negative integer", true, true);
  return v;
}
const CLI::Validator& positive_number() {
  static const CLI::Validator v = number_rule("POSITIVE", "must be a positive finite number", false, false);
  return v;
}
const CLI::Validator& non_negative_number() {
  static const CLI::Validator v = number_rule("NONNEGATIVE", "must be a non-negative finite number", false, true);
  return v;
}

void require_positive(const std::string& option, long value) {
  if (value <= 0)
    throw UsageError(fmt::format("{} must be a positive integer, got {}", option, value));
}

void require_positive(const std::string& option, const std::vector<int>& values) {
  if (values.empty()) throw UsageError(option + " needs at least one value");
  for (int v : values) require_positive(option, v);
}

std::string source_commit() {
  if (const char* c = std::getenv("KVBUF_COMMIT"); c && *c) return c;
  // A bundle of scripts/gpu_bundle.sh: BUNDLE/bin/kvbuf beside BUNDLE/COMMIT.
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::ifstream in(exe.parent_path().parent_path() / "COMMIT");
    std::string commit;
    if (in >> commit) return commit;
  }
  return "unknown";
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return fmt::format("{:.2f} {}", bytes, units[u]);
}

}  // namespace kvbuf::cli
