// The kernel bindings' registry: each kernel is one keyword-only Python function whose arguments
// are listed once (name, required or not); its prepare function reads them through Args (imports
// and checks them, resolves device and stream, allocates the output) and returns the launch.
// module.cpp turns each entry into kvbuf._C.<name> and into a case of _time_launches.
#pragma once
#include <functional>
#include <vector>

#include "python/src/tensor_args.h"

namespace kvbuf::py {

using Launch = std::function<void(cudaStream_t)>;
using Prepare = Launch (*)(Args&);

struct Param {
  const char* name;
  bool required;
};

struct KernelBinding {
  const char* name;
  std::vector<Param> params;  // keyword arguments in signature order; every function ends with `stream`
  Prepare prepare;
  const char* doc;
};

// Each family's bindings (gdn_bindings.cpp, mamba2_bindings.cpp).
std::vector<KernelBinding> gdn_bindings();
std::vector<KernelBinding> mamba2_bindings();

}  // namespace kvbuf::py
