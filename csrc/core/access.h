// detail::Access: the core's one way into the private parts of the public handles (a Stream's
// StreamImpl, a Generator's GeneratorImpl, a Buffer's Block). The public classes name it as
// their friend and declare nothing more of it; it is defined here, for csrc/core (and the
// C++ tests of the core) only: bindings and embedders use the public API.
#pragma once

#include "mpsrt/allocator.h"
#include "mpsrt/generator.h"
#include "mpsrt/stream.h"

namespace mpsrt::detail {

struct Access {
  /// The stream behind a handle (nullptr for the empty Stream).
  static StreamImpl* impl(const Stream& stream) noexcept { return stream.impl_; }
  /// The handle of a stream of this runtime (nullptr: the empty Stream).
  static Stream make_stream(StreamImpl* impl) noexcept { return Stream(impl); }
  /// The generator's shared state.
  static GeneratorImpl* impl(const Generator& generator) noexcept { return generator.impl_.get(); }
  /// The allocator's block of the Buffer's allocation (nullptr for an empty Buffer).
  static Block* block(const Buffer& buffer) noexcept { return buffer.block_; }
};

}  // namespace mpsrt::detail
