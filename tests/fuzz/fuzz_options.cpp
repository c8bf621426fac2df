// libFuzzer target: the environment-options parser (core/options.cpp).
//
// The input picks, for every variable of the table (and its PYTORCH_MPS_ alias), whether it is
// set and to which text. Properties checked on every input:
// - parse_options either returns or throws std::invalid_argument whose message starts with
//   "[options] " and names a variable; any other exception, crash or sanitizer report is a bug;
// - when it returns, describe_options() shows every set variable's value as text that parses
//   again to the same shown value (the shown form is canonical), with the same outcome.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/options.h"

namespace {

using mpsrt::detail::describe_options;
using mpsrt::detail::Options;
using mpsrt::detail::parse_options;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_options: %s\n", what.c_str());
  std::abort();
}

const std::vector<mpsrt::OptionInfo>& table() {
  static const std::vector<mpsrt::OptionInfo> t = describe_options(Options{});
  return t;
}

// Parses `env`; returns false (after checking the message) when the parser rejects it.
bool parse(const std::map<std::string, std::string>& env, Options* out) {
  try {
    *out = parse_options([&env](const char* name) -> const char* {
      auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    return true;
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    if (msg.rfind("[options] ", 0) != 0) fail("rejection without the [options] prefix: " + msg);
    bool names_one = false;
    for (const auto& o : table()) {
      names_one = names_one || msg.find(o.name) != std::string::npos ||
                  (!o.alias.empty() && msg.find(o.alias) != std::string::npos);
    }
    if (!names_one) fail("rejection that names no variable: " + msg);
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::map<std::string, std::string> env;
  for (const auto& o : table()) {
    const uint8_t how = in.ConsumeIntegralInRange<uint8_t>(0, 3);
    if (how == 0) continue;  // unset
    const std::string& name = (how == 3 && !o.alias.empty()) ? o.alias : o.name;
    env[name] = in.ConsumeRandomLengthString(24);
  }
  Options first;
  if (!parse(env, &first)) return 0;
  const std::vector<mpsrt::OptionInfo> shown = describe_options(first);
  // Feed the shown values of the set variables back in, under the canonical names.
  std::map<std::string, std::string> again;
  for (const auto& o : shown) {
    if (env.count(o.name) != 0 || (!o.alias.empty() && env.count(o.alias) != 0)) {
      again[o.name] = o.value;
    }
  }
  Options second;
  if (!parse(again, &second)) fail("the shown values of an accepted setting were rejected");
  const std::vector<mpsrt::OptionInfo> reshown = describe_options(second);
  for (size_t i = 0; i < shown.size(); ++i) {
    if (shown[i].value != reshown[i].value) {
      fail(shown[i].name + " shown as '" + shown[i].value + "' parses back to '" +
           reshown[i].value + "'");
    }
  }
  return 0;
}
