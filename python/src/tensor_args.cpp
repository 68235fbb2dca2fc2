// Import and validation of the binding's arguments (tensor_args.h says what and in which order).
#include "python/src/tensor_args.h"

#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

namespace kvbuf::py {

// ---- DLPack structures beyond nanobind's dltensor (DLPack 1.x ABI, include/dlpack/dlpack.h) ----
using nb::dlpack::dltensor;
struct DLPackVersion {
  uint32_t major, minor;
};
struct DLManagedTensor {
  dltensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned*);
  uint64_t flags;
  dltensor dl_tensor;
};
struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  DLPackExchangeAPIHeader* prev_api;
};
// The C exchange table (DLPack 1.2/1.3): a framework fills a DLTensor for one of its Python
// objects without a Python call, allocates tensors and reports its current stream.
struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  int (*managed_tensor_allocator)(dltensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                                  void (*set_error)(void* error_ctx, const char* kind, const char* message));
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, DLManagedTensorVersioned** out);
  int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned* tensor, void** out_py_object);
  int (*dltensor_from_py_object_no_sync)(void* py_object, dltensor* out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
};

namespace {

constexpr int32_t kDLCPU = 1, kDLCUDA = 2;
enum class Kind { Exchange, TorchCapsule, Generic };

// PyTorch, looked up once a torch.Tensor (sub)class shows up without the exchange table.
struct TorchFns {
  PyObject* tensor_type = nullptr;   // torch.Tensor
  PyObject* to_dlpack = nullptr;     // torch._C._to_dlpack
  PyObject* raw_stream = nullptr;    // torch._C._cuda_getCurrentRawStream (device) -> int, or null
  PyObject* empty = nullptr;         // torch.empty
  PyObject* bfloat16 = nullptr;      // torch.bfloat16
  PyObject* device = nullptr;        // torch.device
  bool loaded = false;
};
TorchFns torch_fns;

PyObject* attr_or_null(PyObject* o, const char* name) {
  PyObject* r = PyObject_GetAttrString(o, name);
  if (!r) PyErr_Clear();
  return r;
}

// True where `tp` is torch.Tensor or a subclass (torch must be imported already: its tensors
// cannot exist otherwise).
bool is_torch_type(PyTypeObject* tp) {
  PyObject* modules = PySys_GetObject("modules");  // borrowed
  PyObject* torch = modules ? PyDict_GetItemString(modules, "torch") : nullptr;  // borrowed
  if (!torch) return false;
  if (!torch_fns.loaded) {
    torch_fns.loaded = true;
    torch_fns.tensor_type = attr_or_null(torch, "Tensor");
    if (PyObject* c = attr_or_null(torch, "_C")) {
      torch_fns.to_dlpack = attr_or_null(c, "_to_dlpack");
      torch_fns.raw_stream = attr_or_null(c, "_cuda_getCurrentRawStream");
      Py_DECREF(c);
    }
    torch_fns.empty = attr_or_null(torch, "empty");
    torch_fns.bfloat16 = attr_or_null(torch, "bfloat16");
    torch_fns.device = attr_or_null(torch, "device");
  }
  if (!torch_fns.tensor_type || !torch_fns.to_dlpack) return false;
  const int sub = PyObject_IsSubclass(reinterpret_cast<PyObject*>(tp), torch_fns.tensor_type);
  if (sub < 0) PyErr_Clear();
  return sub == 1;
}

// The exchange table a type offers, or null: `__dlpack_c_exchange_api__` (a capsule named
// "dlpack_exchange_api"), or the name it had before (a capsule or an int address), at DLPack 1.2+.
const DLPackExchangeAPI* exchange_api(PyTypeObject* tp) {
  PyObject* t = reinterpret_cast<PyObject*>(tp);
  for (const char* name : {"__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__"}) {
    PyObject* a = attr_or_null(t, name);
    if (!a) continue;
    void* p = nullptr;
    if (PyCapsule_CheckExact(a)) {
      p = PyCapsule_GetPointer(a, PyCapsule_GetName(a));
    } else if (PyLong_Check(a)) {
      p = PyLong_AsVoidPtr(a);
    }
    if (!p) PyErr_Clear();
    Py_DECREF(a);  // the table is static in its framework: it outlives the capsule
    auto* h = static_cast<const DLPackExchangeAPIHeader*>(p);
    while (h && h->version.major > 1) h = h->prev_api;
    if (h && h->version.major == 1 && h->version.minor >= 2) {
      auto* api = reinterpret_cast<const DLPackExchangeAPI*>(h);
      if (api->dltensor_from_py_object_no_sync || api->managed_tensor_from_py_object_no_sync) return api;
    }
  }
  return nullptr;
}

struct TypeInfo {
  PyTypeObject* type = nullptr;
  Kind kind = Kind::Generic;
  const DLPackExchangeAPI* api = nullptr;
};
TypeInfo type_cache[16];
int type_cache_n = 0;

TypeInfo classify(PyTypeObject* tp) {
  for (int i = 0; i < type_cache_n; ++i)
    if (type_cache[i].type == tp) return type_cache[i];
  TypeInfo info;
  info.type = tp;
  if ((info.api = exchange_api(tp)))
    info.kind = Kind::Exchange;
  else if (is_torch_type(tp))
    info.kind = Kind::TorchCapsule;
  if (type_cache_n < int(sizeof(type_cache) / sizeof(type_cache[0]))) {
    Py_INCREF(reinterpret_cast<PyObject*>(tp));  // a cached type is never freed (its address never reused)
    type_cache[type_cache_n++] = info;
  }
  return info;
}

DType map_dtype(uint8_t code, uint8_t bits, uint16_t lanes) {
  if (lanes != 1) return DType::Other;
  if (code == 2 && bits == 32) return DType::F32;
  if (code == 4 && bits == 16) return DType::BF16;
  if (code == 2 && bits == 16) return DType::F16;
  if (code == 0 && bits == 32) return DType::I32;
  if (code == 0 && bits == 64) return DType::I64;
  return DType::Other;
}

int element_bytes(DType d) {
  switch (d) {
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::I64: return 8;
    default: return 1;
  }
}

std::string dlpack_dtype_name(const Tensor& t) {
  if (t.dtype != DType::Other) return dtype_name(t.dtype);
  static const char* codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  return std::string(t.code < 7 ? codes[t.code] : "code" + std::to_string(t.code)) + std::to_string(t.bits);
}

std::string device_name(int32_t type, int32_t id) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(id);
    case 3: return "cuda_host (pinned host memory)";
    case 13: return "cuda_managed";
    default: return "DLPack device type " + std::to_string(type);
  }
}

