// The kernel axis of `kvbuf sweep`: one table of named rows, from which the --kernels help, its
// validation, the grid (bench/sweep/sweep_grid.h, CPU builds too) and both sweep runners (bench/sweep/sweep_decode.cu, bench/sweep/sweep_verify.cu) take what a
// kernel name means.
#pragma once
#include <string>
#include <vector>

#include "kernels/common/decode_path.h"
#include "sim/layout.h"

namespace kvbuf {

enum class SweepFamily { Decode, Verify };

struct SweepKernel {
  std::string name;  // as on the command line and in the CSV
  SweepFamily family = SweepFamily::Decode;
  std::string help;
  LayerKind kind = LayerKind::GatedDeltaNet;  // the model family it runs (the model must match)
  bool buffered = false;      // has a buffer and a chunk (C) axis: KVBuffer decode, direct, KVBuffer verify
  bool out_of_place = false;  // recurrent: separate input and output state pools
  bool direct = false;        // every request stateless (direct mode)
  BufferVariant variant = BufferVariant::CachedU;
  EntryType entry = EntryType::BF16;
  bool pool_fill = false;  // fill/has_state advanced in the kernel instead of scheduler metadata
  DecodePath path = DecodePath::Auto;  // the dispatch's choice, or one path forced
  bool tree = false;                         // verify: tree drafts instead of a chain
  bool in_place = false;  // classic verify: node states written into the pool, committed by index
};

inline const std::vector<SweepKernel>& sweep_kernels() {
  using F = SweepFamily;
  auto recurrent = [](std::string name, bool out_of_place, std::string help) {
    SweepKernel k{std::move(name), F::Decode, std::move(help)};
    k.out_of_place = out_of_place;
    return k;
  };
  auto buffered = [](std::string name, std::string help, bool direct) {
    SweepKernel k{std::move(name), F::Decode, std::move(help)};
    k.buffered = true, k.direct = direct;
    return k;
  };
  auto with_entry = [](SweepKernel k, BufferVariant v, EntryType e) {
    k.variant = v, k.entry = e;
    return k;
  };
  auto with_path = [](SweepKernel k, DecodePath p) {
    k.path = p;
    return k;
  };
  auto verify = [](std::string name, std::string help, bool kvbuffer, bool tree) {
    SweepKernel k{std::move(name), F::Verify, std::move(help)};
    k.buffered = kvbuffer, k.tree = tree;
    return k;
  };
  auto in_place = [](SweepKernel k) {
    k.in_place = true;
    return k;
  };
  auto with_pool_fill = [](SweepKernel k) {
    k.pool_fill = true;
    return k;
  };
  auto mamba2 = [](SweepKernel k) {
    k.kind = LayerKind::Mamba2;
    return k;
  };
  static const std::vector<SweepKernel> table = {
      recurrent("recurrent", false, "classic recurrent decode, state updated in place"),
      recurrent("recurrent-oop", true, "classic recurrent decode, separate output pool (FLA's placement)"),
      buffered("kvbuffer", "KVBuffer decode, cached-u bf16 entries, scheduler metadata", false),
      with_entry(buffered("kvbuffer-fp32", "KVBuffer decode, cached-u fp32 entries", false), BufferVariant::CachedU,
                 EntryType::FP32),
      with_entry(buffered("kvbuffer-raw", "KVBuffer decode, raw bf16 entries (u recomputed)", false),
                 BufferVariant::Raw, EntryType::BF16),
      buffered("direct", "direct mode: stateless requests read only their entries", true),
      with_pool_fill(buffered("kvbuffer-poolfill", "KVBuffer decode, fill advanced in the kernel", false)),
      with_path(buffered("kvbuffer-single", "KVBuffer decode, single-kernel path forced", false),
                DecodePath::Single),
      with_path(buffered("kvbuffer-split", "KVBuffer decode, split path forced", false), DecodePath::Split),
      with_path(buffered("direct-single", "direct mode, single-kernel path forced", true), DecodePath::Single),
      with_path(buffered("direct-split", "direct mode, split path forced", true), DecodePath::Split),
      verify("verify-classic", "classic speculative verify (a state per draft) + copy commit", false, false),
      in_place(verify("verify-classic-inplace",
                      "classic verify as serving engines run it: T + 1 state slots per request, commit by index",
                      false, false)),
      verify("verify-kvbuffer", "KVBuffer verify from S0 + buffer + commit of the accepted entries", true, false),
      with_path(verify("verify-kvbuffer-single", "KVBuffer verify, single-kernel path forced", true, false),
                DecodePath::Single),
      with_path(verify("verify-kvbuffer-split", "KVBuffer verify, split path forced (coefficient kernel, then state kernel)",
                       true, false),
                DecodePath::Split),
      verify("verify-classic-tree", "classic verify of a draft tree", false, true),
      in_place(verify("verify-classic-inplace-tree", "in-place classic verify of a draft tree", false, true)),
      verify("verify-kvbuffer-tree", "KVBuffer verify of a draft tree", true, true),
      mamba2(recurrent("mamba2-recurrent", false, "Mamba-2 selective state update in place (z, softplus in kernel)")),
      mamba2(buffered("mamba2-kvbuffer", "Mamba-2 KVBuffer decode, scheduler metadata (z, softplus in kernel)", false)),
      mamba2(buffered("mamba2-direct", "Mamba-2 direct mode: stateless requests read only their entries", true)),
      mamba2(with_path(buffered("mamba2-direct-single", "Mamba-2 direct mode, single-kernel path forced", true),
                       DecodePath::Single)),
      mamba2(with_path(buffered("mamba2-direct-split", "Mamba-2 direct mode, split path forced", true),
                       DecodePath::Split)),
      mamba2(with_pool_fill(buffered("mamba2-kvbuffer-poolfill", "Mamba-2 KVBuffer decode, fill advanced in the kernel",
                                     false))),
      mamba2(in_place(verify("mamba2-verify-classic",
                             "Mamba-2 classic verify as serving engines run it: T + 1 state slots per request, commit by "
                             "index (z, softplus in kernel)",
                             false, false))),
      mamba2(verify("mamba2-verify-kvbuffer",
                    "Mamba-2 KVBuffer verify from S0 + buffer + commit of the accepted entries (z, softplus in kernel)",
                    true, false)),
  };
  return table;
}

// nullptr for an unknown name.
inline const SweepKernel* find_sweep_kernel(const std::string& name) {
  for (const SweepKernel& k : sweep_kernels())
    if (k.name == name) return &k;
  return nullptr;
}

}  // namespace kvbuf
