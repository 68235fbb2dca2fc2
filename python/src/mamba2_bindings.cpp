// Mamba-2 kernels from Python: decode (recurrent, KVBuffer, direct) and speculative verify (classic
// in place, KVBuffer and its commit), on the layouts of sim/layout.h and
// kernels/mamba2/mamba2_decode.h / mamba2_verify.h: x, dt, A, B, C, D, z as mamba-ssm's
// selective_state_update takes them (dt, A, D, dt_bias per head: mamba-ssm's [.., headdim] forms
// are stride-0 views whose [..., 0] slice is this), the state pool [slots, NH, P, N] by slot.
#include <cuda_bf16.h>

#include "kernels/mamba2/mamba2_decode.h"
#include "kernels/mamba2/mamba2_verify.h"
#include "python/src/bindings.h"

namespace kvbuf::py {
namespace {

StateType state_type_of(const Tensor& t) {
  return t.dtype == DType::BF16 ? StateType::BF16 : t.dtype == DType::F16 ? StateType::FP16 : StateType::FP32;
}
const __nv_bfloat16* bf16(const Tensor& t) { return t.ptr<const __nv_bfloat16>(); }
template <class X>
X* opt(const Tensor& t) {
  return t ? t.ptr<X>() : nullptr;
}
std::vector<Param> concat(std::vector<Param> x, const std::vector<Param>& y) {
  x.insert(x.end(), y.begin(), y.end());
  return x;
}

// One decode step's inputs: x [B, NH, P], dt [B, NH], B and C [B, G, N], z [B, NH, P] (optional),
// all bfloat16 (or [B, 1, ...]); A, D, dt_bias float32 [NH]; slot int32 [B].
void step_io(Args& a, Mamba2StepIO& io) {
  const Tensor x = a.tensor("x", kBf16, {B, NH, P}, true, true);
  const Tensor dt = a.tensor("dt", kBf16, {B, NH}, true, true);
  const Tensor A = a.tensor("A", kFloat, {NH});
  const Tensor Bm = a.tensor("B", kBf16, {B, G, N}, true, true);
  const Tensor Cm = a.tensor("C", kBf16, {B, G, N}, true, true);
  const Tensor D = a.tensor("D", kFloat, {NH});
  const Tensor z = a.tensor("z", kBf16, {B, NH, P}, false, true);
  const Tensor dt_bias = a.tensor("dt_bias", kFloat, {NH}, false);
  io.dt_softplus = a.boolean("dt_softplus", true);
  const Tensor slot = a.tensor("slot", kInt32, {B});
  io.batch = int(a.dim(B));
  io.G = int(a.dim(G)), io.NH = int(a.dim(NH)), io.P = int(a.dim(P)), io.N = int(a.dim(N));
  io.slot = slot.ptr<const int32_t>();
  io.x = bf16(x), io.dt = bf16(dt), io.B = bf16(Bm), io.C = bf16(Cm), io.z = opt<const __nv_bfloat16>(z);
  io.A = A.ptr<const float>(), io.D = D.ptr<const float>(), io.dt_bias = opt<const float>(dt_bias);
  io.rows_per_block = int(a.integer("rows_per_block", 0));
}
const std::vector<Param> kStepParams = {{"x", true}, {"dt", true},        {"A", true},           {"B", true},
                                        {"C", true}, {"D", true},         {"z", false},          {"dt_bias", false},
                                        {"dt_softplus", false}, {"slot", true}, {"rows_per_block", false}};

Launch prepare_recurrent(Args& a) {
  Mamba2RecurrentParams p;
  step_io(a, p.io);
  const Tensor state = a.tensor("state", kStateTypes, {S, NH, P, N});
  p.pools_ready_at_launch = a.boolean("pools_ready_at_launch", false);
  const Tensor& out = a.output("out", {B, NH, P}, true);
  a.finish();
  p.io.out = out.ptr<__nv_bfloat16>();
  p.state = state.data;
  p.state_type = state_type_of(state);
  return [p](cudaStream_t s) { mamba2_decode_recurrent(p, s); };
}

template <void (*Run)(const Mamba2KVBufferParams&, cudaStream_t)>
Launch prepare_kvbuffer(Args& a) {
  Mamba2KVBufferParams p;
  step_io(a, p.io);
  const Tensor state = a.tensor("state", kStateTypes, {S, NH, P, N});
  const Tensor buf_k = a.tensor("buf_k", kBf16, {S, C, G, N});
  const Tensor buf_val = a.tensor("buf_val", kBf16, {S, C, NH, P});
  const Tensor buf_gcum = a.tensor("buf_gcum", kFloat, {S, C, NH});
  const Tensor buf_beta = a.tensor("buf_beta", kFloat, {S, C, NH});
  const Tensor fill = a.tensor("fill", kInt32, {S}, false);
  const Tensor has_state = a.tensor("has_state", kInt32, {S}, false);
  const Tensor done_count = a.tensor("done_count", kInt32, {S}, false);
  const Tensor row_fill = a.tensor("row_fill", kInt32, {B}, false);
  const Tensor row_has_state = a.tensor("row_has_state", kInt32, {B}, false);
  const std::string path = a.choice("path", "auto", {"auto", "single", "split"});
  p.path = path == "single" ? DecodePath::Single : path == "split" ? DecodePath::Split : DecodePath::Auto;
  p.every_row_has_state = a.boolean("every_row_has_state", false);
  p.pools_ready_at_launch = a.boolean("pools_ready_at_launch", false);
  const Tensor& out = a.output("out", {B, NH, P}, true);
  a.finish();
  p.io.out = out.ptr<__nv_bfloat16>();
  p.capacity = int(a.dim(C));
  p.state = state.data;
  p.state_type = state_type_of(state);
  p.buf_k = buf_k.ptr<__nv_bfloat16>(), p.buf_val = buf_val.ptr<__nv_bfloat16>();
  p.buf_gcum = buf_gcum.ptr<float>(), p.buf_beta = buf_beta.ptr<float>();
  p.fill = opt<int32_t>(fill), p.has_state = opt<int32_t>(has_state), p.done_count = opt<int32_t>(done_count);
  p.row_fill = opt<const int32_t>(row_fill), p.row_has_state = opt<const int32_t>(row_has_state);
  return [p](cudaStream_t s) { Run(p, s); };
}
const std::vector<Param> kKVBufferPools = {
    {"state", true}, {"buf_k", true},      {"buf_val", true},  {"buf_gcum", true}, {"buf_beta", true},
    {"fill", false}, {"has_state", false}, {"done_count", false}, {"row_fill", false}, {"row_has_state", false},
    {"path", false}, {"every_row_has_state", false}, {"pools_ready_at_launch", false}, {"out", false}, {"stream", false}};

// A verify step's inputs: the decode's with a T axis after the row; parents int32 [B, T].
void verify_io(Args& a, Mamba2VerifyIO& io) {
  const Tensor x = a.tensor("x", kBf16, {B, T, NH, P});
  const Tensor dt = a.tensor("dt", kBf16, {B, T, NH});
  const Tensor A = a.tensor("A", kFloat, {NH});
  const Tensor Bm = a.tensor("B", kBf16, {B, T, G, N});
  const Tensor Cm = a.tensor("C", kBf16, {B, T, G, N});
  const Tensor D = a.tensor("D", kFloat, {NH});
  const Tensor z = a.tensor("z", kBf16, {B, T, NH, P}, false);
  const Tensor dt_bias = a.tensor("dt_bias", kFloat, {NH}, false);
  io.dt_softplus = a.boolean("dt_softplus", true);
  const Tensor parents = a.tensor("parents", kInt32, {B, T}, false);
  const Tensor slot = a.tensor("slot", kInt32, {B});
  io.batch = int(a.dim(B)), io.tokens = int(a.dim(T));
  io.G = int(a.dim(G)), io.NH = int(a.dim(NH)), io.P = int(a.dim(P)), io.N = int(a.dim(N));
  io.slot = slot.ptr<const int32_t>();
  io.x = bf16(x), io.dt = bf16(dt), io.B = bf16(Bm), io.C = bf16(Cm), io.z = opt<const __nv_bfloat16>(z);
  io.A = A.ptr<const float>(), io.D = D.ptr<const float>(), io.dt_bias = opt<const float>(dt_bias);
  io.parents = opt<const int32_t>(parents);
}
const std::vector<Param> kVerifyParams = {{"x", true}, {"dt", true}, {"A", true},          {"B", true},
                                          {"C", true}, {"D", true},  {"z", false},         {"dt_bias", false},
                                          {"dt_softplus", false},    {"parents", false},   {"slot", true}};

Launch prepare_verify_classic(Args& a) {
  Mamba2VerifyClassicParams p;
  verify_io(a, p.io);
  const Tensor state = a.tensor("state", kStateTypes, {S, NH, P, N});
  const Tensor step_slot = a.tensor("step_slot", kInt32, {B, T});
  p.rows_per_warp = int(a.integer("rows_per_warp", 0));
  const Tensor& out = a.output("out", {B, T, NH, P});
  a.finish();
  p.io.out = out.ptr<__nv_bfloat16>();
  p.state = state.data;
  p.step_slot = step_slot.ptr<const int32_t>();
  p.state_type = state_type_of(state);
  return [p](cudaStream_t s) { mamba2_verify_classic(p, s); };
}

void kvbuffer_verify_pools(Args& a, Mamba2VerifyKVBufferParams& p) {
  const Tensor state = a.tensor("state", kStateTypes, {S, NH, P, N});
  const Tensor buf_k = a.tensor("buf_k", kBf16, {S, C, G, N});
  const Tensor buf_val = a.tensor("buf_val", kBf16, {S, C, NH, P});
  const Tensor buf_gcum = a.tensor("buf_gcum", kFloat, {S, C, NH});
  const Tensor buf_beta = a.tensor("buf_beta", kFloat, {S, C, NH});
  const Tensor fill = a.tensor("fill", kInt32, {S});
  const Tensor has_state = a.tensor("has_state", kInt32, {S});
  const Tensor win_k = a.tensor("win_k", kBf16, {B, T, G, N});
  const Tensor win_u = a.tensor("win_u", kBf16, {B, T, NH, P});
  const Tensor win_gcum = a.tensor("win_gcum", kFloat, {B, T, NH});
  const Tensor win_beta = a.tensor("win_beta", kFloat, {B, T, NH});
  const Tensor win_base = a.tensor("win_base", kInt32, {B, Two});
  p.state = state.data;
  p.state_type = state_type_of(state);
  p.buf_k = buf_k.ptr<__nv_bfloat16>(), p.buf_val = buf_val.ptr<__nv_bfloat16>();
  p.buf_gcum = buf_gcum.ptr<float>(), p.buf_beta = buf_beta.ptr<float>();
  p.fill = fill.ptr<int32_t>(), p.has_state = has_state.ptr<int32_t>();
  p.win_k = win_k.ptr<__nv_bfloat16>(), p.win_u = win_u.ptr<__nv_bfloat16>();
  p.win_gcum = win_gcum.ptr<float>(), p.win_beta = win_beta.ptr<float>();
  p.win_base = win_base.ptr<int32_t>();
}
const std::vector<Param> kKVBufferVerifyPools = {
    {"state", true},     {"buf_k", true}, {"buf_val", true}, {"buf_gcum", true}, {"buf_beta", true}, {"fill", true},
    {"has_state", true}, {"win_k", true}, {"win_u", true},   {"win_gcum", true}, {"win_beta", true}, {"win_base", true}};

Launch prepare_verify_kvbuffer(Args& a) {
  Mamba2VerifyKVBufferParams p;
  verify_io(a, p.io);
  kvbuffer_verify_pools(a, p);
  p.heads_per_block = int(a.integer("heads_per_block", 0));
  const Tensor row_order = a.tensor("row_order", kInt32, {B}, false);
  p.pools_ready_at_launch = a.boolean("pools_ready_at_launch", false);
  const Tensor& out = a.output("out", {B, T, NH, P});
  a.finish();
  p.io.out = out.ptr<__nv_bfloat16>();
  p.capacity = int(a.dim(C));
  p.row_order = opt<const int32_t>(row_order);
  return [p](cudaStream_t s) { mamba2_verify_kvbuffer(p, s); };
}

Launch prepare_verify_kvbuffer_commit(Args& a) {
  Mamba2VerifyKVBufferParams p;
  const Tensor slot = a.tensor("slot", kInt32, {B});
  kvbuffer_verify_pools(a, p);
  const Tensor accept_len = a.tensor("accept_len", kInt32, {B});
  const Tensor accept_nodes = a.tensor("accept_nodes", kInt32, {B, T}, false);
  a.finish();
  Mamba2VerifyIO& io = p.io;
  io.batch = int(a.dim(B)), io.tokens = int(a.dim(T));
  io.G = int(a.dim(G)), io.NH = int(a.dim(NH)), io.P = int(a.dim(P)), io.N = int(a.dim(N));
  io.slot = slot.ptr<const int32_t>();
  // The commit reads no token input; the kernels' argument check wants them set (never read).
  io.x = io.dt = io.B = io.C = p.win_k;
  io.A = io.D = p.win_gcum;
  io.out = p.win_k;
  p.capacity = int(a.dim(C));
  p.accept.accept_len = accept_len.ptr<const int32_t>();
  p.accept.accept_nodes = opt<const int32_t>(accept_nodes);
  return [p](cudaStream_t s) { mamba2_verify_kvbuffer_commit(p, s); };
}

constexpr const char* kDocRecurrent = R"(Mamba-2 recurrent decode (selective_state_update) of one token per request row.

x: bfloat16 [B, NH, P] (or [B, 1, NH, P]); dt: bfloat16 [B, NH] as the model produces it (the
kernel takes softplus(dt + dt_bias) when dt_softplus, the default); A, D: float32 [NH];
B, C: bfloat16 [B, G, N]; z: optional gate bfloat16 [B, NH, P] (y *= silu(z)); dt_bias: float32
[NH] or None; slot: int32 [B] (negative: a padding row, output zeros); state: [slots, NH, P, N]
float32, bfloat16 or float16 (N contiguous), updated in place. mamba-ssm's per-(head, dim) dt, A,
D and dt_bias are stride-0 expansions of these: pass dt[..., 0], A[:, 0, 0], D[:, 0], dt_bias[:, 0].
out: bfloat16 [B, NH, P] (allocated when None); stream and pools_ready_at_launch as in
gdn_decode_recurrent. Returns out.)";

constexpr const char* kDocKVBuffer = R"(Mamba-2 KVBuffer decode (kernels/mamba2/mamba2_decode.h). Token inputs as
mamba2_decode_recurrent; pools: state [slots, NH, P, N] (S0), buf_k (B) bfloat16 [slots, C, G, N],
buf_val (x) bfloat16 [slots, C, NH, P], buf_gcum and buf_beta (dt) float32 [slots, C, NH];
fill, has_state, done_count int32 [slots], or row_fill, row_has_state int32 [B] instead; path
'auto', 'single' or 'split' (direct only); every_row_has_state and pools_ready_at_launch as in
gdn_decode_kvbuffer. Returns out bfloat16 [B, NH, P].)";

