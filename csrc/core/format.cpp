#include "core/format.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace mpsrt::detail {

std::string py_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // The shortest digits that round-trip (what repr uses), then Python's layout: positional
  // for decimal exponents in [-4, 16), else d.ddde+XX with at least two exponent digits.
  char buf[64];
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  if (exp < -4 || exp >= 16) {
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) m += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return sign + m + eb;
  }
  if (exp < 0) return sign + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  const size_t int_digits = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_digits) {
    return sign + digits + std::string(int_digits - digits.size(), '0') + ".0";
  }
  return sign + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

std::string c_float(double v) {
  char buf[32];  // "%.6g" needs at most 13: -d.ddddde-ddd
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6);
  return std::string(buf, r.ptr);
}

std::string int128_str(Int128 v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  UInt128 u = neg ? -static_cast<UInt128>(v) : static_cast<UInt128>(v);
  std::string s;
  while (u != 0) {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  return neg ? "-" + s : s;
}

}  // namespace mpsrt::detail
