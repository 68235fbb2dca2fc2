// kvbuf._C: every kernel of bindings.h as a keyword-only function, and _time_launches, the C++ side
// of the binding's overhead measurement (scripts/py_overhead.py).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/gdn/gdn_launch_shape.h"  // verify_coef_floats
#include "kernels/gdn/gdn_verify.h"        // kGdnVerifyMaxTokens
#include "python/src/bindings.h"

namespace kvbuf::py {
namespace {

template <size_t>
using Handle = nb::handle;

// A Python signature for the docs: required arguments without a default.
const char* signature(const KernelBinding& k) {
  static std::deque<std::string> keep;
  std::string s = std::string("def ") + k.name + "(*";
  for (const Param& p : k.params) s += std::string(", ") + p.name + (p.required ? "" : "=None");
  keep.push_back(s + ") -> typing.Any");
  return keep.back().c_str();
}

nb::object call(const KernelBinding& k, const char* const* names, const nb::handle* values) {
  Args a(k.name, names, values, int(k.params.size()));
  const Launch run = k.prepare(a);
  run(a.stream());
  nb::object r = a.result();
  return r.is_valid() ? r : nb::none();
}

template <size_t N, size_t... I>
void def_n(nb::module_& m, const KernelBinding& k, std::index_sequence<I...>) {
  // The names live as long as the binding (k is a copy kept by the lambda).
  struct Bound {
    KernelBinding k;
    std::array<const char*, N> names;
  };
  auto b = std::make_shared<Bound>(Bound{k, {k.params[I].name...}});
  m.def(
      k.name,
      [b](Handle<I>... h) -> nb::object {
        const nb::handle values[N] = {h...};
        return call(b->k, b->names.data(), values);
      },
      nb::kw_only(), (nb::arg(k.params[I].name) = nb::none())..., nb::sig(signature(k)), k.doc);
}

using DefFn = void (*)(nb::module_&, const KernelBinding&);
template <size_t N>
void def_sized(nb::module_& m, const KernelBinding& k) {
  def_n<N>(m, k, std::make_index_sequence<N>{});
}
template <size_t... N>
constexpr std::array<DefFn, sizeof...(N)> def_table(std::index_sequence<N...>) {
  return {&def_sized<N + 1>...};
}
constexpr size_t kMaxParams = 32;
constexpr auto kDefTable = def_table(std::make_index_sequence<kMaxParams>{});

std::vector<KernelBinding>& registry() {
  static std::vector<KernelBinding> all;
  return all;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("_time_launches: ") + what + ": " + cudaGetErrorString(e));
}

// The C++ side of the overhead measurement: the kernel `name` with the arguments `kwargs` (those of
// kvbuf._C.<name>), launched n times in a row from C++ on the resolved stream, `reps` times:
// host_us (per launch, the loop's host time: what a launch costs the CPU), wall_us (per launch,
// the loop and the synchronisation after it); with graph=True also graph_us, the launches captured
// into one CUDA graph and replayed (per launch, from CUDA events). Medians over the reps.
nb::dict time_launches(const std::string& name, int n, int reps, bool graph, nb::dict kwargs) {
  const KernelBinding* k = nullptr;
  for (const KernelBinding& x : registry())
    if (name == x.name) k = &x;
  if (!k) throw nb::value_error(("_time_launches: unknown kernel '" + name + "'").c_str());
  if (n < 1 || reps < 1) throw nb::value_error("_time_launches: n and reps must be >= 1");
  const size_t np = k->params.size();
  std::vector<const char*> names(np);
  std::vector<nb::handle> values(np, nb::none());
  for (size_t i = 0; i < np; ++i) names[i] = k->params[i].name;
  for (auto [key, value] : kwargs) {
    const std::string kname = nb::cast<std::string>(key);
    size_t i = 0;
    while (i < np && kname != names[i]) ++i;
    if (i == np) throw nb::type_error(("_time_launches: " + name + " takes no argument '" + kname + "'").c_str());
    values[i] = value;
  }
  Args a(k->name, names.data(), values.data(), int(np));
  const Launch run = k->prepare(a);
  const cudaStream_t s = a.stream();
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (int i = 0; i < 3; ++i) run(s);  // warm: first-launch costs (module loading, attributes)
  check_cuda(cudaStreamSynchronize(s), "synchronize");
  std::vector<double> host, wall;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) run(s);
    const auto t1 = std::chrono::steady_clock::now();
    check_cuda(cudaStreamSynchronize(s), "synchronize");
    const auto t2 = std::chrono::steady_clock::now();
    host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
    wall.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count() / n);
  }
  nb::dict out;
  out["host_us"] = median(host);
  out["wall_us"] = median(wall);
  if (graph) {
    cudaStream_t cs;
    check_cuda(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "stream");
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    cudaEvent_t e0, e1;
    check_cuda(cudaEventCreate(&e0), "event");
    check_cuda(cudaEventCreate(&e1), "event");
    check_cuda(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal), "begin capture");
    for (int i = 0; i < n; ++i) run(cs);
    check_cuda(cudaStreamEndCapture(cs, &g), "end capture");
    check_cuda(cudaGraphInstantiate(&ge, g, 0), "instantiate");
    check_cuda(cudaGraphLaunch(ge, cs), "replay");
    check_cuda(cudaStreamSynchronize(cs), "synchronize");
    std::vector<double> per;
    for (int r = 0; r < reps; ++r) {
      check_cuda(cudaEventRecord(e0, cs), "record");
      check_cuda(cudaGraphLaunch(ge, cs), "replay");
      check_cuda(cudaEventRecord(e1, cs), "record");
      check_cuda(cudaEventSynchronize(e1), "synchronize");
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      per.push_back(ms * 1e3 / n);
    }
    out["graph_us"] = median(per);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(cs);
  }
  return out;
}

}  // namespace
}  // namespace kvbuf::py

