// One published weight version in POSIX shared memory (docs/weights.md "The
// shm segment"; issue #15 item 1, the `shm` transport). Torch-free: the
// bytes and the header; shm_transport.h moves ParameterSets through it.
//
// Layout of the segment /NAME (little-endian):
//   [0, 4096)            SegmentHeader (below); the rest of the page is zero
//   [4096, M)            the manifest's buffers, in order, each starting at a
//                        multiple of 4096 (buffer b at 4096 + sum over j < b of
//                        RoundUp(bytes_j, 4096)); M is the end of the last one
//   [M, M + L)           the manifest's JSON (weight_manifest.h), L bytes
// The segment is exactly M + L bytes.
//
// Publishing (ShmSegment::Create, buffer(), Seal): the name is created
// O_EXCL (a leftover of the same name is unlinked first), sized with
// ftruncate and posix_fallocate (a full /dev/shm is ResourceExhausted
// here, never a SIGBUS later), mapped, the buffers written by the caller;
// Seal writes the manifest with its digest, the header fields, and LAST the
// magic (a release store). A segment whose magic is not kSealedMagic is
// one being written, or whose writer died: readers refuse it.
//
// Reading (Open): every byte is hostile. The header must be sealed, of this
// layout, consistent with the segment's size (fstat), the manifest's bytes
// must match their digest and parse strictly (ParseWeightManifest), its
// version must be the header's and its buffers must tile [4096, M) exactly.
// Errors are values naming the segment and what was wrong: NotFound (no
// such segment: never published, or freed), FailedPrecondition (not sealed),
// DataLoss (sealed but inconsistent or corrupt). VerifyDigest checks the
// buffers' bytes against the manifest's digest (a full pass).
//
// Acknowledgements: the header holds `expected_readers` (set by the
// publisher) and an `acks` counter. Acknowledge() adds one atomically
// (once per ShmSegment object); the reader whose ack reaches
// expected_readers unlinks the name. The memory is returned when the name is
// gone and every mapping is closed; the publisher keeps none after Seal.
// expected_readers = 0: never freed by acks (by replacement or
// RemoveSegments only). A reader killed before it acknowledged leaves the
// segment to the publisher (replacement, destruction) or the job's end.
// Limit: a hostile process that shrinks a segment a reader has mapped makes
// the reader's next access fault (SIGBUS); tandem's own writers never do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/weights/weight_manifest.h"
#include "common/xxh64.h"

namespace tandem::weights {

inline constexpr uint64_t kSealedMagic = 0x31585757444e4554ull;  // "TENDWWX1"
inline constexpr uint32_t kSegmentLayout = 1;
inline constexpr uint64_t kSegmentAlign = 4096;
inline constexpr uint64_t kMaxManifestBytes = 64ull << 20;
inline constexpr uint32_t kMaxExpectedReaders = 1u << 20;

struct SegmentHeader {
  uint64_t magic;             // kSealedMagic once whole; written last
  uint32_t layout;            // kSegmentLayout
  uint32_t header_bytes;      // kSegmentAlign
  uint64_t segment_bytes;     // the whole segment
  uint64_t manifest_offset;   // M
  uint64_t manifest_bytes;    // L
  uint64_t manifest_digest;   // XXH64 of the manifest's JSON
  int64_t version;            // the manifest's version
  uint32_t expected_readers;  // acks that free the segment (0: none)
  uint32_t acks;              // readers that acknowledged (atomic)
  int64_t publisher_pid;      // for messages
};

// A valid shm name: "/" then 1..200 of [A-Za-z0-9._-], not "." or "..".
Status ValidateSegmentName(std::string_view name);
// "/tandem-<job>-<task>-v": the names of one publisher's versions, job and
// task with any byte outside [A-Za-z0-9._] replaced by '_'.
std::string SegmentPrefix(std::string_view job, std::string_view task);
// "/tandem-<job>-": every segment of a job (RemoveSegments when it ends).
std::string JobSegmentPrefix(std::string_view job);

class ShmSegment {
 public:
  // Writer side: see the file comment. `manifest` must be valid (its
  // digest is ignored until Seal).
  static StatusOr<ShmSegment> Create(const std::string& name, const WeightManifest& manifest,
                                     uint32_t expected_readers);
  std::byte* mutable_buffer(int i);
  // Writes the manifest with `digest`, the header, then the magic, and
  // unmaps the segment (the publisher keeps no mapping).
  Status Seal(uint64_t digest);

  // Reader side.
  static StatusOr<ShmSegment> Open(const std::string& name);
  const WeightManifest& manifest() const { return manifest_; }
  const std::byte* buffer(int i) const;
  Status VerifyDigest() const;
  // Counts this reader's ack (once; later calls do nothing) and unlinks the
  // name when it was the last expected one.
  Status Acknowledge();

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }

  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

 private:
  ShmSegment() = default;
  void Unmap();
  SegmentHeader* header() const { return reinterpret_cast<SegmentHeader*>(header_page_); }

  std::string name_;
  std::byte* base_ = nullptr;         // the whole segment (read-only for readers)
  std::byte* header_page_ = nullptr;  // the header page, writable (acks; the writer's header)
  uint64_t size_ = 0;
  WeightManifest manifest_;
  std::vector<uint64_t> buffer_offsets_;
  std::string manifest_json_;  // writer: the manifest without its digest, for Seal's size check
  bool acknowledged_ = false;
  bool writer_ = false;
};

// Where buffer b of `m` starts in a segment, and the end M of the last buffer.
std::vector<uint64_t> SegmentBufferOffsets(const WeightManifest& m, uint64_t* data_end);

// Unlinks /name; ok when it does not exist.
Status UnlinkSegment(const std::string& name);
// The size of /name, NotFound when it does not exist (freed).
StatusOr<uint64_t> SegmentSize(const std::string& name);
// The names ("/..." ) of the segments in /dev/shm that start with `prefix`.
std::vector<std::string> ListSegments(std::string_view prefix);
// Unlinks every segment whose name starts with `prefix` (a publisher's
// prefix, or "/tandem-<job>-" when the job ends); returns how many.
size_t RemoveSegments(std::string_view prefix);

// memcpy(dst, src, n) in chunks that stay in cache, each chunk hashed from
// dst right after it is written (the publisher's copy and digest in one pass).
void CopyHashing(void* dst, const void* src, size_t n, Xxh64& digest);

}  // namespace tandem::weights
