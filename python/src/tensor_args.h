// The binding's view of its tensor arguments: import (DLPack, zero copy), validation before any
// launch, the stream and the device, and the output allocation. Every kernel binding
// (gdn_bindings.cpp, mamba2_bindings.cpp) goes through one Args object per call.
//
// Import, fastest first (one type lookup per argument type, cached):
//  1. DLPack's C exchange API (`type(x).__dlpack_c_exchange_api__`, a capsule holding a
//     DLPackExchangeAPI; PyTorch >= 2.10 and tvm-ffi's addons provide it): the framework fills a
//     DLTensor on our stack, no Python call, no allocation (about 50 ns per tensor);
//  2. a PyTorch tensor of a torch without it: `torch._C._to_dlpack(x)`, one capsule per tensor;
//  3. anything else with `__dlpack__` or the buffer protocol (CuPy, JAX, NumPy on the CPU):
//     nanobind's ndarray import.
// Validation raises TypeError (a missing argument, a wrong dtype or argument type) or ValueError
// (shape, layout, alignment, device), naming the function, the argument and what was expected;
// every check runs before the first CUDA call, and the device check last (CPU tests reach the
// dtype, shape and layout checks with NumPy arrays).
#pragma once
#include <cuda_runtime.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace kvbuf::py {
namespace nb = nanobind;

enum class DType : uint8_t { F32, BF16, F16, I32, I64, Other };
constexpr unsigned bit(DType d) { return 1u << unsigned(d); }
constexpr unsigned kFloat = bit(DType::F32), kBf16 = bit(DType::BF16), kInt32 = bit(DType::I32);
constexpr unsigned kStateTypes = bit(DType::F32) | bit(DType::BF16) | bit(DType::F16);
const char* dtype_name(DType d);

// The named dimensions of the kernels' layouts (sim/layout.h): shapes are lists of these.
enum Dim : uint8_t {
  B,      // request rows of the step
  T,      // tokens per row (verify)
  H, HV,  // GDN key heads, value heads
  K, V,   // GDN head dims
  G, NH,  // Mamba-2 groups, heads
  P, N,   // Mamba-2 head dim, d_state
  S,      // pool slots
  C,      // buffer capacity
  Two,    // a literal 2 (win_base [B, 2], the split path's scratch [B, HV, 2, V])
  Rec,    // floats of the GDN KVBuffer verify's coefficient record (its split path's coef [B, HV, Rec])
  kDims
};

constexpr int kMaxNdim = 6;

// One tensor argument after import: valid until the call returns.
struct Tensor {
  const char* name = nullptr;  // null: the argument was None
  char* data = nullptr;        // first element (byte offset applied)
  int ndim = 0;
  int64_t shape[kMaxNdim] = {};
  int64_t strides[kMaxNdim] = {};  // in elements
  DType dtype = DType::Other;
  uint8_t code = 0, bits = 0;  // DLPack's dtype code and bits, for messages
  int32_t device_type = 0, device_id = 0;
  explicit operator bool() const { return name != nullptr; }
  template <class X>
  X* ptr() const { return reinterpret_cast<X*>(data); }
};

struct DLPackExchangeAPI;  // tensor_args.cpp

// One binding call: its arguments by name (in the order of the function's signature), imports,
// checks, stream, device and output. Not copyable; lives on the stack of the call.
class Args {
 public:
  // fn: the function's name (messages); names/values: the keyword arguments as nanobind passed them.
  Args(const char* fn, const char* const* names, const nb::handle* values, int count);
  ~Args();
  Args(const Args&) = delete;
  Args& operator=(const Args&) = delete;

  const char* fn() const { return fn_; }

  // A tensor argument: imported, its dtype in `dtypes` (a mask of bit(DType)), its shape `dims`
  // (each bound on first sight, compared after), C-contiguous and aligned to its element (16 bytes
  // for floating tensors, which the kernels read in vectors). t1_axis: a decode token tensor may
  // also come as FLA's [B, 1, ...] (a singleton token axis after the row). Absent (None): an empty
  // Tensor, or TypeError when required.
  Tensor tensor(const char* name, unsigned dtypes, std::initializer_list<Dim> dims, bool required = true,
                bool t1_axis = false);
  // That `t` has the dtype of `like` (the state pools, the entries of one buffer).
  void same_dtype(const Tensor& t, const Tensor& like);
  // Scalar arguments (None: the default).
  long integer(const char* name, long dflt);
  bool boolean(const char* name, bool dflt);
  std::string choice(const char* name, const char* dflt, std::initializer_list<const char*> allowed);
  // That exactly the given tensors of a group are present (e.g. both of g and beta), else ValueError.
  void require(bool ok, const std::string& what) const;

  // After every tensor: all on one CUDA device (ValueError otherwise); makes it current for the
  // call (restored after) and resolves the stream: the `stream` argument (an int handle, or an
  // object with __cuda_stream__, .cuda_stream or .ptr), else the current stream of the tensors'
  // framework (PyTorch: torch.cuda.current_stream() of that device), else the legacy default
  // stream 0.
  void finish();
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  int64_t dim(Dim d) const { return dims_[d]; }

  // The output argument `name` (call before finish()): the given tensor, checked like tensor(), or,
  // when None, a new one of shape `dims` (bf16, C-contiguous, on the inputs' device, in the
  // [B, 1, ...] form where the inputs came so) that finish() allocates through the inputs'
  // framework (PyTorch); for other arrays out is required. The reference is valid after finish().
  const Tensor& output(const char* name, std::initializer_list<Dim> dims, bool t1_axis = false);
  nb::object result() const { return result_; }
  // Whether the decode token inputs came as [B, 1, ...] (the output then takes the same form).
  bool t1_form() const { return t1_form_; }

 private:
  nb::handle arg(const char* name) const;
  void allocate_output();
  void import(nb::handle obj, const char* name, Tensor& t);
  void check_shape(Tensor& t, std::initializer_list<Dim> dims, bool t1_axis);
  [[noreturn]] void shape_error(const Tensor& t, std::initializer_list<Dim> dims, bool t1_axis, int bad) const;

  const char* fn_;
  const char* const* names_;
  const nb::handle* values_;
  int count_;
  int64_t dims_[kDims];
  const char* bound_by_[kDims];
  static constexpr int kMaxTensors = 32;
  Tensor seen_[kMaxTensors];  // the tensors imported so far (the device check)
  int nseen_ = 0;
  int cursor_ = 0;  // where the last argument lookup matched (the bindings ask in signature order)
  // What the imports hold until the call returns.
  struct Held {
    int kind = 0;  // 1 versioned managed tensor, 2 Python object (capsule, ndarray handle)
    void* ptr = nullptr;
  };
  Held held_[kMaxTensors];
  int nheld_ = 0;
  nb::ndarray<> arrays_[kMaxTensors];
  int narrays_ = 0;
  const DLPackExchangeAPI* api_ = nullptr;  // of the first tensor imported through one
  bool torch_ = false;                      // a PyTorch tensor came through the capsule path
  bool t1_form_ = false;
  int device_ = -1;
  int restore_device_ = -1;
  cudaStream_t stream_ = nullptr;
  nb::object result_;
  Tensor out_;
  const char* out_name_ = nullptr;  // an output finish() allocates
  Dim out_dims_[kMaxNdim];
  int out_ndim_ = 0;
  bool out_t1_ = false;
};

}  // namespace kvbuf::py