std::string shape_string(const int64_t* shape, int ndim) {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (ndim == 1 ? ",)" : ")");
}

const char* dim_name(Dim d) {
  static const char* names[kDims] = {"B", "T", "H", "HV", "K", "V", "G", "NH", "P", "N", "slots", "C", "2", "F"};
  return names[d];
}

void fill(Tensor& t, const dltensor& d, const char* fn, const char* name) {
  if (d.ndim < 0 || d.ndim > kMaxNdim)
    throw nb::value_error((std::string(fn) + ": " + name + " has " + std::to_string(d.ndim) + " dimensions").c_str());
  t.name = name;
  t.data = static_cast<char*>(d.data) + d.byte_offset;
  t.ndim = d.ndim;
  t.code = d.dtype.code;
  t.bits = d.dtype.bits;
  t.dtype = map_dtype(d.dtype.code, d.dtype.bits, d.dtype.lanes);
  t.device_type = d.device.device_type;
  t.device_id = d.device.device_id;
  int64_t compact = 1;
  for (int i = d.ndim - 1; i >= 0; --i) {
    t.shape[i] = d.shape[i];
    t.strides[i] = d.strides ? d.strides[i] : compact;
    compact *= d.shape[i];
  }
}

}  // namespace

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    default: return "another dtype";
  }
}

