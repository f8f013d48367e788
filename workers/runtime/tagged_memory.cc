// Tagged device memory: pools, release/resume, tag specs (tagged_memory.h).
#include "workers/runtime/tagged_memory.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "common/log.h"

namespace tandem::memory {

namespace {
size_t RoundUp(size_t n, size_t g) { return (n + g - 1) / g * g; }
}  // namespace

StatusOr<uint64_t> ParseBytes(std::string_view text) {
  uint64_t value = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || p == text.data()) return InvalidArgument("size '" + std::string(text) + "': expected a number");
  std::string_view unit(p, static_cast<size_t>(text.data() + text.size() - p));
  uint64_t mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KiB" || unit == "K") mult = 1ull << 10;
  else if (unit == "MiB" || unit == "M") mult = 1ull << 20;
  else if (unit == "GiB" || unit == "G") mult = 1ull << 30;
  else if (unit == "KB") mult = 1000ull;
  else if (unit == "MB") mult = 1000ull * 1000;
  else if (unit == "GB") mult = 1000ull * 1000 * 1000;
  else return InvalidArgument("size '" + std::string(text) + "': unknown unit '" + std::string(unit) + "' (B, KiB, MiB, GiB, KB, MB, GB)");
  if (value > (1ull << 50) / mult) return InvalidArgument("size '" + std::string(text) + "': too large");
  return value * mult;
}

StatusOr<TagSpec> ParseTagSpec(std::string_view text) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return InvalidArgument("tag '" + std::string(text) + "': expected NAME=SIZE[:backup]");
  TagSpec spec;
  spec.name = std::string(text.substr(0, eq));
  for (char c : spec.name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return InvalidArgument("tag '" + std::string(text) + "': name must be [a-z0-9_]");
  std::string_view rest = text.substr(eq + 1);
  size_t colon = rest.find(':');
  std::string_view size = rest.substr(0, colon);
  if (colon != std::string_view::npos) {
    std::string_view flag = rest.substr(colon + 1);
    if (flag == "backup") spec.backup = true;
    else if (flag == "grow") spec.grow = true;
    else if (flag != "discard")
      return InvalidArgument("tag '" + std::string(text) + "': flag must be backup, discard or grow");
  }
  TANDEM_ASSIGN_OR_RETURN(spec.bytes, ParseBytes(size), "tag " + spec.name);
  if (spec.bytes == 0) return InvalidArgument("tag '" + std::string(text) + "': size must be positive");
  return spec;
}

StatusOr<std::unique_ptr<TaggedMemory>> TaggedMemory::Create(std::unique_ptr<MemoryBackend> backend,
                                                            const std::vector<TagSpec>& tags) {
  if (!backend) return InvalidArgument("tagged memory: no backend");
  std::unique_ptr<TaggedMemory> tm(new TaggedMemory(std::move(backend)));
  for (const auto& spec : tags) {
    if (tm->pools_.count(spec.name)) return InvalidArgument("tagged memory: tag " + spec.name + " given twice");
    if (spec.grow && spec.backup) return InvalidArgument("tag " + spec.name + ": a grow tag cannot be backed up");
    Pool pool;
    pool.spec = spec;
    size_t bytes = RoundUp(spec.bytes, tm->backend_->granularity());
    TANDEM_ASSIGN_OR_RETURN(pool.mapping, tm->backend_->Reserve(bytes), "tag " + spec.name);
    Pool& p = tm->pools_.emplace(spec.name, std::move(pool)).first->second;
    p.resident = true;
    if (!spec.grow) {
      p.chunks.push_back({p.mapping.base, p.mapping.bytes, 0});
      Status mapped = tm->backend_->Map(p.chunks.back());
      if (!mapped.ok()) p.chunks.clear();
      TANDEM_RETURN_IF_ERROR(mapped, "tag " + spec.name + ": map");
    }
    if (spec.backup) {
      TANDEM_ASSIGN_OR_RETURN(p.host_backup, tm->backend_->AllocHost(p.mapping.bytes), "tag " + spec.name + ": host backup");
    }
    log::Debug("memory", "pool created tag={} bytes={} backup={} grow={} base={}", spec.name, p.mapping.bytes,
               spec.backup, spec.grow, p.mapping.base);
  }
  return tm;
}

