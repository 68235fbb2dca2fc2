// CSV fields as the results files hold them (RFC 4180 within one line): a field holding a comma or
// a double quote is written quoted, with its quotes doubled. The sweeps write with csv_field, and
// every reader of results or traces splits with split_csv_line, so a reason such as "needs 162 GiB
// of pools, 139 GiB free" stays one field.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvbuf {

// The field as written into a CSV line. Throws std::invalid_argument on a line break, which no
// single-line row may hold.
std::string csv_field(const std::string& value);

// The fields of one CSV line (no line break), quotes removed. Throws std::invalid_argument on an
// unterminated quote or text after a closing quote.
std::vector<std::string> split_csv_line(const std::string& line);

// The field as a finite number; nothing where it is empty, holds more than a number ("12 us") or
// is not finite ("nan", "inf", "1e999").
std::optional<double> csv_number(const std::string& field);

// One row of a CSV file, by column name.
using CsvRow = std::map<std::string, std::string>;
// The rows of a CSV file whose first line is its header (also stored in *header when given); an
// empty file has no rows. Throws std::runtime_error when the file cannot be read and
// std::invalid_argument on a row whose field count is not the header's (naming the line).
std::vector<CsvRow> read_csv_rows(const std::string& path, std::vector<std::string>* header = nullptr);

}  // namespace kvbuf
