// Results CSV written row by row as measured (flushed after every row), so an interrupted sweep
// leaves every finished row on disk (whole lines: bench/sweep/sweep_grid.h's resume_csv drops a torn one).
// Units go in the column names (latency_us, bytes, gbps).
#pragma once
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/csv.h"

namespace kvbuf {

class CsvWriter {
 public:
  // append: rows go after those of an existing file that has this header (the caller checked it).
  CsvWriter(const std::string& path, std::vector<std::string> columns, bool append = false)
      : out_(path, append ? std::ios::app : std::ios::trunc), columns_(std::move(columns)) {
    if (!out_) throw std::runtime_error("cannot write " + path);
    if (!append) write_line(columns_);
  }
  // Fields appended to every following row (the sweep grid's columns of the point being measured).
  void set_row_suffix(std::vector<std::string> suffix) { suffix_ = std::move(suffix); }
  // Throws when the row (with the suffix) has a different number of fields than the header.
  void row(std::vector<std::string> fields) {
    fields.insert(fields.end(), suffix_.begin(), suffix_.end());
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
  std::vector<std::string> columns_, suffix_;
};

}  // namespace kvbuf