constexpr const char* kDocVerifyClassic = R"(Mamba-2 classic speculative verify, in place (vLLM's spec-decode state cache): S0
from state[slot[row]], node t's state to state[step_slot[row, t]] (int32 [B, T]); commit by index.
x bfloat16 [B, T, NH, P], dt bfloat16 [B, T, NH], B, C bfloat16 [B, T, G, N], z optional; A, D,
dt_bias float32 [NH]; parents int32 [B, T] for trees. Returns out bfloat16 [B, T, NH, P].)";

constexpr const char* kDocVerifyKVBuffer = R"(Mamba-2 KVBuffer speculative verify (kernels/mamba2/mamba2_verify.h). Token inputs as
mamba2_verify_classic; pools as mamba2_decode_kvbuffer (fill, has_state required); scratch:
win_k bfloat16 [B, T, G, N], win_u bfloat16 [B, T, NH, P], win_gcum, win_beta float32 [B, T, NH],
win_base int32 [B, 2]; heads_per_block 0 (chosen), 1, 2, 4 or 8; row_order int32 [B] (a launch
order hint); pools_ready_at_launch (see the header). Returns out bfloat16 [B, T, NH, P].)";

constexpr const char* kDocVerifyKVBufferCommit = R"(Commit of the Mamba-2 KVBuffer verify: accept_len int32 [B] in 0..T, accept_nodes
int32 [B, T] (1-based root path; None = the chain prefix). Pools and scratch as
mamba2_verify_kvbuffer. Returns None.)";

}  // namespace

