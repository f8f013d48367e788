// SafetensorsFile: mmap + ParseSafetensorsHeader (see safetensors_file.h).
#include "workers/model/safetensors_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <span>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace tandem::model {

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    const Status st = ErrnoStatus("open safetensors file " + path, err);
    return err == ENOENT ? NotFound(st.message()) : st;
  }
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    const Status st = ErrnoStatus("stat " + path);
    ::close(fd);
    return st;
  }
  if (!S_ISREG(sb.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  SafetensorsFile f;
  f.path_ = path;
  f.size_ = static_cast<uint64_t>(sb.st_size);
  if (f.size_ > 0) {
    void* addr = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const Status st = ErrnoStatus("mmap " + path);
      ::close(fd);
      return st;
    }
    const size_t len = f.size_;
    f.mapping_ = std::shared_ptr<const std::byte>(static_cast<const std::byte*>(addr),
                                                  [len](const std::byte* p) {
                                                    ::munmap(const_cast<std::byte*>(p), len);
                                                  });
  }
  ::close(fd);
  const std::span<const std::byte> bytes(f.mapping_.get(), f.size_);
  TANDEM_ASSIGN_OR_RETURN(f.header_, ParseSafetensorsHeader(bytes, path));
  f.names_.reserve(f.header_.tensors.size());
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) {
    f.names_.push_back(f.header_.tensors[i].name);
    f.index_.emplace(f.header_.tensors[i].name, i);
  }
  return f;
}

StatusOr<TensorView> SafetensorsFile::Get(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return NotFound(path_ + ": no tensor " + DumpJson(nlohmann::json(std::string(name))));
  const SafetensorsEntry& e = header_.tensors[it->second];
  TensorView v;
  v.name = e.name;
  v.dtype = e.dtype;
  v.shape = e.shape;
  v.data = mapping_.get() + header_.data_offset + e.begin;
  v.nbytes = e.end - e.begin;
  v.file = path_;
  return v;
}

}  // namespace tandem::model