TaggedMemory::~TaggedMemory() {
  for (auto& [name, p] : pools_) {
    if (p.host_backup) backend_->FreeHost(p.host_backup, p.mapping.bytes);
    if (p.resident)
      for (Mapping& c : p.chunks) {
        Status st = backend_->Unmap(c);
        if (!st.ok()) log::Warn("memory", "tag {}: unmap: {}", name, st.message());
      }
    if (p.mapping.base) {
      Status st = backend_->Unreserve(p.mapping);
      if (!st.ok()) log::Warn("memory", "tag {}: unreserve: {}", name, st.message());
    }
  }
}

StatusOr<TaggedMemory::Pool*> TaggedMemory::Find(const std::string& tag) {
  auto it = pools_.find(tag);
  if (it == pools_.end()) return NotFound("tag " + tag + ": not managed by this worker");
  return &it->second;
}

StatusOr<const TaggedMemory::Pool*> TaggedMemory::Find(const std::string& tag) const {
  auto it = pools_.find(tag);
  if (it == pools_.end()) return NotFound("tag " + tag + ": not managed by this worker");
  return &it->second;
}

uint64_t TaggedMemory::MappedBytes(const Pool& p) {
  uint64_t sum = 0;
  for (const Mapping& c : p.chunks) sum += c.bytes;
  return sum;
}

StatusOr<void*> TaggedMemory::Allocate(const std::string& tag, size_t bytes, size_t align) {
  TANDEM_ASSIGN_OR_RETURN(Pool * p, Find(tag));
  if (!p->resident) return FailedPrecondition("tag " + tag + ": released; resume it before allocating");
  if (align == 0 || (align & (align - 1)) != 0) return InvalidArgument("allocate: alignment must be a power of two");
  size_t off = RoundUp(p->next, align);
  if (off + bytes > p->spec.bytes)
    return ResourceExhausted("tag " + tag + ": " + std::to_string(bytes) + " bytes do not fit (" +
                             std::to_string(p->spec.bytes - std::min(off, static_cast<size_t>(p->spec.bytes))) + " left)");
  const size_t mapped = MappedBytes(*p);
  if (p->spec.grow && off + bytes > mapped) {
    Mapping chunk{static_cast<char*>(p->mapping.base) + mapped, RoundUp(off + bytes - mapped, backend_->granularity()), 0};
    TANDEM_RETURN_IF_ERROR(backend_->Map(chunk), "tag " + tag + ": map " + std::to_string(chunk.bytes) + " bytes");
    p->chunks.push_back(chunk);
  }
  p->next = off + bytes;
  return static_cast<char*>(p->mapping.base) + off;
}

StatusOr<void*> TaggedMemory::Base(const std::string& tag) const {
  TANDEM_ASSIGN_OR_RETURN(const Pool* p, Find(tag));
  return p->mapping.base;
}

StatusOr<size_t> TaggedMemory::Size(const std::string& tag) const {
  TANDEM_ASSIGN_OR_RETURN(const Pool* p, Find(tag));
  return static_cast<size_t>(p->spec.bytes);
}

StatusOr<uint64_t> TaggedMemory::Footprint(const std::string& tag) const {
  TANDEM_ASSIGN_OR_RETURN(const Pool* p, Find(tag));
  return p->spec.grow ? MappedBytes(*p) : p->spec.bytes;
}

StatusOr<TaggedMemory::Moved> TaggedMemory::Release(const std::string& tag) {
  TANDEM_ASSIGN_OR_RETURN(Pool * p, Find(tag), "release");
  Moved moved;
  if (!p->resident) {
    moved.no_op = true;
    return moved;
  }
  if (p->spec.backup) {
    TANDEM_RETURN_IF_ERROR(backend_->CopyToHost(p->host_backup, p->mapping.base, p->mapping.bytes),
                           "release " + tag + ": back up to host");
    p->backup_valid = true;
    moved.copied_bytes = p->mapping.bytes;
  }
  for (Mapping& c : p->chunks) TANDEM_RETURN_IF_ERROR(backend_->Unmap(c), "release " + tag);
  p->resident = false;
  moved.freed_bytes = MappedBytes(*p);
  log::Debug("memory", "released tag={} freed={} copied={}", tag, moved.freed_bytes, moved.copied_bytes);
  return moved;
}

