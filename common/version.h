// tandem's version: CMake's project(VERSION ...) in the top CMakeLists.txt,
// written into version.cc at configure time (common/version.cc.in). Printed
// by `tandem --version`, `tandemd --version` and `tandem-worker --version`.
#pragma once

#include <string>
#include <string_view>

namespace tandem {

// "0.1.0"
std::string_view Version();

// "tandem 0.1.0": what each binary's --version prints, with its own name.
std::string VersionLine(std::string_view program);

}  // namespace tandem
