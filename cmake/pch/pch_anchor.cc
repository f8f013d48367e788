// The translation unit of each precompiled-header target (cmake/TandemPch.cmake,
// _tandem_pch); it has no code of its own.
