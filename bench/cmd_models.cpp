// `kvbuf models`: the catalog, with each model's per-request linear-attention memory.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "bench/cmd_common.h"
#include "sim/gpus.h"

namespace kvbuf::cli {

Command add_models_command(CLI::App& app) {
  Command c;
  c.app = app.add_subcommand("models", "list the model catalog");
  auto device_name = std::make_shared<std::string>();
  c.app->add_option("--gpu-key", *device_name,
                    "print instead the name results files carry for a GPU as the driver names it (\"NVIDIA H200\" -> h200)");
  c.run = [device_name] {
    if (!device_name->empty()) {
      fmt::print("{}\n", gpu_file_key(*device_name));
      return 0;
    }
    const Precision p;
    fmt::print("{:<28} {:<7} {:>13} {:>5} {:>7} {:>7} {:>5} {:>5} {:>13} {:>8} {:>14} {:>12} {:>12}\n",
               "model", "kind", "linear/total", "attn", "H|G", "HV|NH", "K|N", "V|P",
               "attn q/kv/dim", "params", "state/request", "entry/layer", "engine state");
    for (const ModelSpec& m : model_catalog()) {
      const LayerShape& s = m.layer;
      fmt::print("{:<28} {:<7} {:>13} {:>5} {:>7} {:>7} {:>5} {:>5} {:>13} {:>7}B {:>14} {:>12} {:>12}\n",
                 m.name, layer_kind_name(m.kind),
                 fmt::format("{}/{}", m.linear_layers, m.total_layers), m.full_attn_layers(),
                 s.key_heads, s.value_heads, s.head_k, s.head_v,
                 fmt::format("{}/{}/{}", m.attn_q_heads, m.attn_kv_heads, m.attn_head_dim),
                 m.params_billion,
                 format_bytes(m.linear_layers * (state_bytes(s, p) + conv_state_bytes(s, p))),
                 format_bytes(buffer_entry_bytes(s, p, BufferVariant::CachedU)), state_type_name(m.engine_state));
    }
    fmt::print(
        "state/request: fp32 states + bf16 conv windows (width {}) of all linear layers, tp 1; "
        "entry/layer: one bf16 cached-u buffer entry; engine state: the state dtype serving engines keep for the "
        "model by default.\n",
        LayerShape{}.conv_width);
    return 0;
  };
  return c;
}

}  // namespace kvbuf::cli
