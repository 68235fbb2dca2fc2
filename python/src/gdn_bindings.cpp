// Gated DeltaNet kernels from Python: decode (recurrent, KVBuffer, direct) and speculative verify
// (classic and KVBuffer, with their commits), on the layouts of sim/layout.h and
// kernels/gdn/gdn_decode.h / gdn_verify.h (FLA's q, k, v, g, beta; the state pool indexed by slot).
#include <cuda_bf16.h>

#include "kernels/gdn/gdn_decode.h"
#include "kernels/gdn/gdn_launch_shape.h"  // VerifyCoefRecord
#include "kernels/gdn/gdn_verify.h"
#include "python/src/bindings.h"

namespace kvbuf::py {
namespace {

StateType state_type_of(const Tensor& t) {
  return t.dtype == DType::BF16 ? StateType::BF16 : t.dtype == DType::F16 ? StateType::FP16 : StateType::FP32;
}
EntryType entry_type_of(const Tensor& t) { return t.dtype == DType::F32 ? EntryType::FP32 : EntryType::BF16; }
DecodePath path_of(const std::string& s) {
  return s == "single" ? DecodePath::Single : s == "split" ? DecodePath::Split : DecodePath::Auto;
}
const __nv_bfloat16* bf16(const Tensor& t) { return t.ptr<const __nv_bfloat16>(); }
template <class X>
X* opt(const Tensor& t) {
  return t ? t.ptr<X>() : nullptr;
}

// One decode step's token inputs: q, k [B, H, K] and v [B, HV, V] bf16 (or FLA's [B, 1, ...]),
// the gates (g and beta fp32 [B, HV], or a and b bf16 [B, HV] with A_log and dt_bias fp32 [HV]),
// slot int32 [B]; the output is requested by the caller after its pools.
void step_io(Args& a, GdnStepIO& io) {
  const Tensor q = a.tensor("q", kBf16, {B, H, K}, true, true);
  const Tensor k = a.tensor("k", kBf16, {B, H, K}, true, true);
  const Tensor v = a.tensor("v", kBf16, {B, HV, V}, true, true);
  const Tensor g = a.tensor("g", kFloat, {B, HV}, false, true);
  const Tensor beta = a.tensor("beta", kFloat, {B, HV}, false, true);
  const Tensor ga = a.tensor("a", kBf16, {B, HV}, false, true);
  const Tensor gb = a.tensor("b", kBf16, {B, HV}, false, true);
  const Tensor A_log = a.tensor("A_log", kFloat, {HV}, false);
  const Tensor dt_bias = a.tensor("dt_bias", kFloat, {HV}, false);
  const bool given = g || beta, raw = ga || gb || A_log || dt_bias;
  a.require(given != raw, "give the gates as g and beta, or as a, b, A_log and dt_bias (one of the two)");
  a.require(!given || (g && beta), "g and beta go together");
  a.require(!raw || (ga && gb && A_log && dt_bias), "a, b, A_log and dt_bias go together");
  const Tensor slot = a.tensor("slot", kInt32, {B});
  io.batch = int(a.dim(B));
  io.H = int(a.dim(H)), io.HV = int(a.dim(HV)), io.K = int(a.dim(K)), io.V = int(a.dim(V));
  io.slot = slot.ptr<const int32_t>();
  io.q = bf16(q), io.k = bf16(k), io.v = bf16(v);
  io.g = opt<const float>(g), io.beta = opt<const float>(beta);
  io.a = opt<const __nv_bfloat16>(ga), io.b = opt<const __nv_bfloat16>(gb);
  io.A_log = opt<const float>(A_log), io.dt_bias = opt<const float>(dt_bias);
  io.rows_per_block = int(a.integer("rows_per_block", 0));
}

const std::vector<Param> kStepParams = {{"q", true},      {"k", true},       {"v", true},       {"g", false},
                                        {"beta", false},  {"a", false},      {"b", false},      {"A_log", false},
                                        {"dt_bias", false}, {"slot", true},  {"rows_per_block", false}};

std::vector<Param> concat(std::vector<Param> x, const std::vector<Param>& y) {
  x.insert(x.end(), y.begin(), y.end());
  return x;
}

Launch prepare_recurrent(Args& a) {
  GdnRecurrentParams p;
  step_io(a, p.io);
  const Tensor state = a.tensor("state", kStateTypes, {S, HV, V, K});
  const Tensor state_out = a.tensor("state_out", kStateTypes, {S, HV, V, K}, false);
  a.same_dtype(state_out, state);
  p.pools_ready_at_launch = a.boolean("pools_ready_at_launch", false);
  const Tensor& out = a.output("out", {B, HV, V}, true);
  a.finish();
  p.io.out = out.ptr<__nv_bfloat16>();
  p.state_in = state.data;
  p.state_out = state_out ? state_out.data : state.data;
  p.state_type = state_type_of(state);
  return [p](cudaStream_t s) { gdn_decode_recurrent(p, s); };
}

// The KVBuffer decode's pools (gdn_decode_kvbuffer and gdn_decode_direct take the same).
template <void (*Run)(const GdnKVBufferParams&, cudaStream_t)>
Launch prepare_kvbuffer(Args& a) {
  GdnKVBufferParams p;
  step_io(a, p.io);
  const Tensor state = a.tensor("state", kStateTypes, {S, HV, V, K});
  const Tensor buf_k = a.tensor("buf_k", kFloat | kBf16, {S, C, H, K});
  const Tensor buf_val = a.tensor("buf_val", kFloat | kBf16, {S, C, HV, V});
  a.same_dtype(buf_val, buf_k);
  const Tensor buf_gcum = a.tensor("buf_gcum", kFloat, {S, C, HV});
  const Tensor buf_beta = a.tensor("buf_beta", kFloat, {S, C, HV}, false);
  const Tensor fill = a.tensor("fill", kInt32, {S}, false);
  const Tensor has_state = a.tensor("has_state", kInt32, {S}, false);
  const Tensor done_count = a.tensor("done_count", kInt32, {S}, false);
  const Tensor row_fill = a.tensor("row_fill", kInt32, {B}, false);
  const Tensor row_has_state = a.tensor("row_has_state", kInt32, {B}, false);
  const Tensor scratch = a.tensor("scratch", kFloat, {B, HV, Two, V}, false);
  const std::string variant = a.choice("variant", "cached-u", {"cached-u", "raw"});
  a.require(variant == "cached-u" || buf_beta, "the raw variant needs buf_beta");
  p.path = path_of(a.choice("path", "auto", {"auto", "single", "split"}));
  p.every_row_has_state = a.boolean("every_row_has_state", false);
  p.split_row_groups = int(a.integer("split_row_groups", 0));
  p.pools_ready_at_launch = a.boolean("pools_ready_at_launch", false);
  const Tensor& out = a.output("out", {B, HV, V}, true);
  a.finish();
  p.io.out = out.ptr<__nv_bfloat16>();
  p.variant = variant == "raw" ? BufferVariant::Raw : BufferVariant::CachedU;
  p.entry = entry_type_of(buf_k);
  p.capacity = int(a.dim(C));
  p.state_type = state_type_of(state);
  p.state = state.data;
  p.buf_k = buf_k.data, p.buf_val = buf_val.data;
  p.buf_gcum = buf_gcum.ptr<float>(), p.buf_beta = opt<float>(buf_beta);
  p.fill = opt<int32_t>(fill), p.has_state = opt<int32_t>(has_state), p.done_count = opt<int32_t>(done_count);
  p.row_fill = opt<const int32_t>(row_fill), p.row_has_state = opt<const int32_t>(row_has_state);
  p.scratch = opt<float>(scratch);
  return [p](cudaStream_t s) { Run(p, s); };
}

const std::vector<Param> kKVBufferPools = {
    {"state", true},      {"buf_k", true},          {"buf_val", true},  {"buf_gcum", true},  {"buf_beta", false},
    {"fill", false},      {"has_state", false},     {"done_count", false}, {"row_fill", false},
    {"row_has_state", false}, {"scratch", false},   {"variant", false}, {"path", false},
    {"every_row_has_state", false}, {"split_row_groups", false}, {"pools_ready_at_launch", false},
    {"out", false}, {"stream", false}};

// A verify step's token inputs: q, k [B, T, H, K], v [B, T, HV, V] bf16, g, beta [B, T, HV] fp32,
// parents int32 [B, T] (trees; None = chains), slot int32 [B].
void verify_io(Args& a, GdnVerifyIO& io) {
  const Tensor q = a.tensor("q", kBf16, {B, T, H, K});
  const Tensor k = a.tensor("k", kBf16, {B, T, H, K});
  const Tensor v = a.tensor("v", kBf16, {B, T, HV, V});
  const Tensor g = a.tensor("g", kFloat, {B, T, HV});
  const Tensor beta = a.tensor("beta", kFloat, {B, T, HV});
  const Tensor parents = a.tensor("parents", kInt32, {B, T}, false);
  const Tensor slot = a.tensor("slot", kInt32, {B});
  io.batch = int(a.dim(B)), io.tokens = int(a.dim(T));
  io.H = int(a.dim(H)), io.HV = int(a.dim(HV)), io.K = int(a.dim(K)), io.V = int(a.dim(V));
  io.slot = slot.ptr<const int32_t>();
  io.q = bf16(q), io.k = bf16(k), io.v = bf16(v);
  io.g = g.ptr<const float>(), io.beta = beta.ptr<const float>();
  io.parents = opt<const int32_t>(parents);
}
const std::vector<Param> kVerifyParams = {{"q", true}, {"k", true},        {"v", true},   {"g", true},
                                          {"beta", true}, {"parents", false}, {"slot", true}};

// A commit reads no token input, but the kernels' argument check wants the pointers set: they get
// one that is never read (the commits read slot, the accepted nodes, the scratch and the pools).
void commit_io(GdnVerifyIO& io, const void* never_read) {
  auto* p = static_cast<const __nv_bfloat16*>(never_read);
  io.q = io.k = io.v = p;
  io.g = io.beta = static_cast<const float*>(never_read);
  io.out = const_cast<__nv_bfloat16*>(p);
}

Launch prepare_verify_classic(Args& a) {
  GdnVerifyClassicParams p;
  verify_io(a, p.io);
  const Tensor state = a.tensor("state", kStateTypes, {S, HV, V, K});
  const Tensor step_slot = a.tensor("step_slot", kInt32, {B, T}, false);
  const Tensor step_states = a.tensor("step_states", kStateTypes, {B, T, HV, V, K}, false);
  a.same_dtype(step_states, state);
  a.require(bool(step_slot) != bool(step_states), "give exactly one of step_slot (in place) and step_states (copy)");
  const Tensor& out = a.output("out", {B, T, HV, V});
  a.finish();
  p.io.out = out.ptr<__nv_bfloat16>();
  p.state = state.data;
  p.step_slot = opt<const int32_t>(step_slot);
  p.step_states = step_states ? step_states.data : nullptr;
  p.state_type = state_type_of(state);
  return [p](cudaStream_t s) { gdn_verify_classic(p, s); };
}

Launch prepare_verify_classic_commit(Args& a) {
  GdnVerifyClassicParams p;
  const Tensor state = a.tensor("state", kStateTypes, {S, HV, V, K});
  const Tensor slot = a.tensor("slot", kInt32, {B});
  const Tensor step_states = a.tensor("step_states", kStateTypes, {B, T, HV, V, K});
  a.same_dtype(step_states, state);
  const Tensor accept_len = a.tensor("accept_len", kInt32, {B});
  const Tensor accept_nodes = a.tensor("accept_nodes", kInt32, {B, T}, false);
  a.finish();
  p.io.batch = int(a.dim(B)), p.io.tokens = int(a.dim(T));
  p.io.HV = int(a.dim(HV)), p.io.H = p.io.HV, p.io.K = int(a.dim(K)), p.io.V = int(a.dim(V));
  p.io.slot = slot.ptr<const int32_t>();
  commit_io(p.io, step_states.data);
  p.state = state.data;
  p.step_states = step_states.data;
  p.state_type = state_type_of(state);
  p.accept.accept_len = accept_len.ptr<const int32_t>();
  p.accept.accept_nodes = opt<const int32_t>(accept_nodes);
  return [p](cudaStream_t s) { gdn_verify_classic_commit(p, s); };
}

// The KVBuffer pools and the verify's scratch (verify and commit).
void kvbuffer_verify_pools(Args& a, GdnVerifyKVBufferParams& p) {
  const Tensor state = a.tensor("state", kStateTypes, {S, HV, V, K});
  const Tensor buf_k = a.tensor("buf_k", kFloat | kBf16, {S, C, H, K});
  const Tensor buf_val = a.tensor("buf_val", kFloat | kBf16, {S, C, HV, V});
  a.same_dtype(buf_val, buf_k);
  const Tensor buf_gcum = a.tensor("buf_gcum", kFloat, {S, C, HV});
  const Tensor fill = a.tensor("fill", kInt32, {S});
  const Tensor has_state = a.tensor("has_state", kInt32, {S});
  const Tensor win_k = a.tensor("win_k", kFloat | kBf16, {B, T, H, K});
  a.same_dtype(win_k, buf_k);
  const Tensor win_u = a.tensor("win_u", kFloat | kBf16, {B, T, HV, V});
  a.same_dtype(win_u, buf_k);
  const Tensor win_gcum = a.tensor("win_gcum", kFloat, {B, T, HV});
  const Tensor win_base = a.tensor("win_base", kInt32, {B, Two});
  p.entry = entry_type_of(buf_k);
  p.state_type = state_type_of(state);
  p.state = state.data;
  p.buf_k = buf_k.data, p.buf_val = buf_val.data, p.buf_gcum = buf_gcum.ptr<float>();
  p.fill = fill.ptr<int32_t>(), p.has_state = has_state.ptr<int32_t>();
  p.win_k = win_k.data, p.win_u = win_u.data, p.win_gcum = win_gcum.ptr<float>();
  p.win_base = win_base.ptr<int32_t>();
}
const std::vector<Param> kKVBufferVerifyPools = {
    {"state", true}, {"buf_k", true}, {"buf_val", true}, {"buf_gcum", true}, {"fill", true},
    {"has_state", true}, {"win_k", true}, {"win_u", true}, {"win_gcum", true}, {"win_base", true}};

Launch prepare_verify_kvbuffer(Args& a) {
  GdnVerifyKVBufferParams p;
  verify_io(a, p.io);
  kvbuffer_verify_pools(a, p);
  p.pools_ready_at_launch = a.boolean("pools_ready_at_launch", false);
  const Tensor coef = a.tensor("coef", kFloat, {B, HV, Rec}, false);
  const int record = gdn_verify_detail::verify_coef_floats(int(a.dim(T)), int(a.dim(C)));
  a.require(!coef || a.dim(Rec) == record, "coef must be float32 [B, HV, " + std::to_string(record) +
                                               "] at T = " + std::to_string(a.dim(T)) + ", C = " +
                                               std::to_string(a.dim(C)) + " (gdn_verify_coef_shape)");
  p.path = path_of(a.choice("path", "auto", {"auto", "single", "split"}));
  a.require(p.path != DecodePath::Split || coef, "path 'split' needs coef");
  const Tensor& out = a.output("out", {B, T, HV, V});
  a.finish();
  p.io.out = out.ptr<__nv_bfloat16>();
  p.capacity = int(a.dim(C));
  p.coef = opt<float>(coef);
  return [p](cudaStream_t s) { gdn_verify_kvbuffer(p, s); };
}

Launch prepare_verify_kvbuffer_commit(Args& a) {
  GdnVerifyKVBufferParams p;
  const Tensor slot = a.tensor("slot", kInt32, {B});
  kvbuffer_verify_pools(a, p);
  const Tensor accept_len = a.tensor("accept_len", kInt32, {B});
  const Tensor accept_nodes = a.tensor("accept_nodes", kInt32, {B, T}, false);
  a.finish();
  p.io.batch = int(a.dim(B)), p.io.tokens = int(a.dim(T));
  p.io.H = int(a.dim(H)), p.io.HV = int(a.dim(HV)), p.io.K = int(a.dim(K)), p.io.V = int(a.dim(V));
  p.io.slot = slot.ptr<const int32_t>();
  commit_io(p.io, p.win_k);
  p.capacity = int(a.dim(C));
  p.accept.accept_len = accept_len.ptr<const int32_t>();
  p.accept.accept_nodes = opt<const int32_t>(accept_nodes);
  return [p](cudaStream_t s) { gdn_verify_kvbuffer_commit(p, s); };
}

constexpr const char* kDocRecurrent = R"(Gated DeltaNet recurrent decode of one token per request row.

q, k: bfloat16 [B, H, K] (or FLA's [B, 1, H, K]), un-normalised; v: bfloat16 [B, HV, V];
gates: g (log decay <= 0) and beta, float32 [B, HV]; or a, b bfloat16 [B, HV] with A_log and
dt_bias float32 [HV] (g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), in kernel);
slot: int32 [B], each row's pool slot (negative: a padding row, output zeros);
state: [slots, HV, V, K] float32, bfloat16 or float16 (K contiguous), updated in place, or read
there and written to state_out (same shape and dtype; FLA's out-of-place placement);
out: bfloat16 [B, HV, V] (allocated when None, PyTorch only); rows_per_block: 0 = chosen.
pools_ready_at_launch: the caller's promise that the kernel before in the stream writes neither the
pools nor slot (kernels/gdn/gdn_decode.h): the kernel then reads them before waiting for it.
stream: an int cudaStream_t or a stream object; None = the current stream of the tensors'
framework (torch.cuda.current_stream()), else the legacy default stream. Returns out.)";

constexpr const char* kDocKVBuffer = R"(Gated DeltaNet KVBuffer decode (kernels/gdn/gdn_decode.h): the output from the
checkpoint S0 and the buffered entries, the token appended, or S0 and the C entries folded when
the buffer fills. Token inputs and gates as gdn_decode_recurrent. Pools indexed by slot:
state [slots, HV, V, K] (S0; float32, bfloat16 or float16); buf_k [slots, C, H, K] and buf_val
[slots, C, HV, V] (bfloat16 or float32 entries, one dtype); buf_gcum [slots, C, HV] float32;
buf_beta [slots, C, HV] float32 (variant='raw' only); fill, has_state, done_count int32 [slots]
(advanced by the kernel; done_count zero before the first launch), or instead row_fill and
row_has_state int32 [B] (scheduler metadata, read only: the caller advances its copy);
scratch float32 [B, HV, 2, V] (path='split'); path 'auto', 'single' or 'split';
every_row_has_state: the caller's promise (capacity 1 runs the recurrent update);
split_row_groups (direct only); pools_ready_at_launch as gdn_decode_recurrent. A row with has_state 0 is in direct mode (no S0).
Returns out, bfloat16 [B, HV, V].)";

constexpr const char* kDocVerifyClassic = R"(Gated DeltaNet classic speculative verify of T <= 8 tokens per row (chains, or
trees with parents int32 [B, T]: entry i-1 is the parent of node i, 0 the committed state).
q, k bfloat16 [B, T, H, K]; v bfloat16 [B, T, HV, V]; g, beta float32 [B, T, HV]; slot int32 [B];
state [slots, HV, V, K]. Exactly one of: step_slot int32 [B, T] (in place: node t's state to
state[step_slot[row, t]]; commit by index, no kernel) or step_states [B, T, HV, V, K] (copy;
gdn_verify_classic_commit copies the accepted one). Returns out bfloat16 [B, T, HV, V].)";

