#include "sim/csv.h"

#include <cmath>
#include <fstream>
#include <stdexcept>

namespace kvbuf {

std::string csv_field(const std::string& value) {
  if (value.find_first_of("\r\n") != std::string::npos)
    throw std::invalid_argument("CSV field holds a line break: '" + value + "'");
  if (value.find_first_of(",\"") == std::string::npos) return value;
  std::string quoted = "\"";
  for (char c : value) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + '"';
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  size_t i = 0;
  while (true) {
    field.clear();
    if (i < line.size() && line[i] == '"') {
      ++i;
      while (true) {
        if (i >= line.size()) throw std::invalid_argument("unterminated quoted CSV field in: " + line);
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += line[i++];
      }
      if (i < line.size() && line[i] != ',')
        throw std::invalid_argument("text after a closing quote in CSV line: " + line);
    } else {
      while (i < line.size() && line[i] != ',') field += line[i++];
    }
    fields.push_back(field);
    if (i >= line.size()) return fields;
    ++i;  // the comma; a line ending in one has an empty last field
  }
}

std::optional<double> csv_number(const std::string& field) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(field, &used);
  } catch (const std::exception&) {  // no number at all, or out of double's range
    return std::nullopt;
  }
  if (used != field.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::vector<CsvRow> read_csv_rows(const std::string& path, std::vector<std::string>* header) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::string line;
  std::vector<CsvRow> rows;
  if (!std::getline(in, line)) return rows;
  const std::vector<std::string> names = split_csv_line(line);
  if (header) *header = names;
  while (std::getline(in, line)) {
    const std::vector<std::string> fields = split_csv_line(line);
    if (fields.size() != names.size())
      throw std::invalid_argument(path + ": " + std::to_string(fields.size()) + " fields where the header has " +
                                  std::to_string(names.size()) + ": " + line);
    CsvRow row;
    for (size_t i = 0; i < names.size(); ++i) row[names[i]] = fields[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace kvbuf
