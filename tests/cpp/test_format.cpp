// Tests of the core's number formatting (core/format.h) and of the option texts that use it:
// the same text whatever the process's C++ or C locale, since the core uses no iostream or
// locale (README, "Building": a module with its own static libstdc++ beside another one).
#include <gtest/gtest.h>

#include <clocale>
#include <cmath>
#include <cstdio>
#include <limits>
#include <locale>
#include <string>
#include <vector>

#include "core/format.h"
#include "core/options.h"

namespace {

using mpsrt::detail::c_float;

// printf's "%g" in the "C" locale: what c_float must write.
std::string printf_g(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A decimal comma and digit grouping: what a de_DE-like C++ locale makes an ostream write
// ("1,7", "1.048.576"). Built in, so the test needs no OS locale installed.
struct CommaPunct : std::numpunct<char> {
  char do_decimal_point() const override { return ','; }
  char do_thousands_sep() const override { return '.'; }
  std::string do_grouping() const override { return "\3"; }
};

// Sets the global C++ locale (what std::ostringstream picks up) for one scope.
class GlobalLocale {
 public:
  explicit GlobalLocale(const std::locale& l) : old_(std::locale::global(l)) {}
  ~GlobalLocale() { std::locale::global(old_); }
  GlobalLocale(const GlobalLocale&) = delete;
  GlobalLocale& operator=(const GlobalLocale&) = delete;

 private:
  std::locale old_;
};

TEST(Format, CFloatIsPrintfG) {
  ASSERT_STREQ(std::setlocale(LC_NUMERIC, nullptr), "C");
  EXPECT_EQ(c_float(1.7), "1.7");
  EXPECT_EQ(c_float(1.4), "1.4");
  EXPECT_EQ(c_float(1.0), "1");
  EXPECT_EQ(c_float(0.0), "0");
  EXPECT_EQ(c_float(1.25), "1.25");
  EXPECT_EQ(c_float(1e-7), "1e-07");
  EXPECT_EQ(c_float(123456789.0), "1.23457e+08");
  EXPECT_EQ(c_float(-0.5), "-0.5");
  const std::vector<double> values = {0.1,
                                      0.3,
                                      2.0 / 3.0,
                                      1.0 / 3.0,
                                      1.9999999,
                                      2.0,
                                      0.0001,
                                      0.00001234567,
                                      999999.5,
                                      1e16,
                                      -3.14159265,
                                      std::numeric_limits<double>::min(),
                                      std::numeric_limits<double>::max(),
                                      std::numeric_limits<double>::denorm_min()};
  for (double v : values) EXPECT_EQ(c_float(v), printf_g(v)) << v;
  for (int i = -2000; i <= 2000; ++i) {
    const double v = i / 997.0;
    ASSERT_EQ(c_float(v), printf_g(v)) << v;
  }
  EXPECT_EQ(c_float(std::nan("")), "nan");
  EXPECT_EQ(c_float(-std::numeric_limits<double>::infinity()), "-inf");
}

// The option texts do not change with the global C++ locale (an ostream would write "1,7").
TEST(Format, OptionTextsIgnoreTheGlobalLocale) {
  const GlobalLocale comma(std::locale(std::locale::classic(), new CommaPunct));
  EXPECT_EQ(c_float(1.7), "1.7");
  std::string high, records;
  for (const mpsrt::OptionInfo& i : mpsrt::detail::describe_options(mpsrt::detail::Options{})) {
    if (i.name == "MPSRT_HIGH_WATERMARK_RATIO") high = i.value;
    if (i.name == "MPSRT_PROFILE_RECORDS") records = i.value;
  }
  EXPECT_EQ(high, "1.7");
  EXPECT_EQ(records, "1048576");
  try {
    mpsrt::detail::parse_options([](const char* name) -> const char* {
      return std::string(name) == "MPSRT_HIGH_WATERMARK_RATIO" ? "1.25" : nullptr;
    });
    ADD_FAILURE() << "a high ratio below the default low ratio was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("MPSRT_LOW_WATERMARK_RATIO (1.4)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("MPSRT_HIGH_WATERMARK_RATIO (1.25)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
