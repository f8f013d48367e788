// Checkpoint write and read(verify) throughput against the disk's own
// sequential bandwidth, in the same run, on the same bytes, in the same
// directory (issue #15 "Performance"; figures in docs/benchmarks.md
// "Checkpoints (CPU machine)").
//
//   baseline write: the same files written with write(2) in 4 MiB pieces,
//                   each fsync'd, the directory fsync'd (what `dd conv=fsync` does);
//   checkpoint write: Begin, AddFile per file, Commit (fsync per file, the
//                   manifest, directory fsyncs, rename, parent fsync, rotation);
//   baseline read:  the files read back in 4 MiB pieces, nothing else;
//   checkpoint read: FindLatestCheckpoint(Verify::kDigests) (every byte
//                   read and hashed, the manifest parsed, sizes checked).
// Before each read the files' pages are dropped from the page cache
// (posix_fadvise DONTNEED on each file, not the machine-wide drop_caches),
// so reads come from the disk (or the hypervisor's cache beneath it).
// The previous round's files are deleted (and sync(2) run) before the
// writes, outside the timings. Each measurement is repeated --reps times, alternating baseline and
// checkpoint; the best and the median are printed, then the ratios
// checkpoint/baseline (the best: what the disk can do; the median: what a
// shared, noisy machine gave).
//
// Usage: checkpoint_bench [--mib 256] [--files 4] [--reps 3] [--dir DIR]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/log.h"
#include "workers/checkpoint/checkpoint_digest.h"
#include "workers/checkpoint/checkpoint_fs.h"
#include "workers/checkpoint/checkpoint_reader.h"
#include "workers/checkpoint/checkpoint_writer.h"

namespace tc = tandem::checkpoint;
namespace fs = std::filesystem;

namespace {

constexpr size_t kChunk = 4u << 20;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "checkpoint_bench: %s\n", what.c_str());
  std::exit(1);
}
void Check(const tandem::Status& s) {
  if (!s.ok()) Die(s.ToString());
}

double Seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double Best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

void DropCache(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    tc::Fd fd(::open(e.path().c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.valid()) (void)::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
  }
}

void BaselineWrite(const std::string& dir, const std::vector<std::string>& files) {
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string path = dir + "/file-" + std::to_string(i);
    tc::Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) Die("open " + path);
    const auto bytes = std::as_bytes(std::span(files[i].data(), files[i].size()));
    for (size_t at = 0; at < bytes.size(); at += kChunk)
      Check(tc::WriteAll(fd.get(), bytes.subspan(at, std::min(kChunk, bytes.size() - at)), path));
    Check(tc::Fsync(fd.get(), path));
    Check(fd.Close(path));
  }
  Check(tc::FsyncDir(dir));
}