Args::Args(const char* fn, const char* const* names, const nb::handle* values, int count)
    : fn_(fn), names_(names), values_(values), count_(count) {
  for (int d = 0; d < kDims; ++d) dims_[d] = -1, bound_by_[d] = nullptr;
  dims_[Two] = 2;
  bound_by_[Two] = "the layout";
}

Args::~Args() {
  for (int i = 0; i < nheld_; ++i) {
    if (held_[i].kind == 1) {
      auto* m = static_cast<DLManagedTensorVersioned*>(held_[i].ptr);
      if (m->deleter) m->deleter(m);
    } else if (held_[i].kind == 2) {
      Py_DECREF(static_cast<PyObject*>(held_[i].ptr));
    }
  }
  if (restore_device_ >= 0) cudaSetDevice(restore_device_);
}

nb::handle Args::arg(const char* name) const {
  // The bindings ask in signature order: start after the last match.
  for (int i = 0; i < count_; ++i) {
    const int j = (cursor_ + i) % count_;
    if (std::strcmp(names_[j], name) == 0) {
      const_cast<Args*>(this)->cursor_ = (j + 1) % count_;
      return values_[j];
    }
  }
  throw std::logic_error(std::string(fn_) + ": binding asks for an argument it does not declare: " + name);
}

void Args::require(bool ok, const std::string& what) const {
  if (!ok) throw nb::value_error((std::string(fn_) + ": " + what).c_str());
}

void Args::import(nb::handle obj, const char* name, Tensor& t) {
  const TypeInfo info = classify(Py_TYPE(obj.ptr()));
  if (nheld_ >= kMaxTensors || narrays_ >= kMaxTensors) throw std::logic_error("kvbuf: too many tensor arguments");
  switch (info.kind) {
    case Kind::Exchange: {
      const DLPackExchangeAPI* api = info.api;
      if (api->dltensor_from_py_object_no_sync) {
        dltensor d;
        if (api->dltensor_from_py_object_no_sync(obj.ptr(), &d) != 0) throw nb::python_error();
        fill(t, d, fn_, name);
      } else {
        DLManagedTensorVersioned* m = nullptr;
        if (api->managed_tensor_from_py_object_no_sync(obj.ptr(), &m) != 0) throw nb::python_error();
        held_[nheld_++] = {1, m};
        fill(t, m->dl_tensor, fn_, name);
      }
      if (!api_) api_ = api;
      return;
    }
    case Kind::TorchCapsule: {
      PyObject* cap = PyObject_CallFunctionObjArgs(torch_fns.to_dlpack, obj.ptr(), nullptr);
      if (!cap) throw nb::python_error();
      held_[nheld_++] = {2, cap};  // the capsule's destructor frees the DLManagedTensor
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (!m) throw nb::python_error();
      fill(t, m->dl_tensor, fn_, name);
      torch_ = true;
      return;
    }
    case Kind::Generic: {
      nb::ndarray<> a;
      if (!nb::try_cast(obj, a, false)) {
        PyErr_Clear();
        throw nb::type_error((std::string(fn_) + ": " + name +
                              " must be a tensor or array (__dlpack__ or the buffer protocol), got " +
                              nb::type_name(obj.type()).c_str())
                                 .c_str());
      }
      dltensor d;
      d.data = a.data_handle();
      d.byte_offset = a.byte_offset();
      d.ndim = int32_t(a.ndim());
      d.dtype = a.dtype();
      d.device = {int32_t(a.device_type()), int32_t(a.device_id())};
      d.shape = const_cast<int64_t*>(a.shape_ptr());
      d.strides = const_cast<int64_t*>(a.stride_ptr());
      fill(t, d, fn_, name);
      arrays_[narrays_++] = std::move(a);
      return;
    }
  }
}

