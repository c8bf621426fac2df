// Number formatting for error messages, matching the text Python prints for the same values
// (the Python layer's messages and the core's must read alike). Cold paths only.
#pragma once

#include <cstdint>
#include <string>

namespace mpsrt::detail {

/// `v` as Python's repr(float) writes it: "2.0", "0.5", "1e+16", "1.5e-05", "nan", "-inf".
std::string py_float(double v);

/// `v` as C's printf("%g") writes it in the "C" locale, six significant digits: "1.7", "0.5",
/// "1", "1e-07", "nan", "-inf" (what `std::ostream << v` prints with default flags). It uses
/// std::to_chars, never an iostream or a locale: the core has none (docs/building.md).
std::string c_float(double v);

__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;

/// A 128-bit integer in decimal (for integer ranges whose end passes 2**63).
std::string int128_str(Int128 v);

}  // namespace mpsrt::detail
