# Build options, warnings and the Sanitize build type (ASan + UBSan).
option(TANDEM_WERROR "Treat warnings as errors (on in CI)" OFF)
option(TANDEM_BUILD_TESTS "Build unit and integration tests" ON)
option(TANDEM_BUILD_BENCH "Build benchmarks" ON)
option(TANDEM_BUILD_FUZZ "Build libFuzzer targets (needs clang)" OFF)

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()

if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "" FORCE)
endif()

# Sanitize: -O0 with line tables only (-g1): ASan and UBSan reports keep
# file:line, and the build is CI's. -O1 cost 2.8x the compile time of -O0
# (orchestrator/daemon/tandemd_main.cc, clang 14: 56 s against 20 s; the
# optimiser and code generation of the inline Asio/Beast/JSON code every TU
# emits are two thirds of it), for code that mostly waits on processes and
# sockets; what is CPU-heavy under test keeps -O1 (tandem_optimize_under_sanitize).
# Full -g cost 12% more for nothing a report needs.
set(_san "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined")
# One tree for the tests and the fuzzers (scripts/test.sh): with clang and
# TANDEM_BUILD_FUZZ, every translation unit also carries libFuzzer's coverage
# instrumentation (fuzzer-no-link), so the *_fuzz targets link against the
# same objects the tests use instead of a second build of the orchestrator.
# The sanitizer runtime provides the coverage hooks for the non-fuzz binaries.
set(_san_compile "${_san}")
if(TANDEM_BUILD_FUZZ AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  string(APPEND _san_compile " -fsanitize=fuzzer-no-link")
endif()
set(CMAKE_CXX_FLAGS_SANITIZE "-O0 -g1 ${_san_compile}" CACHE STRING "" FORCE)
set(CMAKE_C_FLAGS_SANITIZE "-O0 -g1 ${_san_compile}" CACHE STRING "" FORCE)
set(CMAKE_EXE_LINKER_FLAGS_SANITIZE "${_san}" CACHE STRING "" FORCE)
set(CMAKE_SHARED_LINKER_FLAGS_SANITIZE "${_san}" CACHE STRING "" FORCE)

# CPU-heavy code that the tests run at size (numeric kernels, the report's
# log parsing and the CLI that runs it) keeps -O1 in the Sanitize build:
# call at the top of its directory (applies to the targets defined after it,
# subdirectories included).
macro(tandem_optimize_under_sanitize)
  add_compile_options($<$<AND:$<CONFIG:Sanitize>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
endmacro()

# The CPU kernels that every training and generation step of the learning
# tests runs (kernels/): -O2 in the Sanitize build, and without libFuzzer's
# coverage hooks (no fuzzer reaches them), still under ASan and UBSan. At
# -O1 with the hooks, sft on CPU ran 18x slower than the Release build, two
# thirds of it in these loops (docs/testing.md "The learning tests").
macro(tandem_fast_under_sanitize)
  add_compile_options($<$<AND:$<CONFIG:Sanitize>,$<COMPILE_LANGUAGE:CXX>>:-O2>)
  if(TANDEM_BUILD_FUZZ AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    add_compile_options($<$<AND:$<CONFIG:Sanitize>,$<COMPILE_LANGUAGE:CXX>>:-fno-sanitize=fuzzer-no-link>)
  endif()
endmacro()

# Warnings for our own targets only (not third-party code).
function(tandem_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers>)
  if(TANDEM_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

# tandem_test(NAME SOURCES... LIBS ...): a GoogleTest binary registered with ctest.
function(tandem_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  tandem_warnings(${name})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  set_property(TARGET ${name} PROPERTY TANDEM_TEST ON)  # tandem_share_pch() gives it the tests' header
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # No fuzz target links a test's own objects: they skip the coverage
  # instrumentation (a third of a -O0 TU's compile time).
  if(TANDEM_BUILD_FUZZ AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize=fuzzer-no-link>)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "TANDEM_BIN_DIR=${CMAKE_BINARY_DIR}/bin;TANDEM_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  if(T_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()

# tandem_fuzz_target(NAME SOURCES... LIBS ...): a libFuzzer target, built only
# with TANDEM_BUILD_FUZZ=ON under clang (scripts/fuzz.sh runs it), into
# ${CMAKE_BINARY_DIR}/fuzz/NAME. Build it in the Sanitize build type: its
# libraries then carry the coverage instrumentation (see above).
function(tandem_fuzz_target name)
  if(NOT TANDEM_BUILD_FUZZ OR NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    return()
  endif()
  cmake_parse_arguments(F "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${F_SOURCES})
  tandem_warnings(${name})
  target_link_libraries(${name} PRIVATE ${F_LIBS})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
endfunction()
