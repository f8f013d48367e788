// The shm transport (shm_transport.h): ParameterSets through shm segments.
#include "workers/weights/shm_transport.h"

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <vector>

#include "workers/weights/parameter_manifest.h"
#include "workers/weights/shm_segment.h"

namespace tandem::weights {
namespace {

class ShmSource final : public WeightSource {
 public:
  explicit ShmSource(ShmSegment segment) : segment_(std::move(segment)) {}

  Status LoadParameters(const model::ParameterSet& params) override {
    const std::string what = "load_weights from " + Describe();
    TANDEM_RETURN_IF_ERROR(CheckReaderMatches(segment_.manifest(), params), what);
    TANDEM_RETURN_IF_ERROR(segment_.VerifyDigest(), what);
    std::vector<const std::byte*> bytes;
    for (size_t b = 0; b < segment_.manifest().buffers.size(); ++b) bytes.push_back(segment_.buffer(static_cast<int>(b)));
    TANDEM_RETURN_IF_ERROR(CopyIntoParameters(segment_.manifest(), bytes, params), what);
    return Status::Ok();
  }
  Status Acknowledge() override { return segment_.Acknowledge(); }
  std::string Describe() const override { return "shm:" + segment_.name(); }
  std::optional<int64_t> version() const override { return segment_.manifest().version; }

 private:
  ShmSegment segment_;
};

}  // namespace

ShmPublisher::ShmPublisher(ShmOptions options)
    : options_(std::move(options)), prefix_(SegmentPrefix(options_.job, options_.task)) {}

ShmPublisher::~ShmPublisher() { ReleaseAll(); }

StatusOr<std::string> ShmPublisher::Publish(int64_t version, const model::ParameterSet& params) {
  if (version <= last_version_)
    return FailedPrecondition("publish_weights: version " + std::to_string(version) + " after version " +
                              std::to_string(last_version_) + " (versions must grow)");
  TANDEM_ASSIGN_OR_RETURN(WeightManifest manifest, ManifestOf(version, params));
  const std::string name = prefix_ + std::to_string(version);
  TANDEM_ASSIGN_OR_RETURN(ShmSegment segment, ShmSegment::Create(name, manifest, options_.expected_readers));
  Xxh64 digest;
  try {
    for (size_t b = 0; b < params.buffers().size(); ++b) {
      const at::Tensor& src = params.buffers()[b];
      std::byte* dst = segment.mutable_buffer(static_cast<int>(b));
      const size_t n = manifest.buffers[b].bytes;
      if (src.device().is_cpu()) {
        CopyHashing(dst, src.data_ptr(), n, digest);
      } else {
        at::from_blob(dst, {static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kByte)).copy_(src.view(at::kByte));
        digest.Update(dst, n);
      }
      // The padding up to the next buffer stays zero (posix_fallocate).
    }
  } catch (const c10::Error& e) {
    (void)UnlinkSegment(name);
    return Internal("publish_weights " + name + ": " + e.what_without_backtrace());
  }
  if (Status st = segment.Seal(digest.Digest()); !st.ok()) {
    (void)UnlinkSegment(name);
    return st;
  }
  // Replace: every other segment of this prefix (the previous version, a
  // dead writer's leftover) goes once the new one is whole.
  for (const std::string& other : ListSegments(prefix_))
    if (other != name) (void)UnlinkSegment(other);
  current_ = name;
  last_version_ = version;
  return "shm:" + name;
}

uint64_t ShmPublisher::ExportedBytes() {
  if (current_.empty()) return 0;
  StatusOr<uint64_t> size = SegmentSize(current_);
  return size.ok() ? *size : 0;
}

void ShmPublisher::ReleaseAll() {
  RemoveSegments(prefix_);
  current_.clear();
}

StatusOr<std::unique_ptr<WeightSource>> OpenShmSource(std::string_view name) {
  TANDEM_ASSIGN_OR_RETURN(ShmSegment segment, ShmSegment::Open(std::string(name)), "load_weights");
  return std::unique_ptr<WeightSource>(new ShmSource(std::move(segment)));
}

}  // namespace tandem::weights