constexpr const char* kDocVerifyClassicCommit = R"(Copy commit of the classic verify: state[slot] <- step_states[row, last accepted
node]; accept_len int32 [B] (0 keeps the state), accept_nodes int32 [B, T] (1-based root path;
None = the chain prefix). Returns None.)";

constexpr const char* kDocVerifyKVBuffer = R"(Gated DeltaNet KVBuffer speculative verify (kernels/gdn/gdn_verify.h): all T outputs
from one read of S0 and the buffer; folds the buffer first when fill > 0 and fill + depth >= C.
Token inputs as gdn_verify_classic; pools as gdn_decode_kvbuffer (fill and has_state required,
cached-u entries); the verify's scratch: win_k [B, T, H, K] and win_u [B, T, HV, V] (the entry
dtype), win_gcum float32 [B, T, HV], win_base int32 [B, 2]; pools_ready_at_launch as
gdn_decode_recurrent; coef float32 [B, HV, F] (gdn_verify_coef_shape(B, HV, T, C)), the split
path's workspace, and path 'auto' (split from T = 5 on large grids when coef is given), 'single' or
'split'. Returns out bfloat16 [B, T, HV, V].)";

constexpr const char* kDocVerifyKVBufferCommit = R"(Commit of the KVBuffer verify: appends the accepted entries from the scratch (folds
when the buffer becomes full); accept_len int32 [B] in 0..T, accept_nodes int32 [B, T] (1-based
root path; None = the chain prefix). Pools and scratch as gdn_verify_kvbuffer. Returns None.)";

}  // namespace

