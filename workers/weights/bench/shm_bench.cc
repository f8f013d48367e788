// shm publish+load against memcpy of the same bytes (docs/benchmarks.md
// "Weight exchange (shm, CPU)"; issue #15 "Performance").
//   weights_shm_bench [MiB] [reps]     (default 1024 MiB, 5 repetitions)
// A CPU fp32 parameter set of about MiB (hidden 1024, the vocabulary sized to
// fit, untied embedding and LM head) is published through ShmPublisher and
// loaded by a second parameter set of the same config (OpenWeightSource,
// LoadParameters, Acknowledge) in the same process: the path a colocated
// rollout takes. The baseline is one memcpy of the same bytes between two
// pre-faulted buffers, and, as the floor of any segment-per-version design,
// one memcpy into a freshly created shm segment. Best of `reps` for each;
// prints GB/s and the ratio.
// Publish+load is two copies and two digest passes, so the ideal ratio
// against one memcpy is below 1.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "workers/model/config.h"
#include "workers/model/parameter_set.h"
#include "workers/weights/shm_segment.h"
#include "workers/weights/shm_transport.h"
#include "workers/weights/weight_source.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

tandem::model::ModelConfig BenchConfig(int64_t mib) {
  tandem::model::ModelConfig c = tandem::model::DefaultConfig(tandem::model::Architecture::kQwen3);
  c.hidden_size = 1024;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 128;
  c.intermediate_size = 2048;
  c.max_position_embeddings = 4096;
  c.tie_word_embeddings = false;
  const int64_t layer_bytes = (4 * 1024 * 1024 + 3 * 2048 * 1024) * 4;
  c.vocab_size = std::max<int64_t>(1024, (mib * (1 << 20) - layer_bytes) / (2 * 1024 * 4));
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 1024;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const tandem::model::ModelConfig c = BenchConfig(mib);
  if (auto st = tandem::model::ValidateModelConfig(c); !st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  const at::Device cpu(at::kCPU);
  tandem::model::ParameterSet pub_params = tandem::model::ParameterSet::Create(c, cpu, at::kFloat);
  tandem::model::ParameterSet reader = tandem::model::ParameterSet::Create(c, cpu, at::kFloat);
  pub_params.buffers()[0].normal_();
  reader.buffers()[0].zero_();
  const size_t bytes = static_cast<size_t>(pub_params.buffers()[0].nbytes());

  std::vector<char> dst(bytes, 1);  // pre-faulted, as the reader's buffer is
  double best_memcpy = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t = Clock::now();
    std::memcpy(dst.data(), pub_params.buffers()[0].data_ptr(), bytes);
    best_memcpy = std::min(best_memcpy, Since(t));
  }

  // The floor of any segment-per-version design: one memcpy into a fresh
  // shm segment (ftruncate, posix_fallocate, mmap, first touch, unlink).
  double best_fresh = 1e30;
  for (int r = 0; r < reps; ++r) {
    const std::string name = "/tandem-bench-fresh-" + std::to_string(::getpid());
    const auto t = Clock::now();
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0 || ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) != 0) {
      std::perror("shm");
      return 1;
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return 1;
    std::memcpy(p, pub_params.buffers()[0].data_ptr(), bytes);
    ::munmap(p, bytes);
    ::shm_unlink(name.c_str());
    best_fresh = std::min(best_fresh, Since(t));
  }

  tandem::weights::ShmPublisher publisher({"bench" + std::to_string(::getpid()), "actor", 1});
  double best_pub = 1e30, best_load = 1e30, best_total = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    auto source = publisher.Publish(r + 1, pub_params);
    const double pub_s = Since(t0);
    if (!source.ok()) {
      std::fprintf(stderr, "publish: %s\n", source.status().ToString().c_str());
      return 1;
    }
    const auto t1 = Clock::now();
    auto from = tandem::weights::OpenWeightSource(*source);
    tandem::Status st = from.ok() ? (*from)->LoadParameters(reader) : from.status();
    if (st.ok()) st = (*from)->Acknowledge();
    const double load_s = Since(t1);
    if (!st.ok()) {
      std::fprintf(stderr, "load: %s\n", st.ToString().c_str());
      return 1;
    }
    best_pub = std::min(best_pub, pub_s);
    best_load = std::min(best_load, load_s);
    best_total = std::min(best_total, pub_s + load_s);
  }
  if (std::memcmp(reader.buffers()[0].data_ptr(), pub_params.buffers()[0].data_ptr(), bytes) != 0) {
    std::fprintf(stderr, "the loaded bytes differ from the published ones\n");
    return 1;
  }
  auto gbs = [&](double s) { return static_cast<double>(bytes) / s / 1e9; };
  std::printf("bytes %zu (%.0f MiB), best of %d\n", bytes, static_cast<double>(bytes) / (1 << 20), reps);
  std::printf("memcpy            %7.2f GB/s  %8.1f ms\n", gbs(best_memcpy), best_memcpy * 1e3);
  std::printf("memcpy, new shm   %7.2f GB/s  %8.1f ms  (fallocate + first touch of 4 KiB pages)\n", gbs(best_fresh),
              best_fresh * 1e3);
  std::printf("shm publish       %7.2f GB/s  %8.1f ms\n", gbs(best_pub), best_pub * 1e3);
  std::printf("shm load          %7.2f GB/s  %8.1f ms\n", gbs(best_load), best_load * 1e3);
  std::printf("shm publish+load  %7.2f GB/s  %8.1f ms  ratio to memcpy %.2f\n", gbs(best_total), best_total * 1e3,
              best_memcpy / best_total);
  std::printf("publish+load against memcpy into a new shm segment: ratio %.2f\n", best_fresh / best_total);
  return 0;
}
