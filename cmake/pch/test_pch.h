// The precompiled header the test binaries share in clang builds
// (cmake/TandemPch.cmake): GoogleTest and the third-party headers most tests
// parse, with their templates instantiated once. Nothing of ours. LibTorch
// tests use it together with torch_pch.h.
#pragma once
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common_pch.h"
