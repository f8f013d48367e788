// A hostile writer for the shm tests: maps the POSIX shared-memory segment
// `name` ("/tandem-...") read-write and runs `edit` on its bytes.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <functional>
#include <string>

namespace tandem::weights::testing {

inline void TamperShm(const std::string& name, const std::function<void(unsigned char*, size_t)>& edit) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0) << name;
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(p, MAP_FAILED);
  edit(static_cast<unsigned char*>(p), static_cast<size_t>(st.st_size));
  ::munmap(p, static_cast<size_t>(st.st_size));
}

}  // namespace tandem::weights::testing
