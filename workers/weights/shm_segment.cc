// The shm segment of one weight version (shm_segment.h): create, fill, seal;
// open, validate, verify, acknowledge.
#include "workers/weights/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/bounded_json.h"

namespace tandem::weights {
namespace {

static_assert(sizeof(SegmentHeader) <= kSegmentAlign);

uint64_t RoundUp(uint64_t n) { return (n + kSegmentAlign - 1) / kSegmentAlign * kSegmentAlign; }

bool NameByte(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

std::string Sanitize(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (!NameByte(c) || c == '-') c = '_';
  return out.empty() ? "_" : out;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Status ValidateSegmentName(std::string_view name) {
  if (name.size() < 2 || name[0] != '/')
    return InvalidArgument("shm segment name \"" + std::string(name.substr(0, 64)) + "\": expected \"/\" and a name");
  const std::string_view rest = name.substr(1);
  if (rest.size() > 200)
    return InvalidArgument("shm segment name: " + std::to_string(rest.size()) + " bytes, expected at most 200");
  if (rest == "." || rest == "..") return InvalidArgument("shm segment name \"" + std::string(name) + "\" is not a name");
  for (const char c : rest)
    if (!NameByte(c))
      return InvalidArgument("shm segment name \"" + std::string(name.substr(0, 64)) +
                             "\": only letters, digits, '.', '_' and '-' are allowed");
  return Status::Ok();
}

std::string SegmentPrefix(std::string_view job, std::string_view task) {
  return "/tandem-" + Sanitize(job) + "-" + Sanitize(task) + "-v";
}

std::string JobSegmentPrefix(std::string_view job) { return "/tandem-" + Sanitize(job) + "-"; }

std::vector<uint64_t> SegmentBufferOffsets(const WeightManifest& m, uint64_t* data_end) {
  std::vector<uint64_t> out;
  uint64_t at = kSegmentAlign;
  for (const WeightManifest::Buffer& b : m.buffers) {
    out.push_back(at);
    at += RoundUp(b.bytes);
  }
  if (data_end) *data_end = at;
  return out;
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    Unmap();
    name_ = std::move(o.name_);
    base_ = std::exchange(o.base_, nullptr);
    header_page_ = std::exchange(o.header_page_, nullptr);
    size_ = std::exchange(o.size_, 0);
    manifest_ = std::move(o.manifest_);
    buffer_offsets_ = std::move(o.buffer_offsets_);
    manifest_json_ = std::move(o.manifest_json_);
    acknowledged_ = o.acknowledged_;
    writer_ = o.writer_;
  }
  return *this;
}

ShmSegment::~ShmSegment() { Unmap(); }

void ShmSegment::Unmap() {
  if (header_page_ && header_page_ != base_) ::munmap(header_page_, kSegmentAlign);
  if (base_) ::munmap(base_, size_);
  base_ = header_page_ = nullptr;
}

StatusOr<ShmSegment> ShmSegment::Create(const std::string& name, const WeightManifest& manifest,
                                        uint32_t expected_readers) {
  TANDEM_RETURN_IF_ERROR(ValidateSegmentName(name));
  TANDEM_RETURN_IF_ERROR(ValidateWeightManifest(manifest), "publish " + name);
  if (expected_readers > kMaxExpectedReaders)
    return InvalidArgument("publish " + name + ": expected_readers " + std::to_string(expected_readers) +
                           " is larger than the limit " + std::to_string(kMaxExpectedReaders));
  ShmSegment s;
  s.name_ = name;
  s.writer_ = true;
  s.manifest_ = manifest;
  s.manifest_.digest = 0;
  s.manifest_json_ = DumpJson(ToJson(s.manifest_));  // the digest is fixed-width: Seal's has this size
  uint64_t data_end = 0;
  s.buffer_offsets_ = SegmentBufferOffsets(manifest, &data_end);
  s.size_ = data_end + s.manifest_json_.size();

  TANDEM_RETURN_IF_ERROR(UnlinkSegment(name), "publish " + name + ": remove the leftover");
  Fd fd{::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (fd.fd < 0) return ErrnoStatus("publish: shm_open " + name);
  auto fail = [&](Status st) {
    ::shm_unlink(name.c_str());
    return st;
  };
  if (::ftruncate(fd.fd, static_cast<off_t>(s.size_)) != 0) return fail(ErrnoStatus("publish: ftruncate " + name));
  if (const int err = ::posix_fallocate(fd.fd, 0, static_cast<off_t>(s.size_)); err != 0) {
    if (err == ENOSPC)
      return fail(ResourceExhausted("publish " + name + ": /dev/shm has no room for " + std::to_string(s.size_) +
                                    " bytes"));
    return fail(ErrnoStatus("publish: posix_fallocate " + name, err));
  }
  void* p = ::mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (p == MAP_FAILED) return fail(ErrnoStatus("publish: mmap " + name));
  s.base_ = s.header_page_ = static_cast<std::byte*>(p);
  s.header()->expected_readers = expected_readers;  // read only once the magic is there
  return s;
}

std::byte* ShmSegment::mutable_buffer(int i) {
  return writer_ && base_ ? base_ + buffer_offsets_.at(static_cast<size_t>(i)) : nullptr;
}

Status ShmSegment::Seal(uint64_t digest) {
  if (!writer_ || !base_) return FailedPrecondition("seal " + name_ + ": not a segment being written");
  manifest_.digest = digest;
  const std::string json = DumpJson(ToJson(manifest_));
  if (json.size() != manifest_json_.size())
    return Internal("seal " + name_ + ": the manifest changed size with its digest");
  uint64_t data_end = 0;
  SegmentBufferOffsets(manifest_, &data_end);
  std::memcpy(base_ + data_end, json.data(), json.size());
  SegmentHeader* h = header();
  h->layout = kSegmentLayout;
  h->header_bytes = static_cast<uint32_t>(kSegmentAlign);
  h->segment_bytes = size_;
  h->manifest_offset = data_end;
  h->manifest_bytes = json.size();
  h->manifest_digest = Xxh64Of(json.data(), json.size());
  h->version = manifest_.version;
  h->publisher_pid = ::getpid();
  __atomic_store_n(&h->acks, 0u, __ATOMIC_RELAXED);
  __atomic_store_n(&h->magic, kSealedMagic, __ATOMIC_RELEASE);
  Unmap();
  return Status::Ok();
}

StatusOr<ShmSegment> ShmSegment::Open(const std::string& name) {
  TANDEM_RETURN_IF_ERROR(ValidateSegmentName(name), "load_weights.source");
  const std::string what = "shm segment " + name;
  Fd fd{::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0)};
  if (fd.fd < 0) {
    if (errno == ENOENT) return NotFound(what + ": does not exist (never published, or freed after its readers acknowledged)");
    return ErrnoStatus("shm_open " + name);
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) return ErrnoStatus("fstat " + name);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kSegmentAlign)
    return FailedPrecondition(what + ": " + std::to_string(size) + " bytes, smaller than its header (" +
                              std::to_string(kSegmentAlign) + "): not sealed, its writer has not finished or died mid-publish");
  ShmSegment s;
  s.name_ = name;
  s.size_ = size;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap " + name);
  s.base_ = static_cast<std::byte*>(p);
  void* h = ::mmap(nullptr, kSegmentAlign, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (h == MAP_FAILED) return ErrnoStatus("mmap the header of " + name);
  s.header_page_ = static_cast<std::byte*>(h);

  // A copy of the header, read once after the magic (acquire): the writer
  // never changes it after sealing, and a hostile one is checked as it is.
  if (__atomic_load_n(&s.header()->magic, __ATOMIC_ACQUIRE) != kSealedMagic)
    return FailedPrecondition(what + ": not sealed (no ready magic): its writer has not finished or died mid-publish");
  SegmentHeader hdr;
  std::memcpy(&hdr, s.header_page_, sizeof hdr);
  if (hdr.layout != kSegmentLayout)
    return DataLoss(what + ": header.layout " + std::to_string(hdr.layout) + ", expected " + std::to_string(kSegmentLayout));
  if (hdr.header_bytes != kSegmentAlign)
    return DataLoss(what + ": header.header_bytes " + std::to_string(hdr.header_bytes) + ", expected " +
                    std::to_string(kSegmentAlign));
  if (hdr.segment_bytes != size)
    return DataLoss(what + ": header.segment_bytes " + std::to_string(hdr.segment_bytes) + ", but the segment is " +
                    std::to_string(size) + " bytes (truncated or overwritten)");
  if (hdr.manifest_bytes == 0 || hdr.manifest_bytes > kMaxManifestBytes)
    return DataLoss(what + ": header.manifest_bytes " + std::to_string(hdr.manifest_bytes) + ", expected 1 to " +
                    std::to_string(kMaxManifestBytes));
  if (hdr.manifest_offset < kSegmentAlign || hdr.manifest_offset > size || hdr.manifest_bytes != size - hdr.manifest_offset)
    return DataLoss(what + ": header.manifest_offset " + std::to_string(hdr.manifest_offset) + " and manifest_bytes " +
                    std::to_string(hdr.manifest_bytes) + " do not end the " + std::to_string(size) + "-byte segment");
  if (hdr.expected_readers > kMaxExpectedReaders)
    return DataLoss(what + ": header.expected_readers " + std::to_string(hdr.expected_readers) +
                    " is larger than the limit " + std::to_string(kMaxExpectedReaders));
  const char* json = reinterpret_cast<const char*>(s.base_ + hdr.manifest_offset);
  const std::string text(json, hdr.manifest_bytes);  // a private copy: the bytes we check are the bytes we parse
  if (Xxh64Of(text.data(), text.size()) != hdr.manifest_digest)
    return DataLoss(what + ": the manifest's bytes do not match header.manifest_digest " +
                    DigestString(hdr.manifest_digest) + " (corrupt manifest)");
  TANDEM_ASSIGN_OR_RETURN(s.manifest_, ParseWeightManifest(text), what);
  if (s.manifest_.version != hdr.version)
    return DataLoss(what + ": manifest version " + std::to_string(s.manifest_.version) + ", header.version " +
                    std::to_string(hdr.version));
  uint64_t data_end = 0;
  s.buffer_offsets_ = SegmentBufferOffsets(s.manifest_, &data_end);
  if (data_end != hdr.manifest_offset)
    return DataLoss(what + ": the manifest's buffers end at byte " + std::to_string(data_end) +
                    ", header.manifest_offset is " + std::to_string(hdr.manifest_offset));
  return s;
}

const std::byte* ShmSegment::buffer(int i) const {
  return base_ ? base_ + buffer_offsets_.at(static_cast<size_t>(i)) : nullptr;
}

Status ShmSegment::VerifyDigest() const {
  if (!base_) return FailedPrecondition("verify " + name_ + ": not mapped");
  Xxh64 h;
  for (size_t b = 0; b < manifest_.buffers.size(); ++b) h.Update(base_ + buffer_offsets_[b], manifest_.buffers[b].bytes);
  if (h.Digest() != manifest_.digest)
    return DataLoss("shm segment " + name_ + ": the buffers' digest is " + DigestString(h.Digest()) +
                    ", the manifest says " + DigestString(manifest_.digest) + " (corrupt bytes)");
  return Status::Ok();
}

Status ShmSegment::Acknowledge() {
  if (writer_ || !header_page_) return FailedPrecondition("acknowledge " + name_ + ": not a segment opened for reading");
  if (acknowledged_) return Status::Ok();
  acknowledged_ = true;
  SegmentHeader* h = header();
  const uint32_t expected = __atomic_load_n(&h->expected_readers, __ATOMIC_RELAXED);
  const uint32_t acks = __atomic_add_fetch(&h->acks, 1u, __ATOMIC_ACQ_REL);
  if (expected != 0 && acks == expected) return UnlinkSegment(name_);
  return Status::Ok();
}

Status UnlinkSegment(const std::string& name) {
  if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("shm_unlink " + name);
  return Status::Ok();
}

StatusOr<uint64_t> SegmentSize(const std::string& name) {
  Fd fd{::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0)};
  if (fd.fd < 0) {
    if (errno == ENOENT) return NotFound("shm segment " + name + " does not exist");
    return ErrnoStatus("shm_open " + name);
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) return ErrnoStatus("fstat " + name);
  return static_cast<uint64_t>(st.st_size);
}

std::vector<std::string> ListSegments(std::string_view prefix) {
  std::vector<std::string> out;
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return out;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = std::string("/") + e->d_name;
    if (name.size() >= prefix.size() && name.compare(0, prefix.size(), prefix) == 0) out.push_back(name);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

size_t RemoveSegments(std::string_view prefix) {
  size_t n = 0;
  for (const std::string& name : ListSegments(prefix))
    if (::shm_unlink(name.c_str()) == 0) ++n;
  return n;
}

void CopyHashing(void* dst, const void* src, size_t n, Xxh64& digest) {
  constexpr size_t kChunk = 256 << 10;  // fits L2 beside the source chunk
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (size_t done = 0; done < n;) {
    const size_t k = std::min(kChunk, n - done);
    std::memcpy(d + done, s + done, k);
    digest.Update(d + done, k);
    done += k;
  }
}

}  // namespace tandem::weights
