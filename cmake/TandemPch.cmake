# Shared precompiled headers (clang only: CI's Sanitize tree and any clang
# build) for the two kinds of translation unit that spend most of their
# compile time in the same third-party headers and the templates those
# instantiate: LibTorch code (<ATen/ATen.h>, json, Asio, spdlog:
# cmake/pch/torch_pch.h) and tests (GoogleTest and the same: test_pch.h).
#
# Measured at -O0 with ASan + UBSan (clang 14, this project's 2-core
# machine; docs/testing.md "CI time"): workers/model/transformer.cc
# 14.4 s -> 4.0 s, workers/roles/actor_role.cc 32.5 s -> 20.8 s,
# orchestrator/spec/tests/parser_test.cc 11.4 s -> 2.3 s,
# workers/agents/tests/workflow_test.cc 15.9 s -> 3.8 s; one header build
# costs 8-20 s.
#
# How: tandem_share_pch(), at the end of the root CMakeLists.txt, builds each
# header once per variant (_tandem_pch, with -fpch-instantiate-templates,
# CMake's default for clang) and points every consumer at its variant
# (PRECOMPILE_HEADERS_REUSE_FROM): targets that compile against LibTorch
# (_tandem_uses_torch) and tests (tandem_test's TANDEM_TEST property). clang
# takes a header only where the flags that shape code agree, hence the
# variants: -fPIC or not; coverage instrumentation (off in LibTorch code and
# tests, on in the orchestrator's libraries, which get no header); the
# optimisation level (tests in a directory at -O1/-O2 get none). A
# consumer's extra -D macros are allowed and a conflicting one is an error,
# so a header's target carries only definitions every consumer has. Code
# still includes what it uses: gcc builds (scripts/build.sh's Release, the
# GPU machine's standalone build) have no precompiled header.
option(TANDEM_PCH "Shared precompiled headers for LibTorch code and tests (clang)" ON)

# Sets OUT to TRUE when TARGET compiles with tandem_torch_deps' usage
# requirements: among its direct link items, or in the INTERFACE_LINK_LIBRARIES
# of one of them, transitively ($<LINK_ONLY:...> items carry no compile flags).
function(_tandem_uses_torch target out)
  get_property(memo GLOBAL PROPERTY _TANDEM_USES_TORCH_${target} SET)
  if(memo)
    get_property(v GLOBAL PROPERTY _TANDEM_USES_TORCH_${target})
    set(${out} ${v} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY _TANDEM_USES_TORCH_${target} FALSE)  # cycles end here
  get_target_property(type ${target} TYPE)
  set(items "")
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(direct ${target} LINK_LIBRARIES)
    if(direct)
      list(APPEND items ${direct})
    endif()
  endif()
  get_target_property(iface ${target} INTERFACE_LINK_LIBRARIES)
  if(iface)
    list(APPEND items ${iface})
  endif()
  set(v FALSE)
  foreach(item IN LISTS items)
    if(item MATCHES "^\\$<" OR NOT TARGET ${item})
      continue()
    endif()
    get_target_property(aliased ${item} ALIASED_TARGET)
    if(aliased)
      set(item ${aliased})
    endif()
    if(item STREQUAL "tandem_torch_deps")
      set(v TRUE)
      break()
    endif()
    get_target_property(imported ${item} IMPORTED)
    if(imported)
      continue()
    endif()
    _tandem_uses_torch(${item} sub)
    if(sub)
      set(v TRUE)
      break()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY _TANDEM_USES_TORCH_${target} ${v})
  set(${out} ${v} PARENT_SCOPE)
endfunction()

function(_tandem_targets_under dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _tandem_targets_under(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# _tandem_pch(NAME PIC LIBS... HEADERS ...): an object library that only
# builds the precompiled HEADERS (cmake/pch/) with the usage requirements of
# LIBS; -fPIC when PIC.
function(_tandem_pch name pic)
  cmake_parse_arguments(P "" "" "LIBS;HEADERS" ${ARGN})
  add_library(${name} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch/pch_anchor.cc)
  target_link_libraries(${name} PRIVATE ${P_LIBS})
  list(TRANSFORM P_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/cmake/pch/)
  target_precompile_headers(${name} PRIVATE ${P_HEADERS})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ${pic})
endfunction()

# Call once, after every add_subdirectory.
function(tandem_share_pch)
  if(NOT TANDEM_PCH OR NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    return()
  endif()
  set(common nlohmann_json::nlohmann_json spdlog::spdlog Boost::headers)
  set(gtest GTest::gtest GTest::gmock)
  # Variants, because clang refuses a precompiled header whose position
  # independence (-fPIC libraries, default-PIE executables) or coverage
  # instrumentation differs from the consumer's. Tests skip the fuzzers'
  # coverage (tandem_test), as does LibTorch code (tandem_torch_deps).
  if(TANDEM_BUILD_TESTS)
    _tandem_pch(tandem_pch_test OFF LIBS ${common} ${gtest} HEADERS test_pch.h)
    if(TANDEM_BUILD_FUZZ)
      target_compile_options(tandem_pch_test PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize=fuzzer-no-link>)
    endif()
  endif()
  if(TARGET tandem_torch_deps)
    _tandem_pch(tandem_pch_torch OFF LIBS tandem_torch_deps ${common} HEADERS torch_pch.h)
    _tandem_pch(tandem_pch_torch_pic ON LIBS tandem_torch_deps ${common} HEADERS torch_pch.h)
    if(TANDEM_BUILD_TESTS)
      _tandem_pch(tandem_pch_torch_test OFF LIBS tandem_torch_deps ${common} ${gtest} HEADERS torch_pch.h test_pch.h)
    endif()
  endif()
  _tandem_targets_under(${PROJECT_SOURCE_DIR} targets)
  set(n_torch 0)
  set(n_test 0)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$"
       OR t MATCHES "^tandem_pch_")
      continue()
    endif()
    get_target_property(own ${t} PRECOMPILE_HEADERS)
    get_target_property(test ${t} TANDEM_TEST)
    get_target_property(pic ${t} POSITION_INDEPENDENT_CODE)
    get_target_property(options ${t} COMPILE_OPTIONS)
    if(type MATCHES "^(SHARED|MODULE)_LIBRARY$")
      set(pic ON)
    endif()
    set(uses OFF)
    if(TARGET tandem_torch_deps)
      _tandem_uses_torch(${t} uses)
    endif()
    set(pch "")
    if(own)
      # its own header
    elseif(uses AND test AND NOT pic)
      set(pch tandem_pch_torch_test)
    elseif(uses)
      if(pic)
        set(pch tandem_pch_torch_pic)
      else()
        set(pch tandem_pch_torch)
      endif()
    elseif(test AND NOT pic AND NOT options MATCHES "-O[123]")
      # (a directory's tandem_optimize_under_sanitize / _fast_ gives its tests
      # another optimisation level: those keep parsing the headers)
      set(pch tandem_pch_test)
    endif()
    if(pch)
      set_property(TARGET ${t} PROPERTY PRECOMPILE_HEADERS_REUSE_FROM ${pch})
      if(uses)
        math(EXPR n_torch "${n_torch} + 1")
      else()
        math(EXPR n_test "${n_test} + 1")
      endif()
    endif()
  endforeach()
  message(STATUS "tandem: precompiled headers (cmake/pch/) for ${n_torch} LibTorch targets and ${n_test} other tests")
endfunction()
