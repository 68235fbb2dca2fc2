#include "sim/capacity.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvbuf {
namespace {

long fit(double pool, double per_request) {
  return per_request > 0 ? long(std::floor(pool / per_request)) : 0;
}

}  // namespace

const char* scheduler_name(SchedulerPolicy p) {
  return p == SchedulerPolicy::Reserve ? "reserve" : "mean";
}

SchedulerPolicy parse_scheduler(const std::string& name) {
  if (name == "reserve") return SchedulerPolicy::Reserve;
  if (name == "mean") return SchedulerPolicy::Mean;
  throw std::invalid_argument("unknown scheduler '" + name + "' (known: reserve, mean)");
}

double default_weight_bytes(const ModelSpec& model, int tp, double bytes_per_param) {
  if (tp < 1) throw std::invalid_argument("--tp must be at least 1");
  return model.params_billion * 1e9 * bytes_per_param / tp;
}

double linear_bytes_per_request(const ModelSpec& model, const Precision& p, BufferVariant v,
                                bool kvbuffer, int drafts, int chunk, bool count_verify_scratch) {
  const LayerShape& s = model.layer;
  const double state_and_conv = state_bytes(s, p) + conv_state_bytes(s, p);
  if (!kvbuffer) return model.linear_layers * (1 + drafts) * state_and_conv;
  const int entries = chunk + (count_verify_scratch ? drafts : 0);
  return model.linear_layers * (state_and_conv + entries * buffer_entry_bytes(s, p, v));
}

CapacityResult capacity_model(const CapacityInputs& in) {
  // Up to 2^60 bytes, so that request counts stay far inside a long.
  constexpr double kMaxMemory = 1152921504606846976.0;
  if (!(in.gpu_memory_bytes > 0 && in.gpu_memory_bytes <= kMaxMemory))
    throw std::invalid_argument("GPU memory must be positive and at most 2^60 bytes");
  if (!(in.weight_bytes >= 0 && in.weight_bytes <= kMaxMemory))
    throw std::invalid_argument("weight memory must be non-negative and at most 2^60 bytes");
  if (in.context < 1)
    throw std::invalid_argument("context length must be at least 1, got " +
                                std::to_string(in.context));
  if (in.drafts < 1)
    throw std::invalid_argument("draft count T must be at least 1, got " +
                                std::to_string(in.drafts));
  if (in.chunk < 1 || in.chunk > kMaxBufferCapacity)
    throw std::invalid_argument("buffer capacity C must be in 1.." +
                                std::to_string(kMaxBufferCapacity) + ", got " +
                                std::to_string(in.chunk));
  if (in.drafts > in.chunk)
    throw std::invalid_argument("draft count T (" + std::to_string(in.drafts) +
                                ") exceeds buffer capacity C (" + std::to_string(in.chunk) + ")");
  validate_model(in.model);

  const double kv_tokens =
      in.scheduler == SchedulerPolicy::Reserve ? double(in.context) : in.context / 2.0;
  const double attn = kv_tokens * in.model.attn_kv_bytes_per_token();

  CapacityResult r;
  r.pool_bytes = std::max(0.0, in.gpu_memory_bytes - in.weight_bytes);
  auto method = [&](double linear) {
    MethodCapacity m;
    m.linear_bytes_per_request = linear;
    m.attn_bytes_per_request = attn;
    m.max_requests_linear_pool = fit(r.pool_bytes, linear);
    m.max_requests_whole_model = fit(r.pool_bytes, linear + attn);
    return m;
  };
  r.classic = method(linear_bytes_per_request(in.model, in.precision, in.variant, false, in.drafts,
                                              in.chunk, in.count_verify_scratch));
  r.kvbuffer = method(linear_bytes_per_request(in.model, in.precision, in.variant, true, in.drafts,
                                               in.chunk, in.count_verify_scratch));
  r.ratio_linear_pool = r.classic.linear_bytes_per_request / r.kvbuffer.linear_bytes_per_request;
  r.ratio_whole_model =
      (r.classic.linear_bytes_per_request + attn) / (r.kvbuffer.linear_bytes_per_request + attn);
  return r;
}

}  // namespace kvbuf
