// The translation unit that builds cmake/pch/torch_pch.h's precompiled header
// (cmake/TandemPch.cmake); it has no code of its own.
