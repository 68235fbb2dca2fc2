// The GPU driver of `kvbuf sweep` (run_sweep_on_gpu of bench/gpu_commands.h): the points of
// bench/sweep/sweep_grid.h that the CSVs do not hold yet (same parameters and commit), measured in grid
// order by the runners of bench/sweep/sweep.h, each row written and flushed as measured with the grid's
// columns appended; progress (points done of total, elapsed, ETA) on stderr. Decode points that
// differ only in context share one measurement (a recurrent step, or a buffered one at a context
// beyond the buffer, reads the same bytes at any context): it is timed once and written per context.
// With --rest-s the GPU idles that long before each timed point (SweepSettings::rest_s).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/csv.h"
#include "bench/gpu_commands.h"
#include "bench/sweep/sweep.h"
#include "kernels/gdn/gdn_verify.h"

namespace kvbuf {
namespace {

static_assert(kSweepMaxDrafts == kGdnVerifyMaxTokens, "the grid's T range is the verify kernels'");

// The base columns of a point that has no measurement: its own values, the measured ones empty.
std::vector<std::string> unmeasured_row(const SweepPoint& p, const std::string& gpu, const std::string& commit) {
  const auto c = point_columns(p, gpu, commit);
  std::vector<std::string> f;
  for (const std::string& name : p.decode() ? decode_base_columns() : verify_base_columns()) {
    const auto it = c.find(name);
    f.push_back(it == c.end() ? "" : it->second);
  }
  return f;
}

// One model at one tp: its runner arguments, decode points measured so far, the verify runner.
struct ModelGroup {
  SweepArgs args;
  std::vector<DecodePoint> decode_points;
  std::map<std::string, std::vector<std::string>> decode_rows;  // measurement key -> row
  std::unique_ptr<VerifyRunner> verify;
  bool decode_header = false;

