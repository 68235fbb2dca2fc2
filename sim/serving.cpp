#include "sim/serving.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <random>
#include <stdexcept>

#include "sim/csv.h"

namespace kvbuf {
namespace {

std::invalid_argument bad(const std::string& what) { return std::invalid_argument(what); }

// Uniform in [0, 1) from the generator's bits, the same on every platform (std distributions
// are not).
double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto rank = [&](double q) { return v[size_t(std::ceil(q * v.size())) - 1]; };
  p.p50 = rank(0.5);
  p.p90 = rank(0.9);
  p.p99 = rank(0.99);
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / v.size();
  return p;
}

}  // namespace

std::vector<ServingRequest> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw bad("cannot read trace '" + path + "'");
  std::string line;
  int line_no = 0;
  int col_arrival = -1, col_prompt = -1, col_output = -1;
  size_t columns = 0;
  std::vector<ServingRequest> out;
  while (std::getline(in, line)) {
    ++line_no;
    if (trim(line).empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    std::vector<std::string> fields;
    try {
      fields = split_csv_line(trim(line));
    } catch (const std::invalid_argument& e) {
      throw bad(where + e.what());
    }
    for (std::string& f : fields) f = trim(f);
    if (columns == 0) {
      columns = fields.size();
      for (size_t i = 0; i < fields.size(); ++i) {
        if (fields[i] == "arrival_s") col_arrival = int(i);
        if (fields[i] == "prompt_tokens") col_prompt = int(i);
        if (fields[i] == "output_tokens") col_output = int(i);
      }
      if (col_arrival < 0 || col_prompt < 0 || col_output < 0)
        throw bad(where + "header must name arrival_s, prompt_tokens, output_tokens");
      continue;
    }
    if (fields.size() != columns)
      throw bad(where + std::to_string(fields.size()) + " fields, header has " + std::to_string(columns));
    auto number = [&](int col, const char* name) {
      const std::optional<double> v = csv_number(fields[size_t(col)]);
      if (!v) throw bad(where + name + " is not a number: '" + fields[size_t(col)] + "'");
      return *v;
    };
    auto count = [&](int col, const char* name) {
      const double v = number(col, name);
      if (v < 1 || v != std::floor(v) || v > 1e9)
        throw bad(where + name + " must be a whole number in 1..1e9, got " + fields[size_t(col)]);
      return long(v);
    };
    ServingRequest r;
    r.arrival_s = number(col_arrival, "arrival_s");
    if (r.arrival_s < 0) throw bad(where + "arrival_s must be non-negative");
    r.prompt_tokens = count(col_prompt, "prompt_tokens");
    r.output_tokens = count(col_output, "output_tokens");
    out.push_back(r);
  }
  if (out.empty()) throw bad("trace '" + path + "' has no requests");
  std::stable_sort(out.begin(), out.end(),
                   [](const ServingRequest& a, const ServingRequest& b) { return a.arrival_s < b.arrival_s; });
  return out;
}

std::vector<ServingRequest> poisson_requests(double rate, double duration_s, long prompt_mean,
                                             long output_mean, uint64_t seed) {
  if (!(rate > 0)) throw bad("arrival rate must be positive");
  if (!(duration_s > 0)) throw bad("duration must be positive");
  if (prompt_mean < 1 || output_mean < 1) throw bad("mean prompt and output lengths must be >= 1");
  std::mt19937_64 rng(seed);
  auto length = [&](long mean) {
    const long lo = std::max(1L, mean / 2), hi = std::max(lo, mean + mean / 2);
    return lo + long(rng() % uint64_t(hi - lo + 1));
  };
  std::vector<ServingRequest> out;
  double t = 0;
  while (true) {
    t += -std::log(1 - uniform01(rng)) / rate;
    if (t >= duration_s) break;
    ServingRequest r;
    r.arrival_s = t;
    r.prompt_tokens = length(prompt_mean);
    r.output_tokens = length(output_mean);
    out.push_back(r);
  }
  return out;
}