Tensor Args::tensor(const char* name, unsigned dtypes, std::initializer_list<Dim> dims, bool required, bool t1_axis) {
  const nb::handle obj = arg(name);
  if (obj.is_none()) {
    if (required) throw nb::type_error((std::string(fn_) + ": missing required argument '" + name + "'").c_str());
    return Tensor{};
  }
  if (nseen_ >= kMaxTensors) throw std::logic_error("kvbuf: too many tensor arguments");
  Tensor& t = seen_[nseen_++];
  import(obj, name, t);
  if (!(dtypes & bit(t.dtype))) {
    std::string want;
    for (DType d : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64})
      if (dtypes & bit(d)) want += std::string(want.empty() ? "" : " or ") + dtype_name(d);
    throw nb::type_error((std::string(fn_) + ": " + name + " must be " + want + ", got " + dlpack_dtype_name(t)).c_str());
  }
  check_shape(t, dims, t1_axis);
  // C-contiguous: every dimension of more than one element at its row-major stride.
  int64_t expect = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expect)
      throw nb::value_error((std::string(fn_) + ": " + name + " must be C-contiguous (shape " +
                             shape_string(t.shape, t.ndim) + ", strides " + shape_string(t.strides, t.ndim) +
                             " in elements); pass a contiguous copy")
                                .c_str());
    expect *= t.shape[i];
  }
  const int align = (t.dtype == DType::I32 || t.dtype == DType::I64) ? element_bytes(t.dtype) : 16;
  if (expect > 0 && reinterpret_cast<uintptr_t>(t.data) % align != 0)
    throw nb::value_error((std::string(fn_) + ": " + name + "'s data must be " + std::to_string(align) +
                           "-byte aligned (the kernels load it in vectors); a view at an offset is not")
                              .c_str());
  return t;
}

void Args::check_shape(Tensor& t, std::initializer_list<Dim> dims, bool t1_axis) {
  const int n = int(dims.size());
  const bool t1 = t1_axis && t.ndim == n + 1 && n >= 1 && t.shape[1] == 1;
  if (t.ndim != n && !t1) shape_error(t, dims, t1_axis, -1);
  if (t1) t1_form_ = true;
  int i = 0;
  for (Dim d : dims) {
    const int64_t x = t.shape[(t1 && i >= 1) ? i + 1 : i];
    if (dims_[d] < 0) {
      dims_[d] = x;
      bound_by_[d] = t.name;
    } else if (dims_[d] != x) {
      shape_error(t, dims, t1_axis, i);
    }
    ++i;
  }
}

void Args::shape_error(const Tensor& t, std::initializer_list<Dim> dims, bool t1_axis, int bad) const {
  std::string want = "(";
  int i = 0;
  for (Dim d : dims) {
    want += std::string(i ? ", " : "") + dim_name(d);
    if (i == 0 && t1_axis) want += ", [1]";
    ++i;
  }
  want += ")";
  std::string msg = std::string(fn_) + ": " + t.name + " has shape " + shape_string(t.shape, t.ndim) + ", expected " + want;
  if (bad < 0) {
    msg += " (" + std::to_string(dims.size()) + " dimensions" + (t1_axis ? ", or a singleton token axis after the row" : "") + ")";
  } else {
    const Dim d = *(dims.begin() + bad);
    msg += ": " + std::string(dim_name(d)) + " = " + std::to_string(dims_[d]) + " from " + bound_by_[d];
  }
  throw nb::value_error(msg.c_str());
}

void Args::same_dtype(const Tensor& t, const Tensor& like) {
  if (t && like && t.dtype != like.dtype)
    throw nb::type_error((std::string(fn_) + ": " + t.name + " is " + dtype_name(t.dtype) + " but " + like.name + " is " +
                          dtype_name(like.dtype) + "; they must match")
                             .c_str());
}

long Args::integer(const char* name, long dflt) {
  const nb::handle o = arg(name);
  if (o.is_none()) return dflt;
  if (!PyLong_Check(o.ptr()) || PyBool_Check(o.ptr()))
    throw nb::type_error((std::string(fn_) + ": " + name + " must be an int").c_str());
  const long v = PyLong_AsLong(o.ptr());
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  return v;
}

bool Args::boolean(const char* name, bool dflt) {
  const nb::handle o = arg(name);
  if (o.is_none()) return dflt;
  if (!PyBool_Check(o.ptr())) throw nb::type_error((std::string(fn_) + ": " + name + " must be a bool").c_str());
  return o.ptr() == Py_True;
}