NB_MODULE(_C, m) {
  using namespace kvbuf::py;
  m.doc() = "kvbuf's CUDA kernels (GDN and Mamba-2 decode and speculative verify) on DLPack tensors";
  auto& all = registry();
  for (auto&& family : {gdn_bindings(), mamba2_bindings()})
    for (const KernelBinding& k : family) all.push_back(k);
  for (const KernelBinding& k : all) {
    if (k.params.empty() || k.params.size() > kMaxParams || std::string(k.params.back().name) != "stream")
      throw std::logic_error(std::string("kvbuf: bad binding table entry ") + k.name);
    kDefTable[k.params.size() - 1](m, k);
  }
  m.def(
      "gdn_verify_coef_shape",
      [](int batch, int value_heads, int tokens, int capacity) {
        if (batch < 0 || value_heads < 1 || tokens < 1 || tokens > kvbuf::kGdnVerifyMaxTokens || capacity < tokens ||
            capacity > 64)
          throw nb::value_error(("gdn_verify_coef_shape: needs batch >= 0, value_heads >= 1, 1 <= tokens <= " +
                                 std::to_string(kvbuf::kGdnVerifyMaxTokens) + ", tokens <= capacity <= 64")
                                    .c_str());
        return nb::make_tuple(batch, value_heads, kvbuf::gdn_verify_detail::verify_coef_floats(tokens, capacity));
      },
      nb::arg("batch"), nb::arg("value_heads"), nb::arg("tokens"), nb::arg("capacity"),
      "The shape of gdn_verify_kvbuffer's coef workspace (float32) for B rows, HV value heads, T tokens "
      "and capacity C: (B, HV, F).");
  m.def("_time_launches", &time_launches, nb::arg("name"), nb::arg("n"), nb::arg("reps"), nb::arg("graph"),
        nb::arg("kwargs"),
        "The kernel `name` with `kwargs` launched n times from C++, reps times: medians of host_us and "
        "wall_us per launch (and graph_us, replayed from a CUDA graph, with graph=True).");
  m.attr("cuda_architectures") = KVBUF_CUDA_ARCHITECTURES;
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  m.attr("cuda_runtime_version") = runtime;
}