std::vector<KernelBinding> gdn_bindings() {
  const std::vector<Param> recurrent_tail = {{"state", true}, {"state_out", false}, {"pools_ready_at_launch", false},
                                             {"out", false}, {"stream", false}};
  return {
      {"gdn_decode_recurrent", concat(kStepParams, recurrent_tail), prepare_recurrent, kDocRecurrent},
      {"gdn_decode_kvbuffer", concat(kStepParams, kKVBufferPools), prepare_kvbuffer<gdn_decode_kvbuffer>, kDocKVBuffer},
      {"gdn_decode_direct", concat(kStepParams, kKVBufferPools), prepare_kvbuffer<gdn_decode_direct>,
       "The KVBuffer decode's entry point for batches of (mostly) stateless requests (direct mode);\n"
       "arguments as gdn_decode_kvbuffer."},
      {"gdn_verify_classic",
       concat(kVerifyParams, {{"state", true}, {"step_slot", false}, {"step_states", false}, {"out", false}, {"stream", false}}),
       prepare_verify_classic, kDocVerifyClassic},
      {"gdn_verify_classic_commit",
       {{"state", true}, {"slot", true}, {"step_states", true}, {"accept_len", true}, {"accept_nodes", false}, {"stream", false}},
       prepare_verify_classic_commit, kDocVerifyClassicCommit},
      {"gdn_verify_kvbuffer",
       concat(concat(kVerifyParams, kKVBufferVerifyPools),
              {{"pools_ready_at_launch", false}, {"coef", false}, {"path", false}, {"out", false}, {"stream", false}}),
       prepare_verify_kvbuffer, kDocVerifyKVBuffer},
      {"gdn_verify_kvbuffer_commit",
       concat(concat({{"slot", true}}, kKVBufferVerifyPools), {{"accept_len", true}, {"accept_nodes", false}, {"stream", false}}),
       prepare_verify_kvbuffer_commit, kDocVerifyKVBufferCommit},
  };
}

}  // namespace kvbuf::py