std::string Args::choice(const char* name, const char* dflt, std::initializer_list<const char*> allowed) {
  const nb::handle o = arg(name);
  std::string v = dflt;
  if (!o.is_none()) {
    if (!PyUnicode_Check(o.ptr())) throw nb::type_error((std::string(fn_) + ": " + name + " must be a str").c_str());
    v = nb::cast<std::string>(o);
  }
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return v;
    list += std::string(list.empty() ? "" : ", ") + "'" + a + "'";
  }
  throw nb::value_error((std::string(fn_) + ": " + name + " must be one of " + list + ", got '" + v + "'").c_str());
}

namespace {
cudaStream_t stream_from_object(const char* fn, nb::handle o) {
  PyObject* p = o.ptr();
  auto as_handle = [&](PyObject* x) -> cudaStream_t {
    if (!PyLong_Check(x) || PyBool_Check(x)) return reinterpret_cast<cudaStream_t>(-1);
    const unsigned long long v = PyLong_AsUnsignedLongLong(x);
    if (PyErr_Occurred()) throw nb::python_error();
    return reinterpret_cast<cudaStream_t>(uintptr_t(v));
  };
  const cudaStream_t bad = reinterpret_cast<cudaStream_t>(-1);
  cudaStream_t s = as_handle(p);
  if (s != bad) return s;
  // CUDA Python's protocol (cuda.core streams, recent PyTorch and CuPy): (version, handle).
  if (PyObject* m = attr_or_null(p, "__cuda_stream__")) {
    PyObject* r = PyObject_CallFunctionObjArgs(m, nullptr);
    Py_DECREF(m);
    if (!r) throw nb::python_error();
    if (PyTuple_Check(r) && PyTuple_Size(r) == 2) s = as_handle(PyTuple_GetItem(r, 1));
    Py_DECREF(r);
    if (s != bad) return s;
  }
  for (const char* name : {"cuda_stream", "ptr"}) {  // torch.cuda.Stream, cupy.cuda.Stream
    if (PyObject* h = attr_or_null(p, name)) {
      s = as_handle(h);
      Py_DECREF(h);
      if (s != bad) return s;
    }
  }
  throw nb::type_error((std::string(fn) + ": stream must be an int (a cudaStream_t) or a stream object "
                                          "(torch.cuda.Stream, cupy.cuda.Stream, __cuda_stream__)")
                           .c_str());
}
}  // namespace

void Args::finish() {
  // Device: every tensor on the same CUDA device.
  const Tensor* first = nullptr;
  for (int i = 0; i < nseen_; ++i) {
    const Tensor& t = seen_[i];
    if (t.device_type != kDLCUDA)
      throw nb::value_error((std::string(fn_) + ": " + t.name + " is on " + device_name(t.device_type, t.device_id) +
                             "; kvbuf's kernels take CUDA tensors (DLPack device kDLCUDA)")
                                .c_str());
    if (!first) first = &t;
    if (t.device_id != first->device_id)
      throw nb::value_error((std::string(fn_) + ": " + t.name + " is on " + device_name(t.device_type, t.device_id) +
                             " but " + first->name + " on " + device_name(first->device_type, first->device_id) +
                             "; all tensors of a call must be on one device")
                                .c_str());
  }
  if (!first) throw nb::value_error((std::string(fn_) + ": no tensor arguments").c_str());
  device_ = first->device_id;
  // Stream: the argument is read before any CUDA call (a bad one is a TypeError like the others).
  const nb::handle s = arg("stream");
  const bool given = !s.is_none();
  if (given) stream_ = stream_from_object(fn_, s);
  int cur = -1;
  cudaError_t e = cudaGetDevice(&cur);
  if (e != cudaSuccess) throw std::runtime_error(std::string(fn_) + ": cudaGetDevice: " + cudaGetErrorString(e));
  if (cur != device_) {
    if ((e = cudaSetDevice(device_)) != cudaSuccess)
      throw std::runtime_error(std::string(fn_) + ": cudaSetDevice: " + cudaGetErrorString(e));
    restore_device_ = cur;
  }
  if (given) {
    // the caller's stream, read above
  } else if (api_ && api_->current_work_stream) {
    void* st = nullptr;
    if (api_->current_work_stream(kDLCUDA, device_, &st) != 0) throw nb::python_error();
    stream_ = static_cast<cudaStream_t>(st);
  } else if (torch_ && torch_fns.raw_stream) {
    PyObject* dev = PyLong_FromLong(device_);
    PyObject* r = PyObject_CallFunctionObjArgs(torch_fns.raw_stream, dev, nullptr);
    Py_DECREF(dev);
    if (!r) throw nb::python_error();
    stream_ = reinterpret_cast<cudaStream_t>(uintptr_t(PyLong_AsUnsignedLongLong(r)));
    Py_DECREF(r);
    if (PyErr_Occurred()) throw nb::python_error();
  } else {
    stream_ = nullptr;  // the legacy default stream
  }
  if (out_name_) allocate_output();
}

