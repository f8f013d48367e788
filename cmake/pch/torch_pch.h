// The precompiled header the LibTorch targets share in clang builds
// (cmake/TandemPch.cmake): third-party headers only, the ones most LibTorch
// translation units parse. Nothing of ours: a change to our headers must not
// rebuild it. Code includes what it uses as if this did not exist.
#pragma once
// First: clang in C++20 needs IValue complete before the headers that use it
// incompletely (workers/ops/CMakeLists.txt).
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common_pch.h"