std::vector<KernelBinding> mamba2_bindings() {
  return {
      {"mamba2_decode_recurrent",
       concat(kStepParams, {{"state", true}, {"pools_ready_at_launch", false}, {"out", false}, {"stream", false}}),
       prepare_recurrent, kDocRecurrent},
      {"mamba2_decode_kvbuffer", concat(kStepParams, kKVBufferPools), prepare_kvbuffer<mamba2_decode_kvbuffer>,
       kDocKVBuffer},
      {"mamba2_decode_direct", concat(kStepParams, kKVBufferPools), prepare_kvbuffer<mamba2_decode_direct>,
       "The Mamba-2 KVBuffer decode's entry point for batches of (mostly) stateless requests;\n"
       "arguments as mamba2_decode_kvbuffer."},
      {"mamba2_verify_classic",
       concat(kVerifyParams, {{"state", true}, {"step_slot", true}, {"rows_per_warp", false}, {"out", false}, {"stream", false}}),
       prepare_verify_classic, kDocVerifyClassic},
      {"mamba2_verify_kvbuffer",
       concat(concat(kVerifyParams, kKVBufferVerifyPools),
              {{"heads_per_block", false}, {"row_order", false}, {"pools_ready_at_launch", false}, {"out", false}, {"stream", false}}),
       prepare_verify_kvbuffer, kDocVerifyKVBuffer},
      {"mamba2_verify_kvbuffer_commit",
       concat(concat({{"slot", true}}, kKVBufferVerifyPools), {{"accept_len", true}, {"accept_nodes", false}, {"stream", false}}),
       prepare_verify_kvbuffer_commit, kDocVerifyKVBufferCommit},
  };
}

}  // namespace kvbuf::py