ServingResult simulate_serving(const StepModel& model, const ServingConfig& config,
                               std::vector<ServingRequest> requests,
                               const std::function<void(long, long, double)>& progress) {
  if (requests.empty()) throw bad("no requests to simulate");
  if (!(config.memory_fraction > 0 && config.memory_fraction <= 1))
    throw bad("memory fraction must be in (0, 1]");
  if (config.max_batch < 0) throw bad("max batch must be non-negative");
  std::stable_sort(requests.begin(), requests.end(),
                   [](const ServingRequest& a, const ServingRequest& b) { return a.arrival_s < b.arrival_s; });
  const StepConfig& cfg = model.config();
  ServingResult res;
  res.memory_limit_bytes = config.memory_fraction * cfg.gpu.memory_bytes;
  res.weight_bytes = model.weight_bytes_per_gpu();
  const double pool = res.memory_limit_bytes - res.weight_bytes;
  if (pool <= 0)
    throw bad("model '" + cfg.model.name + "' does not fit: " + std::to_string(res.weight_bytes / 1e9) +
              " GB of weights per GPU against " + std::to_string(res.memory_limit_bytes / 1e9) +
              " GB usable on " + cfg.gpu.name + " at tp " + std::to_string(cfg.tp) + " (raise --tp)");
  const size_t n = requests.size();
  std::vector<double> bytes(n);
  for (size_t i = 0; i < n; ++i) {
    bytes[i] = model.request_bytes(requests[i].prompt_tokens + requests[i].output_tokens);
    if (bytes[i] > pool)
      throw bad("request " + std::to_string(i + 1) + " (prompt " + std::to_string(requests[i].prompt_tokens) +
                ", output " + std::to_string(requests[i].output_tokens) + " tokens) needs " +
                std::to_string(bytes[i] / 1e9) + " GB, more than the " + std::to_string(pool / 1e9) +
                " GB left after the weights of '" + cfg.model.name + "' (raise --tp)");
  }

  struct Live {
    double admit_s = 0, first_s = 0, finish_s = 0;
    long generated = 0;
  };
  std::vector<Live> live(n);
  std::deque<size_t> waiting;
  std::vector<size_t> running;
  std::mt19937_64 rng(config.seed);
  const int T = cfg.drafts;
  auto draw_emitted = [&] {
    int m = 1;
    while (m < T && uniform01(rng) < cfg.acceptance) ++m;
    return m;
  };

  double t = requests.front().arrival_s;
  double reserved = 0, running_time = 0, decode_time = 0, last_row_s = -1;
  long done = 0, pending_tokens = 0;
  double pending_prefill = 0;
  size_t next = 0;
  auto wall_start = std::chrono::steady_clock::now();
  auto last_report = wall_start;
  std::vector<long> contexts;
  auto finish = [&](size_t i) {
    live[i].finish_s = t;
    reserved -= bytes[i];
    ++done;
  };
  while (done < long(n)) {
    while (next < n && requests[next].arrival_s <= t) waiting.push_back(next++);
    if (running.empty() && waiting.empty()) {
      t = requests[next].arrival_s;
      continue;
    }
    double prefill_us = 0;
    std::vector<size_t> admitted;
    while (!waiting.empty()) {
      const size_t i = waiting.front();
      if (reserved + bytes[i] > pool) break;
      if (config.max_batch > 0 && int(running.size() + admitted.size()) >= config.max_batch) break;
      reserved += bytes[i];
      live[i].admit_s = t;
      prefill_us += model.prefill_us(requests[i].prompt_tokens);
      admitted.push_back(i);
      waiting.pop_front();
    }
    // Memory held during this step: the reservations of every request in it.
    const double memory = res.weight_bytes + reserved;
    res.peak_memory_bytes = std::max(res.peak_memory_bytes, memory);
    t += prefill_us * 1e-6;
    long tokens = 0;
    for (size_t i : admitted) {
      live[i].first_s = t;
      live[i].generated = 1;
      ++tokens;
      if (live[i].generated >= requests[i].output_tokens) {
        finish(i);
      } else {
        running.push_back(i);
      }
    }
    double step_us = 0;
    if (!running.empty()) {
      contexts.clear();
      for (size_t i : running) contexts.push_back(requests[i].prompt_tokens + live[i].generated);
      const StepTerms terms = model.step(contexts);
      step_us = terms.total_us();
      t += step_us * 1e-6;
      res.mean_step.linear_attn_us += terms.linear_attn_us;
      res.mean_step.attn_kv_us += terms.attn_kv_us;
      res.mean_step.projections_us += terms.projections_us;
      res.mean_step.mlp_us += terms.mlp_us;
      res.mean_step.lm_head_us += terms.lm_head_us;
      res.mean_step.overhead_us += terms.overhead_us;
      res.mean_step.comm_us += terms.comm_us;
      if (int(terms.linear_source) > int(res.linear_source)) res.linear_source = terms.linear_source;
      ++res.steps;
      res.max_running = std::max(res.max_running, int(running.size()));
      running_time += running.size() * step_us;
      decode_time += step_us;
      std::vector<size_t> still;
      for (size_t i : running) {
        const long m = std::min<long>(draw_emitted(), requests[i].output_tokens - live[i].generated);
        live[i].generated += m;
        tokens += m;
        if (live[i].generated >= requests[i].output_tokens) {
          finish(i);
        } else {
          still.push_back(i);
        }
      }
      running.swap(still);
    } else if (admitted.empty()) {
      throw std::logic_error("serving simulation made no progress");  // every request fits alone
    }
    res.output_tokens += tokens;
    pending_tokens += tokens;
    pending_prefill += prefill_us;
    if (config.timeline_every_s <= 0 || t - last_row_s >= config.timeline_every_s || done == long(n)) {
      TimelineRow row;
      row.time_s = t;
      row.step_us = step_us;
      row.prefill_us = pending_prefill;
      row.running = int(running.size());
      row.waiting = int(waiting.size());
      row.tokens = pending_tokens;
      row.memory_bytes = memory;
      res.timeline.push_back(row);
      last_row_s = t;
      pending_tokens = 0;
      pending_prefill = 0;
    }
    if (progress && (res.steps & 255) == 0) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_report > std::chrono::seconds(1)) {
        progress(done, long(n), t);
        last_report = now;
      }
    }
  }

  res.requests = long(n);
  res.makespan_s = t - requests.front().arrival_s;
  res.throughput_tok_s = res.makespan_s > 0 ? res.output_tokens / res.makespan_s : 0;
  res.mean_running = decode_time > 0 ? running_time / decode_time : 0;
  if (res.steps > 0) {
    const double k = 1.0 / res.steps;
    StepTerms& m = res.mean_step;
    for (double* x : {&m.linear_attn_us, &m.attn_kv_us, &m.projections_us, &m.mlp_us, &m.lm_head_us,
                      &m.overhead_us, &m.comm_us})
      *x *= k;
  }
  std::vector<double> ttft, tpot, queue;
  for (size_t i = 0; i < n; ++i) {
    ttft.push_back(live[i].first_s - requests[i].arrival_s);
    queue.push_back(live[i].admit_s - requests[i].arrival_s);
    if (requests[i].output_tokens > 1)
      tpot.push_back((live[i].finish_s - live[i].first_s) / double(requests[i].output_tokens - 1));
  }
  res.ttft_s = percentiles(ttft);
  res.tpot_s = percentiles(tpot);
  res.queue_s = percentiles(queue);
  return res;
}

}  // namespace kvbuf
