#include "bench/cuda_archs.h"

#include <regex>
#include <sstream>
#include <stdexcept>

namespace kvbuf {

bool archs_run_on(const std::string& archs, int major, int minor) {
  static const std::regex entry_re(R"(([0-9]+)([af]?)(-real|-virtual)?)");
  const int device = 10 * major + minor;
  std::string list = archs;
  for (char& c : list)
    if (c == ',') c = ';';
  std::istringstream in(list);
  std::string entry;
  while (std::getline(in, entry, ';')) {
    if (entry.empty()) continue;
    if (entry == "native" || entry == "all" || entry == "all-major") return true;
    std::smatch m;
    if (!std::regex_match(entry, m, entry_re))
      throw std::invalid_argument("CUDA architecture '" + entry + "' is not of the form 80-real, 90a-virtual, native");
    const int arch = std::stoi(m[1].str());
    const std::string variant = m[2].str(), kind = m[3].str();
    const bool same_major = arch / 10 == major;
    const bool real_runs = variant == "a" ? arch == device : same_major && device >= arch;
    const bool ptx_runs = variant == "a" ? arch == device : variant == "f" ? same_major && device >= arch : device >= arch;
    if (kind != "-virtual" && real_runs) return true;
    if (kind != "-real" && ptx_runs) return true;
  }
  return false;
}

}  // namespace kvbuf