const Tensor& Args::output(const char* name, std::initializer_list<Dim> dims, bool t1_axis) {
  const nb::handle given = arg(name);
  if (!given.is_none()) {
    out_ = tensor(name, kBf16, dims, true, t1_axis);
    result_ = nb::borrow(given);
    return out_;
  }
  out_name_ = name;
  out_ndim_ = 0;
  for (Dim d : dims) out_dims_[out_ndim_++] = d;
  out_t1_ = t1_axis;
  return out_;
}

void Args::allocate_output() {
  const char* name = out_name_;
  int64_t shape[kMaxNdim + 1];
  int n = 0;
  for (int i = 0; i < out_ndim_; ++i) {
    shape[n++] = dims_[out_dims_[i]];
    if (i == 0 && out_t1_ && t1_form_) shape[n++] = 1;
  }
  if (api_ && api_->managed_tensor_allocator && api_->managed_tensor_to_py_object_no_sync) {
    dltensor proto;
    proto.data = nullptr;
    proto.device = {kDLCUDA, device_};
    proto.ndim = n;
    proto.dtype = {4, 16, 1};  // bfloat16
    proto.shape = shape;
    proto.strides = nullptr;
    proto.byte_offset = 0;
    DLManagedTensorVersioned* m = nullptr;
    std::string err;
    const int rc = api_->managed_tensor_allocator(&proto, &m, &err, [](void* ctx, const char* kind, const char* msg) {
      *static_cast<std::string*>(ctx) = std::string(kind ? kind : "error") + ": " + (msg ? msg : "");
    });
    if (rc != 0 || !m) {
      if (PyErr_Occurred()) throw nb::python_error();
      throw std::runtime_error(std::string(fn_) + ": allocating " + name + " failed: " + err);
    }
    void* obj = nullptr;
    if (api_->managed_tensor_to_py_object_no_sync(m, &obj) != 0) throw nb::python_error();
    result_ = nb::steal(static_cast<PyObject*>(obj));
  } else if (torch_ && torch_fns.empty && torch_fns.bfloat16 && torch_fns.device) {
    nb::list sizes;
    for (int j = 0; j < n; ++j) sizes.append(shape[j]);
    nb::object dev = nb::borrow(torch_fns.device)("cuda", device_);
    result_ = nb::borrow(torch_fns.empty)(nb::tuple(sizes), nb::arg("dtype") = nb::borrow(torch_fns.bfloat16),
                                          nb::arg("device") = dev);
  } else {
    throw nb::value_error((std::string(fn_) + ": " + name +
                           " is required for arrays other than PyTorch tensors (pass a preallocated bfloat16 array)")
                              .c_str());
  }
  if (nheld_ >= kMaxTensors) throw std::logic_error("kvbuf: too many tensor arguments");
  import(result_, name, out_);
  if (out_.device_type != kDLCUDA || out_.device_id != device_)
    throw std::runtime_error(std::string(fn_) + ": the allocated " + name + " is not on the inputs' device");
}

}  // namespace kvbuf::py
