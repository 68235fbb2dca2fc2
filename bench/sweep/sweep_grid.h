// The grid of `kvbuf sweep`, in plain C++ (CPU builds too): named axes expanded into points, each
// point's row columns (what the GPU driver bench/sweep/sweep_run.cu writes next to the measured ones),
// the deterministic shard split, and the resume scan of an existing CSV (the keys of its finished
// rows; a torn last line dropped). `kvbuf sweep --dry-run` prints the points without a GPU.
//
// Context length (tokens a request holds before the step) is an axis; 0 is the steady state of a
// long decode: buffered requests with fills staggered over the flush cycle, direct-mode requests at
// fills 0..C-1 (the rows the sweep wrote before the axis existed). A context L > 0 runs every
// request of a buffered kernel in direct mode (no state, L entries read, fill not advanced) while
// L <= C - 2, so that the step itself does not fold; longer contexts run buffered (the same
// measurement as the steady state); the direct kernels cannot hold them (a row with the reason).
// Verify points are steady state (context 0) only.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "bench/sweep/sweep_kernels.h"
#include "sim/catalog.h"

namespace kvbuf {

// Largest draft count T of the verify kernels (kGdnVerifyMaxTokens of kernels/gdn/gdn_verify.h, which
// bench/sweep/sweep_run.cu checks against it at compile time).
constexpr int kSweepMaxDrafts = 8;

struct SweepAxes {
  std::vector<std::string> models{"qwen3-next-80b-a3b"};
  std::vector<std::string> kernels;  // empty: each model family's default_sweep_kernels
  std::vector<int> batches{1, 8, 32, 64, 128, 256, 512};
  std::vector<int> chunks{1, 2, 4, 8, 16, 32, 64};
  std::vector<int> contexts{0};
  std::vector<int> drafts{1, 2, 3, 4, 5, 8};  // verify
  std::vector<double> acceptances{0.7};       // verify
  std::vector<int> tps{1};
  // fp32, bf16, fp16, or kEngineStateDtype: each model's engine default (ModelSpec::engine_state),
  // resolved per model; a model whose default is already on the axis runs it once.
  std::vector<std::string> state_dtypes{"fp32"};
  std::vector<std::string> entry_dtypes;  // empty: each kernel's own entry type
  int layer_pools = 0;                    // 0: the model's linear layers
};

const std::vector<std::string>& default_sweep_kernels(LayerKind kind);

// The state dtype axis value that names each model's engine default (kvbuf models lists it).
inline constexpr const char* kEngineStateDtype = "engine";

// How the points are measured and where the rows go (not axes).
struct SweepSettings {
  std::string decode_csv = "results/decode.csv";
  std::string verify_csv = "results/verify.csv";
  int rows_per_block = 0;
  double budget_s = 0.5;    // sampling time per point
  double max_point_s = 20;  // points whose minimum sampling takes longer are rows saying so
  // Idle seconds before each timed point, so that the board cools between points: a long grid on
  // the H200 reaches its 700 W cap as it warms, and the rows timed under the cap say so in the note.
  double rest_s = 0;
  // Points whose rows in the CSV were timed with the SM clock held down run again (resume_csv).
  bool redo_clock_limited = false;
  uint64_t seed = 1;
  std::string commit;  // of the rows and the resume keys
};

// The main job's axes (`--preset paper`): both families, each at fp32 states and at its engine's
// default state dtype (Qwen3-Next: bf16; Nemotron-3 Nano's is fp32, measured once), about 12 minutes
// of one H200 at kPaperBudgetS per point.
SweepAxes paper_axes();
constexpr double kPaperBudgetS = 0.1;

struct SweepPoint {
  std::string model;  // catalog name
  int tp = 1;
  const SweepKernel* kernel = nullptr;
  int batch = 0;
  int chunk = 0;    // C; 0 for kernels without a buffer (recurrent, classic verify)
  int context = 0;  // tokens per request before the step; 0 = steady state
  int drafts = 0;   // verify T; 0 for decode
  double acceptance = 0;
  std::string state_dtype, entry_dtype;  // state resolved (fp32, bf16, fp16); entry "none" without a buffer
  std::string mode;  // recurrent, buffered, direct, verify-classic, verify-kvbuffer
  int layers = 0;    // layer pools per step
  int direct_fill = -1;  // >= 0: every request stateless at this fill, not advanced (a short context)
  std::string note;      // why the point cannot run; empty when it runs
  bool decode() const { return kernel->family == SweepFamily::Decode; }
  std::string label() const;  // one line for logs and --dry-run
};

// The product of the axes in run order (model, tp; decode: batch, kernel, C, context; verify:
// batch, T, kernel, C; the state dtypes in axis order around both), duplicates removed (a model's
// engine default equal to another value of the axis). Bad axis values (unknown model, a kernel that
// no model of the grid runs, an unknown state dtype, ...) throw std::invalid_argument; points that
// cannot run (a tp that does not divide the heads, T > C, a context beyond a direct kernel's
// buffer, no kernel for the entry dtype) are points with a note.
std::vector<SweepPoint> expand_grid(const SweepAxes& axes);

// Part `index` of `count` (0-based): every count-th point from the index-th, so that each part
// gets a share of every axis; the parts are disjoint and cover the grid.
std::vector<SweepPoint> shard_points(const std::vector<SweepPoint>& points, int index, int count);
// "i/n" as for --shard; throws std::invalid_argument unless 0 <= i < n.
std::pair<int, int> parse_shard(const std::string& text);

// Seconds of GPU a run of these points takes at `budget_s` per measured point: an estimate from
// the bytes model (a sample is whole flush cycles of every layer; at least 5 samples and 2 warm-up
// ones) plus setup per point; points with a note cost nothing.
double estimate_seconds(const std::vector<SweepPoint>& points, double budget_s, double rest_s = 0);

// The CSV columns: those the consumers read (scripts/, sim/step_model.cpp), then the grid's.
const std::vector<std::string>& decode_base_columns();
const std::vector<std::string>& verify_base_columns();
const std::vector<std::string>& decode_grid_columns();
const std::vector<std::string>& verify_grid_columns();
std::vector<std::string> decode_columns();  // base + grid
std::vector<std::string> verify_columns();
// The columns that identify a finished row (point and commit).
const std::vector<std::string>& decode_key_columns();
const std::vector<std::string>& verify_key_columns();

// The point's values of every column that does not come from the measurement (its coordinates,
// memory per request, the full-attention KV bytes, gpu and commit), by column name.
std::map<std::string, std::string> point_columns(const SweepPoint& p, const std::string& gpu,
                                                 const std::string& commit);
// The grid columns' values in decode_grid_columns() / verify_grid_columns() order.
std::vector<std::string> grid_fields(const SweepPoint& p);
// The point's row key (key columns joined), as resume_csv collects them.
std::string point_key(const SweepPoint& p, const std::string& commit);

struct CsvResume {
  std::set<std::string> finished;  // keys of the rows already written
  size_t rows = 0;
  bool dropped_torn_line = false;  // a last line without its newline (an interrupted write) cut off
  bool exists = false;             // the file had a header; append to it
};
// Reads an existing results CSV before a run appends to it: cuts off a torn last line, checks that
// the header is `columns` (std::invalid_argument otherwise: an older sweep's file, say) and collects
// the keys of its rows, except rows whose note starts with "failed:" and, with redo_clock_limited,
// rows whose note says the SM clock was held down (those points run again; readers take each point's
// fastest row). A missing or empty file gives an empty result.
CsvResume resume_csv(const std::string& path, const std::vector<std::string>& columns,
                     const std::vector<std::string>& key_columns, bool redo_clock_limited = false);

}  // namespace kvbuf
