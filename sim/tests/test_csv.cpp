#include "sim/csv.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
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

TEST(Csv, NumbersAreWholeFiniteFields) {
  EXPECT_EQ(csv_number("12.5"), 12.5);
  EXPECT_EQ(csv_number("-3e2"), -300.0);
  EXPECT_EQ(csv_number("0"), 0.0);
  for (const char* bad : {"", "12 us", "us", "nan", "inf", "-inf", "1e999", "1,5", "0x"})
    EXPECT_FALSE(csv_number(bad).has_value()) << "'" << bad << "'";
}

TEST(Csv, ReadsAFileIntoRowsByColumn) {
  const std::string path = testing::TempDir() + "kvbuf_read_csv_rows.csv";
  {
    std::ofstream f(path);
    f << "kernel,note,latency_us\n" << "recurrent,\"needs 162 GiB, 139 free\",3.5\n" << "kvbuffer,,2.9\n";
  }
  std::vector<std::string> header;
  const std::vector<CsvRow> rows = read_csv_rows(path, &header);
  EXPECT_EQ(header, (std::vector<std::string>{"kernel", "note", "latency_us"}));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("note"), "needs 162 GiB, 139 free");
  EXPECT_EQ(rows[1].at("kernel"), "kvbuffer");
  EXPECT_EQ(rows[1].at("note"), "");
  {
    std::ofstream f(path, std::ios::app);
    f << "direct,2.0\n";  // a field short
  }
  EXPECT_THROW(read_csv_rows(path), std::invalid_argument);
  std::remove(path.c_str());
  EXPECT_THROW(read_csv_rows(path), std::runtime_error);
}

}  // namespace
}  // namespace kvbuf
