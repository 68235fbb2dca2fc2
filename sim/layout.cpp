#include "sim/layout.h"

namespace kvbuf {

std::string dtype_name(int bytes) {
  switch (bytes) {
    case 1: return "fp8";
    case 2: return "bf16";
    case 4: return "fp32";
    case 8: return "fp64";
    default: throw std::invalid_argument("no dtype of " + std::to_string(bytes) + " bytes");
  }
}

int dtype_bytes(const std::string& name) {
  if (name == "fp8") return 1;
  if (name == "bf16") return 2;
  if (name == "fp32" || name == "f32") return 4;
  if (name == "fp64" || name == "f64") return 8;
  throw std::invalid_argument("unknown dtype '" + name + "' (known: fp8, bf16, fp32, fp64)");
}

std::vector<PoolTensor> decode_pools(const PoolLayout& l, bool out_of_place) {
  std::vector<PoolTensor> t = {l.state()};
  if (out_of_place) t.push_back({"state_out", l.state_elems(), l.precision.state_bytes()});
  if (l.capacity > 0) {
    for (const PoolTensor& b : l.buffer()) t.push_back(b);
    for (const PoolTensor& m : l.buffer_metadata()) t.push_back(m);
  }
  return t;
}

std::vector<PoolTensor> speculative_pools(const PoolLayout& l, int tokens, bool kvbuffer, bool with_conv) {
  if (tokens < 1) throw std::invalid_argument("speculative_pools: T must be >= 1");
  std::vector<PoolTensor> t = {l.state()};
  if (with_conv) t.push_back(l.conv(kvbuffer ? 1 : 1 + tokens));
  if (!kvbuffer) {
    t.push_back(l.step_states(tokens));
    return t;
  }
  if (l.capacity < tokens) throw std::invalid_argument("speculative_pools: KVBuffer needs C >= T");
  for (const PoolTensor& b : l.buffer()) t.push_back(b);
  for (const PoolTensor& m : l.buffer_metadata()) t.push_back(m);
  for (const PoolTensor& w : l.verify_scratch(tokens)) t.push_back(w);
  return t;
}

PoolPlan::PoolPlan(std::vector<PoolTensor> tensors, size_t slots, int layers, size_t align)
    : tensors_(std::move(tensors)), slots_(slots), layers_(layers) {
  if (layers < 0 || align == 0) throw std::invalid_argument("PoolPlan: layers must be >= 0 and align > 0");
  for (size_t i = 0; i < tensors_.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (tensors_[i].name == tensors_[j].name)
        throw std::invalid_argument("PoolPlan: tensor '" + tensors_[i].name + "' listed twice");
  for (int l = 0; l < layers; ++l)
    for (const PoolTensor& t : tensors_) {
      total_ = (total_ + align - 1) / align * align;
      offsets_.push_back(total_);
      total_ += t.bytes_per_slot() * slots;
    }
}

size_t PoolPlan::index_of(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return i;
  throw std::invalid_argument("PoolPlan: no tensor '" + name + "'");
}

bool PoolPlan::has(const std::string& name) const {
  for (const PoolTensor& t : tensors_)
    if (t.name == name) return true;
  return false;
}

size_t PoolPlan::offset(int layer, const std::string& name) const {
  if (layer < 0 || layer >= layers_) throw std::invalid_argument("PoolPlan: layer out of range");
  return offsets_[size_t(layer) * tensors_.size() + index_of(name)];
}

size_t PoolPlan::tensor_bytes(const std::string& name) const {
  return tensors_[index_of(name)].bytes_per_slot() * slots_;
}

}  // namespace kvbuf