StatusOr<TaggedMemory::Moved> TaggedMemory::Resume(const std::string& tag) {
  TANDEM_ASSIGN_OR_RETURN(Pool * p, Find(tag), "resume");
  Moved moved;
  if (p->resident) {
    moved.no_op = true;
    return moved;
  }
  for (size_t i = 0; i < p->chunks.size(); ++i) {
    Status st = backend_->Map(p->chunks[i]);
    if (!st.ok()) {  // give back what this resume mapped: the tag stays released
      for (size_t j = 0; j < i; ++j) (void)backend_->Unmap(p->chunks[j]);
      return Status(st.code(), "resume " + tag + ": " + st.message());
    }
  }
  p->resident = true;
  moved.mapped_bytes = MappedBytes(*p);
  if (p->spec.backup && p->backup_valid) {
    TANDEM_RETURN_IF_ERROR(backend_->CopyToDevice(p->mapping.base, p->host_backup, p->mapping.bytes),
                           "resume " + tag + ": restore from host");
    moved.copied_bytes = p->mapping.bytes;
  }
  log::Debug("memory", "resumed tag={} mapped={} copied={}", tag, moved.mapped_bytes, moved.copied_bytes);
  return moved;
}

bool TaggedMemory::Resident(const std::string& tag) const {
  auto it = pools_.find(tag);
  return it != pools_.end() && it->second.resident;
}

bool TaggedMemory::HasBackup(const std::string& tag) const {
  auto it = pools_.find(tag);
  return it != pools_.end() && it->second.spec.backup;
}

std::map<std::string, uint64_t> TaggedMemory::ResidentPerTag() const {
  std::map<std::string, uint64_t> out;
  for (const auto& [name, p] : pools_) out[name] = p.resident ? MappedBytes(p) : 0;
  return out;
}

uint64_t TaggedMemory::ResidentBytes() const {
  uint64_t sum = 0;
  for (const auto& [name, p] : pools_) sum += p.resident ? MappedBytes(p) : 0;
  return sum;
}

control::Residency TaggedMemory::Residency() const {
  control::Residency r;
  r.tags = ResidentPerTag();
  r.device = backend_->Usage(ResidentBytes());
  return r;
}

std::vector<TagSpec> TaggedMemory::Specs() const {
  std::vector<TagSpec> out;
  for (const auto& [name, p] : pools_) out.push_back(p.spec);
  return out;
}

std::vector<std::string> TaggedMemory::TagNames() const {
  std::vector<std::string> out;
  for (const auto& [name, p] : pools_) out.push_back(name);
  return out;
}

Status TaggedMemory::Write(const std::string& tag, size_t offset, const void* src, size_t bytes) {
  TANDEM_ASSIGN_OR_RETURN(Pool * p, Find(tag), "write");
  if (!p->resident) return FailedPrecondition("write " + tag + ": released");
  const uint64_t end = std::min<uint64_t>(p->spec.bytes, MappedBytes(*p));
  if (offset > end || bytes > end - offset) return InvalidArgument("write " + tag + ": out of range");
  return backend_->CopyToDevice(static_cast<char*>(p->mapping.base) + offset, src, bytes);
}

Status TaggedMemory::Read(const std::string& tag, size_t offset, void* dst, size_t bytes) const {
  TANDEM_ASSIGN_OR_RETURN(const Pool* p, Find(tag), "read");
  if (!p->resident) return FailedPrecondition("read " + tag + ": released");
  const uint64_t end = std::min<uint64_t>(p->spec.bytes, MappedBytes(*p));
  if (offset > end || bytes > end - offset) return InvalidArgument("read " + tag + ": out of range");
  return backend_->CopyToHost(dst, static_cast<const char*>(p->mapping.base) + offset, bytes);
}

}  // namespace tandem::memory
