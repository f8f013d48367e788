// Helpers shared by the checkpoint store's tests: a fresh directory per
// test, removed afterwards, and small file helpers over real files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace tandem::checkpoint::testing {

// A new empty directory under the test temp dir, removed when destroyed.
class ScratchDir {
 public:
  ScratchDir() {
    std::random_device rd;
    path_ = ::testing::TempDir() + "ckpt-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The whole file (empty when it cannot be read).
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  std::string s(static_cast<size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

inline void WriteAllTo(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Names directly under `dir`, sorted.
inline std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// `n` bytes, a function of (seed, n) only.
inline std::string Pattern(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(s.data() + i, &v, 8);
  }
  for (; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

}  // namespace tandem::checkpoint::testing
