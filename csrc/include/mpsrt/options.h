// Runtime options, read once from the environment (MPSRT_* and the PYTORCH_MPS_* aliases).
#pragma once

#include <string>
#include <vector>

#include "mpsrt/api.h"

namespace mpsrt {

/// One environment variable the runtime reads: its name, alias, current value and meaning.
struct OptionInfo {
  std::string name;           ///< e.g. "MPSRT_HIGH_WATERMARK_RATIO"
  std::string alias;          ///< e.g. "PYTORCH_MPS_HIGH_WATERMARK_RATIO", or empty
  std::string value;          ///< the value in force, as text
  std::string default_value;  ///< the value when the variable is not set, as text
  std::string help;           ///< what it means and which values are valid
};

/// Every option of the runtime with its value in force. Reading them validates them:
/// a bad value throws std::invalid_argument naming the variable.
MPSRT_API std::vector<OptionInfo> options();

}  // namespace mpsrt
