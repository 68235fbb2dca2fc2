#include "sim/csv.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace kvbuf {
namespace {

std::string join(const std::vector<std::string>& values) {
  std::string line;
  for (size_t i = 0; i < values.size(); ++i) line += (i ? "," : "") + csv_field(values[i]);
  return line;
}

TEST(Csv, PlainFieldsAreWrittenAsTheyAre) {
  EXPECT_EQ(csv_field("qwen3-next-80b-a3b"), "qwen3-next-80b-a3b");
  EXPECT_EQ(csv_field(""), "");
}

TEST(Csv, FieldsWithCommasOrQuotesRoundTrip) {
  const std::vector<std::string> row = {"verify-classic-inplace", "256", "", "skipped: needs 162.0 GiB of pools, 139.3 GiB free",
                                        "a \"quoted\" word", "", ","};
  const std::string line = join(row);
  EXPECT_EQ(split_csv_line(line), row) << line;
  EXPECT_EQ(split_csv_line(line).size(), row.size());
}

TEST(Csv, TrailingEmptyFieldIsKept) {
  EXPECT_EQ(split_csv_line("a,b,"), (std::vector<std::string>{"a", "b", ""}));
  EXPECT_EQ(split_csv_line(""), (std::vector<std::string>{""}));
}

TEST(Csv, MalformedLinesAndLineBreaksThrow) {
  EXPECT_THROW(split_csv_line("a,\"open"), std::invalid_argument);
  EXPECT_THROW(split_csv_line("a,\"closed\"x,b"), std::invalid_argument);
  EXPECT_THROW(csv_field("two\nlines"), std::invalid_argument);
}

}  // namespace
}  // namespace kvbuf
