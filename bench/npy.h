// NumPy .npy files, format version 1.0, little endian, C order: the writer `kvbuf export` uses and
// the reader its tests use. Only float32 ('<f4') and float64 ('<f8') arrays.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace kvbuf::npy {

inline bool host_is_little_endian() {
  const uint16_t one = 1;
  uint8_t first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

template <class T>
const char* descr() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "npy: float or double only");
  return std::is_same_v<T, float> ? "<f4" : "<f8";
}

inline size_t element_count(const std::vector<size_t>& shape) {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

// Header: magic, version 1.0, uint16 header length, then a Python dict literal padded with spaces
// and ended by '\n' so that the data starts at a multiple of 64 bytes.
inline std::string header(const std::string& descr, const std::vector<size_t>& shape) {
  std::string tuple = "(";
  for (size_t i = 0; i < shape.size(); ++i) tuple += (i ? ", " : "") + std::to_string(shape[i]);
  tuple += shape.size() == 1 ? ",)" : ")";
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + tuple + ", }";
  const size_t preamble = 10;  // magic (6) + version (2) + length (2)
  size_t total = preamble + dict.size() + 1;
  total = (total + 63) / 64 * 64;
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict += '\n';
  if (dict.size() > 65535) throw std::invalid_argument("npy: header too long");
  std::string h = "\x93NUMPY";
  h += char(1);
  h += char(0);
  h += char(dict.size() & 0xff);
  h += char(dict.size() >> 8);
  return h + dict;
}

// Writes data (element_count(shape) values, C order) to path; throws std::runtime_error on I/O
// failure.
template <class T>
void write(const std::string& path, const std::vector<T>& data, const std::vector<size_t>& shape) {
  if (!host_is_little_endian()) throw std::runtime_error("npy: big-endian hosts are not supported");
  if (data.size() != element_count(shape))
    throw std::logic_error("npy: " + path + ": " + std::to_string(data.size()) +
                           " values for shape of " + std::to_string(element_count(shape)));
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("cannot write " + path);
  const std::string h = header(descr<T>(), shape);
  out.write(h.data(), std::streamsize(h.size()));
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * sizeof(T)));
  if (!out.flush()) throw std::runtime_error("write failed: " + path);
}

struct Array {
  std::string descr;  // "<f4" or "<f8"
  std::vector<size_t> shape;
  std::vector<double> values;  // C order, widened to double
};

// Reads a version 1.0 or 2.0 .npy file of '<f4' or '<f8', C order; throws std::runtime_error on
// anything else or on a truncated file.
inline Array read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw std::runtime_error(path + ": not a .npy file");
  size_t header_len = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    in.read(reinterpret_cast<char*>(b), 2);
    header_len = b[0] | (size_t(b[1]) << 8);
  } else if (magic[6] == 2) {
    unsigned char b[4];
    in.read(reinterpret_cast<char*>(b), 4);
    header_len = b[0] | (size_t(b[1]) << 8) | (size_t(b[2]) << 16) | (size_t(b[3]) << 24);
  } else {
    throw std::runtime_error(path + ": unsupported .npy version");
  }
  std::string dict(header_len, '\0');
  if (!in.read(dict.data(), std::streamsize(header_len)))
    throw std::runtime_error(path + ": truncated header");
  auto value_after = [&](const std::string& key) {
    const size_t k = dict.find("'" + key + "'");
    if (k == std::string::npos) throw std::runtime_error(path + ": header lacks " + key);
    return dict.find(':', k) + 1;
  };
  Array a;
  size_t d = dict.find('\'', value_after("descr"));
  a.descr = dict.substr(d + 1, dict.find('\'', d + 1) - d - 1);
  if (a.descr != "<f4" && a.descr != "<f8")
    throw std::runtime_error(path + ": unsupported dtype " + a.descr);
  if (dict.compare(dict.find_first_not_of(' ', value_after("fortran_order")), 5, "False") != 0)
    throw std::runtime_error(path + ": Fortran order not supported");
  const size_t open = dict.find('(', value_after("shape")), close = dict.find(')', open);
  if (open == std::string::npos || close == std::string::npos)
    throw std::runtime_error(path + ": bad shape");
  std::string dims = dict.substr(open + 1, close - open - 1);
  for (size_t pos = 0; pos < dims.size();) {
    const size_t next = dims.find(',', pos);
    const std::string item =
        dims.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    if (item.find_first_not_of(' ') != std::string::npos) a.shape.push_back(std::stoull(item));
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  const size_t n = element_count(a.shape);
  a.values.resize(n);
  if (a.descr == "<f8") {
    if (!in.read(reinterpret_cast<char*>(a.values.data()), std::streamsize(n * 8)))
      throw std::runtime_error(path + ": truncated data");
  } else {
    std::vector<float> f(n);
    if (!in.read(reinterpret_cast<char*>(f.data()), std::streamsize(n * 4)))
      throw std::runtime_error(path + ": truncated data");
    for (size_t i = 0; i < n; ++i) a.values[i] = f[i];
  }
  if (in.peek() != std::char_traits<char>::eof())
    throw std::runtime_error(path + ": trailing bytes after data");
  return a;
}

}  // namespace kvbuf::npy
