# One shared precompiled header for the LibTorch code (clang only; CI's
# Sanitize tree and any clang build).
#
# Why: a LibTorch translation unit spends most of its compile time in the
# same third-party headers (<ATen/ATen.h> and the templates it instantiates,
# nlohmann/json, Asio, spdlog). Measured at -O0 with ASan + UBSan (clang 14,
# 2 cores): workers/model/transformer.cc 14.4 s -> 4.0 s,
# workers/rl/advantages.cc 7.1 s -> 1.5 s, workers/roles/actor_role.cc
# 32.5 s -> 20.8 s, for one 20 s compile of the header (docs/testing.md
# "CI time").
#
# How: tandem_pch_torch (below) builds cmake/pch/torch_pch.h once (twice:
# with and without -fPIC), with
# -fpch-instantiate-templates (CMake's default for clang); every target that
# compiles against LibTorch, found by tandem_share_pch() at the end of the
# root CMakeLists.txt, reuses it (PRECOMPILE_HEADERS_REUSE_FROM). clang
# accepts the header where the flags that shape code agree: optimisation
# level, sanitizers and coverage are the same for all of them (the Sanitize
# build gives no LibTorch directory -O1 or -O2, and tandem_torch_deps turns
# the fuzzers' coverage off for all of them); a consumer's extra -D macros
# are allowed, a conflicting one is an error, so the header's target carries
# only the definitions every consumer has. Code still includes what it uses:
# gcc builds (scripts/build.sh's Release, the GPU machine's standalone
# build) have no precompiled header.
option(TANDEM_PCH "Share a precompiled header among the LibTorch targets (clang)" ON)

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

# Call once, after every add_subdirectory.
function(tandem_share_pch)
  if(NOT TANDEM_PCH OR NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang" OR NOT TARGET tandem_torch_deps)
    return()
  endif()
  # Two builds of the header: clang refuses a precompiled header whose
  # position independence differs from the consumer's (-fPIC libraries,
  # default-PIE executables).
  foreach(pch tandem_pch_torch tandem_pch_torch_pic)
    add_library(${pch} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch/pch_anchor.cc)
    target_link_libraries(${pch} PRIVATE tandem_torch_deps nlohmann_json::nlohmann_json spdlog::spdlog Boost::headers)
    target_precompile_headers(${pch} PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch/torch_pch.h)
  endforeach()
  set_target_properties(tandem_pch_torch_pic PROPERTIES POSITION_INDEPENDENT_CODE ON)
  _tandem_targets_under(${PROJECT_SOURCE_DIR} targets)
  set(n 0)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$"
       OR t MATCHES "^tandem_pch_torch")
      continue()
    endif()
    get_target_property(own ${t} PRECOMPILE_HEADERS)
    _tandem_uses_torch(${t} uses)
    if(NOT uses OR own)
      continue()
    endif()
    get_target_property(pic ${t} POSITION_INDEPENDENT_CODE)
    if(pic OR type MATCHES "^(SHARED|MODULE)_LIBRARY$")
      set_property(TARGET ${t} PROPERTY PRECOMPILE_HEADERS_REUSE_FROM tandem_pch_torch_pic)
    else()
      set_property(TARGET ${t} PROPERTY PRECOMPILE_HEADERS_REUSE_FROM tandem_pch_torch)
    endif()
    math(EXPR n "${n} + 1")
  endforeach()
  message(STATUS "tandem: ${n} LibTorch targets share the precompiled header cmake/pch/torch_pch.h")
endfunction()