uint64_t BaselineRead(const std::string& dir) {
  std::vector<std::byte> buf(kChunk);
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    tc::Fd fd(::open(e.path().c_str(), O_RDONLY | O_CLOEXEC));
    (void)::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    for (size_t n; (n = tc::ReadFull(fd.get(), buf, e.path().string()).value()) > 0;) total += n;
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 256, n_files = 4;
  int reps = 3;
  std::string dir = fs::temp_directory_path().string() + "/checkpoint_bench-" + std::to_string(::getpid());
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--mib") mib = std::stoul(v);
    else if (k == "--files") n_files = std::stoul(v);
    else if (k == "--reps") reps = std::stoi(v);
    else if (k == "--dir") dir = v;
    else Die("unknown flag " + k);
  }
  if (mib == 0 || n_files == 0 || reps < 1) Die("--mib, --files and --reps must be positive");
  tandem::log::Init("warn");
  const size_t total = mib << 20;
  std::vector<std::string> files(n_files);
  std::mt19937_64 rng(std::random_device{}());
  for (size_t i = 0; i < n_files; ++i) {
    files[i].resize(total / n_files + (i == 0 ? total % n_files : 0));
    for (size_t at = 0; at + 8 <= files[i].size(); at += 8) {
      const uint64_t r = rng();
      std::memcpy(files[i].data() + at, &r, 8);
    }
  }
  const std::string base_dir = dir + "/baseline", root = dir + "/ckpt";
  auto writer = tc::CheckpointWriter::Open(root, {.keep = 1});
  Check(writer.status());

  std::vector<double> bw, cw, br, cr, hash;
  for (int r = 0; r < reps; ++r) {
    // Deleting the previous round's files is left out of both timings.
    fs::remove_all(base_dir);
    fs::create_directories(base_dir);
    const auto old = tc::ListStepDirs(root);
    Check(old.status());
    for (const auto& d : *old) fs::remove_all(d.path);
    ::sync();
    // Alternate which goes first, so neither always meets the disk still
    // busy with the other's data.
    const auto baseline_write = [&] { bw.push_back(Seconds([&] { BaselineWrite(base_dir, files); })); };
    const auto checkpoint_write = [&] {
      cw.push_back(Seconds([&] {
        auto p = writer->Begin(static_cast<uint64_t>(r + 1), static_cast<uint64_t>(r + 1));
        Check(p.status());
        for (size_t i = 0; i < n_files; ++i)
          Check(p->AddFile("model/shard-" + std::to_string(i) + ".safetensors", files[i]));
        Check(p->Commit({{"bench", true}}).status());
      }));
    };
    if (r % 2 == 0) {
      baseline_write();
      ::sync();
      checkpoint_write();
    } else {
      checkpoint_write();
      ::sync();
      baseline_write();
    }
    DropCache(base_dir);
    br.push_back(Seconds([&] {
      if (BaselineRead(base_dir) != total) Die("baseline read short");
    }));
    DropCache(root);
    cr.push_back(Seconds([&] {
      auto got = tc::FindLatestCheckpoint(root, tc::Verify::kDigests);
      Check(got.status());
      if (got->manifest.step != static_cast<uint64_t>(r + 1)) Die("read the wrong checkpoint");
    }));
    hash.push_back(Seconds([&] {
      uint64_t x = 0;
      for (const auto& f : files) x ^= tc::DigestOf(std::as_bytes(std::span(f.data(), f.size())));
      if (x == 42) std::puts("");
    }));
  }
  fs::remove_all(dir);
  for (int r = 0; r < reps; ++r)
    std::fprintf(stderr, "rep %d (%s first): write baseline %.0f ms checkpoint %.0f ms; read baseline %.0f ms checkpoint %.0f ms\n", r,
                 r % 2 == 0 ? "baseline" : "checkpoint", bw[r] * 1e3, cw[r] * 1e3, br[r] * 1e3, cr[r] * 1e3);
  const double mb = static_cast<double>(total) / 1e6;
  auto row = [&](const char* what, const std::vector<double>& t) {
    std::printf("| %-44s | %8.1f | %8.1f | %8.0f | %8.0f |\n", what, Best(t) * 1e3, Median(t) * 1e3, mb / Best(t),
                mb / Median(t));
  };
  std::printf("checkpoint_bench: %zu MiB in %zu files, %d reps, dir %s\n\n", mib, n_files, reps, dir.c_str());
  std::printf("| %-44s | %8s | %8s | %8s | %8s |\n|---|---|---|---|---|\n", "what", "best ms", "median ms",
              "best MB/s", "med MB/s");
  row("baseline write (write + fsync per file, dir)", bw);
  row("checkpoint write (Begin, AddFile, Commit)", cw);
  row("baseline read (cold, 4 MiB reads)", br);
  row("checkpoint read, Verify::kDigests (cold)", cr);
  row("xxh64 over the bytes in memory", hash);
  std::printf("\nratio write: checkpoint / baseline = %.2f (best), %.2f (median)\n", Best(bw) / Best(cw),
              Median(bw) / Median(cw));
  std::printf("ratio read:  checkpoint / baseline = %.2f (best), %.2f (median)\n", Best(br) / Best(cr),
              Median(br) / Median(cr));
  return 0;
}
