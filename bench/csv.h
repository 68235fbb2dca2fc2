// Results CSV written row by row as measured (flushed after every row), so an interrupted sweep
// leaves every finished row on disk. Units go in the column names (latency_us, bytes, gbps).
#pragma once
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/csv.h"

namespace kvbuf {

class CsvWriter {
 public:
  CsvWriter(const std::string& path, std::vector<std::string> columns)
      : out_(path), columns_(std::move(columns)) {
    if (!out_) throw std::runtime_error("cannot write " + path);
    write_line(columns_);
  }
  // Throws when the row has a different number of fields than the header.
  void row(const std::vector<std::string>& fields) {
    if (fields.size() != columns_.size())
      throw std::logic_error("CSV row has " + std::to_string(fields.size()) + " fields, header has " +
                             std::to_string(columns_.size()));
    write_line(fields);
  }

 private:
  void write_line(const std::vector<std::string>& fields) {
    for (size_t i = 0; i < fields.size(); ++i) out_ << (i ? "," : "") << csv_field(fields[i]);
    out_ << '\n';
    out_.flush();
  }
  std::ofstream out_;
  std::vector<std::string> columns_;
};

}  // namespace kvbuf
