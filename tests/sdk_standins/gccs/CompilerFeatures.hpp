// STAND-IN for the Poplar SDK's gccs/CompilerFeatures.hpp (closed source, not in
// ../shared/sdk-headers), for tests/test_sdk_headers.py only. poplibs' popops/Cast.hpp
// includes it for one macro, which marks a function deprecated.
#pragma once

#define GC_DEPRECATED [[deprecated]]