  void finish() {
    if (!decode_points.empty()) print_decode_summary(args, decode_points);
    if (verify) verify->summary();
    verify.reset();
  }
};

std::string measurement_key(const SweepPoint& p) {
  return fmt::format("{}|{}|{}|{}|{}|{}", p.kernel->name, p.batch, p.chunk, p.mode, p.direct_fill, p.state_dtype);
}

// Idles before a timed point, the device's queue drained first so the rest is really idle.
void rest_before_point(double rest_s) {
  if (rest_s <= 0) return;
  KVB_CUDA_CHECK(cudaDeviceSynchronize());
  std::this_thread::sleep_for(std::chrono::duration<double>(rest_s));
}

}  // namespace

int run_sweep_on_gpu(const std::vector<SweepPoint>& points, const SweepSettings& st,
                     const std::function<void()>& on_device) {
  if (!gpu_present()) throw std::runtime_error("kvbuf sweep: no CUDA device answers");
  on_device();
  const std::string gpu = gpu_name();
  bool any_decode = false, any_verify = false;
  for (const SweepPoint& p : points) (p.decode() ? any_decode : any_verify) = true;
  CsvResume done_decode, done_verify;
  if (any_decode) done_decode = resume_csv(st.decode_csv, decode_columns(), decode_key_columns(), st.redo_clock_limited);
  if (any_verify) done_verify = resume_csv(st.verify_csv, verify_columns(), verify_key_columns(), st.redo_clock_limited);
  for (const auto& [path, r] : {std::pair{st.decode_csv, &done_decode}, std::pair{st.verify_csv, &done_verify}})
    if (r->dropped_torn_line) fmt::print(stderr, "kvbuf sweep: {}: dropped a torn last line (an interrupted write)\n", path);
  std::vector<const SweepPoint*> pending;
  for (const SweepPoint& p : points)
    if (!(p.decode() ? done_decode : done_verify).finished.count(point_key(p, st.commit))) pending.push_back(&p);
  fmt::print(stderr, "kvbuf sweep: {} points, {} already in the CSVs (commit {}), {} to run\n", points.size(),
             points.size() - pending.size(), st.commit, pending.size());
  if (pending.empty()) return 0;

  const double copy_gbps = measure_copy_gbps();
  fmt::print("measured copy bandwidth (read + write, cudaMemcpyAsync D2D 2 GiB): {:.0f} GB/s\n", copy_gbps);
  std::unique_ptr<CsvWriter> decode_csv, verify_csv;
  if (any_decode) decode_csv = std::make_unique<CsvWriter>(st.decode_csv, decode_columns(), done_decode.exists);
  if (any_verify) verify_csv = std::make_unique<CsvWriter>(st.verify_csv, verify_columns(), done_verify.exists);

  const auto start = std::chrono::steady_clock::now();
  int failed = 0;
  size_t done = 0;
  std::unique_ptr<ModelGroup> group;
  for (const SweepPoint* pp : pending) {
    const SweepPoint& p = *pp;
    CsvWriter& csv = p.decode() ? *decode_csv : *verify_csv;
    csv.set_row_suffix(grid_fields(p));
    if (!group || group->args.model.name != p.model || group->args.model.tp != p.tp) {
      if (group) group->finish();
      group = std::make_unique<ModelGroup>();
      SweepArgs& a = group->args;
      try {
        a.model = apply_tensor_parallel(find_model(p.model), p.tp);
      } catch (const std::invalid_argument&) {  // every point of this group is a row saying so
        a.model = find_model(p.model);
        a.model.tp = p.tp;
      }
      a.layers = p.layers, a.rows_per_block = st.rows_per_block, a.budget_s = st.budget_s;
      a.max_point_s = st.max_point_s, a.seed = st.seed, a.copy_gbps = copy_gbps, a.gpu = gpu, a.commit = st.commit;
      for (const SweepPoint* q : pending) {
        if (q->model != p.model || q->tp != p.tp) continue;
        auto add = [](auto& v, auto x) {
          if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
        };
        add(a.batches, q->batch);
        if (q->chunk > 0) add(a.chunks, q->chunk);
        if (!q->decode()) add(a.drafts, q->drafts);
        add(a.kernels, q->kernel);
      }
    }
    ModelGroup& g = *group;
    if (!p.note.empty()) {
      csv.row(unmeasured_row(p, gpu, st.commit));
    } else if (p.decode()) {
      if (!g.decode_header) print_decode_header(g.args), g.decode_header = true;
      const std::string key = measurement_key(p);
      auto it = g.decode_rows.find(key);
      if (it == g.decode_rows.end()) {
        rest_before_point(st.rest_s);
        bool point_failed = false;
        auto row = decode_row(g.args, *p.kernel, p.batch, p.chunk, p.direct_fill, parse_state_type(p.state_dtype),
                              g.decode_points, point_failed);
        failed += point_failed;
        it = g.decode_rows.emplace(key, std::move(row)).first;
      }
      csv.row(it->second);
    } else {
      const StateType state = parse_state_type(p.state_dtype);
      if (!g.verify || g.args.acceptance != p.acceptance || g.args.state != state) {
        if (g.verify) g.verify->summary();
        g.args.acceptance = p.acceptance, g.args.state = state;
        g.verify = std::make_unique<VerifyRunner>(g.args, g.decode_points);
      }
      rest_before_point(st.rest_s);
      failed += !g.verify->run_point(*p.kernel, p.batch, p.drafts, p.chunk, csv);
    }
    ++done;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta = elapsed / done * (pending.size() - done);
    fmt::print(stderr, "[{}/{}] {} | {:.0f} s elapsed, ETA {:.0f} s\n", done, pending.size(), p.label(), elapsed, eta);
    std::fflush(stderr);
    std::fflush(stdout);
  }
  if (group) group->finish();
  if (failed) throw std::runtime_error(std::to_string(failed) + " sweep points failed");
  return 0;
}

}  // namespace kvbuf
