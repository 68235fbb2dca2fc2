// CSV fields as the results files hold them (RFC 4180 within one line): a field holding a comma or
// a double quote is written quoted, with its quotes doubled. The sweeps write with csv_field, and
// every reader of results or traces splits with split_csv_line, so a reason such as "needs 162 GiB
// of pools, 139 GiB free" stays one field.
#pragma once

#include <string>
#include <vector>

namespace kvbuf {

// The field as written into a CSV line. Throws std::invalid_argument on a line break, which no
// single-line row may hold.
std::string csv_field(const std::string& value);

// The fields of one CSV line (no line break), quotes removed. Throws std::invalid_argument on an
// unterminated quote or text after a closing quote.
std::vector<std::string> split_csv_line(const std::string& line);

}  // namespace kvbuf
