// tandem-generate: generation of a batch of prompts through the rollout
// engine, greedy or sampled (docs/inference.md "Checking the engine against
// transformers"; scripts/gpu/engine_check.py drives it on the GPU machine).
//
//   tandem-generate --model DIR --prompts PROMPTS.json --out OUT.json
//       [--device cpu|cuda] [--max-new-tokens 32] [--kv-cache-mib 1024]
//       [--block-size 16] [--max-running 256] [--max-step-tokens 8192]
//       [--repeat 1] [--logprobs] [--handoff [--reload DIR]] [--cuda-graphs auto|none|1,2,4,...]
//       [--n 1] [--temperature 0] [--profile TRACE.json]
//
// PROMPTS.json: {"prompts": [[token ids], ...]}. Every prompt is submitted
// at once (ignore_eos; while the engine is paused, so that runs of the same
// prompts batch alike; from an empty prefix cache), `--repeat` times, for
// `--n` samples each (sharing the prompt's prefill, as a GRPO group does)
// at `--temperature` (0: greedy; prompt i is seeded i, so runs draw
// alike); OUT.json:
//   {"outputs": [[ids], ...] (prompt-major: prompt i's sample s at i * n + s),
//    "logprobs": [[log p of each], ...] (--logprobs),
//    "runs": [{"seconds", "generated_tokens", "tokens_per_s", "steps",
//              "decode_graph_steps", "step_ms": {"plan", "launch", "wait", "commit"}}, ...],
//    "handoff": {...}}
// "step_ms" is the engine thread's mean time per step of the run, by part
// (EngineStats: host planning, launching, waiting for the device, committing).
// --profile: the last run goes under LibTorch's Kineto profiler (CUDA
// kernels, CPU ops), its Chrome trace written to TRACE.json
// (scripts/gpu/engine_profile.py summarises it).
// The model, the KV pool and the decode graphs' memory live in tagged
// memory (tagged_model.h). With --handoff, after the first run the engine
// is paused (retract), every tag is released and the device reading taken,
// then resumed (with --reload, new weights are loaded from DIR through
// load_weights' path, in place), and the prompts run again: "handoff"
// reports the pools' bytes, the device's used bytes at start and before and
// after the release, the fraction of the pools and of everything the worker
// added to the device that came back, the release and resume times, whether
// the second run gave the same tokens, and its outputs and log-probs.
#include <ATen/core/ivalue.h>  // before ATen.h (clang 14, C++20)
#include <ATen/ATen.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/bounded_json.h"
#include "workers/inference/generator.h"
#include "workers/inference/tagged_model.h"
#include "workers/model/checkpoint.h"

namespace inf = tandem::inference;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Flags {
  std::string model, prompts, out, device = "cpu", cuda_graphs = "auto", profile;
  int64_t max_new_tokens = 32, kv_cache_mib = 1024, max_running = 256, max_step_tokens = 8192, n = 1;
  double temperature = 0;
  int32_t block_size = 16;
  int repeat = 1;
  bool handoff = false, logprobs = false;
  std::string reload;
};

int Usage(const std::string& why) {
  std::cerr << "tandem-generate: " << why << "\n"
            << "usage: tandem-generate --model DIR --prompts PROMPTS.json --out OUT.json [--device cpu|cuda]\n"
               "       [--max-new-tokens N] [--kv-cache-mib N] [--block-size N] [--max-running N]\n"
               "       [--max-step-tokens N] [--repeat N] [--logprobs] [--handoff [--reload DIR]] [--cuda-graphs auto|none|SIZES]\n"
               "       [--n N] [--temperature T] [--profile TRACE.json]\n";
  return 2;
}

bool ParseFlags(int argc, char** argv, Flags& f, std::string& error) {
  std::map<std::string, std::string*> text = {{"--model", &f.model}, {"--prompts", &f.prompts},
                                              {"--out", &f.out}, {"--device", &f.device},
                                              {"--cuda-graphs", &f.cuda_graphs}, {"--reload", &f.reload},
                                              {"--profile", &f.profile}};
  std::map<std::string, int64_t*> ints = {{"--max-new-tokens", &f.max_new_tokens}, {"--kv-cache-mib", &f.kv_cache_mib},
                                          {"--max-running", &f.max_running}, {"--max-step-tokens", &f.max_step_tokens},
                                          {"--n", &f.n}};
  int64_t block_size = f.block_size, repeat = f.repeat;
  ints["--block-size"] = &block_size;
  ints["--repeat"] = &repeat;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--handoff" || a == "--logprobs") {
      (a == "--handoff" ? f.handoff : f.logprobs) = true;
      continue;
    }
    if (i + 1 >= argc) {
      error = "missing value: " + a;
      return false;
    }
    if (auto t = text.find(a); t != text.end()) {
      *t->second = argv[++i];
    } else if (a == "--temperature") {
      char* end = nullptr;
      f.temperature = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(f.temperature >= 0 && f.temperature <= 100)) {
        error = "--temperature: expected a number in [0, 100]";
        return false;
      }
    } else if (auto n = ints.find(a); n != ints.end()) {
      char* end = nullptr;
      *n->second = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || *n->second <= 0) {
        error = a + ": expected a positive integer";
        return false;
      }
    } else {
      error = "unknown flag: " + a;
      return false;
    }
  }
  f.block_size = static_cast<int32_t>(std::min<int64_t>(block_size, 1 << 16));
  f.repeat = static_cast<int>(std::min<int64_t>(repeat, 1000));
  if (f.model.empty() || f.prompts.empty() || f.out.empty()) {
    error = "--model, --prompts and --out are required";
    return false;
  }
  if (f.n > 4096) {
    error = "--n: at most 4096 samples a prompt";
    return false;
  }
  if (!f.reload.empty() && !f.handoff) {
    error = "--reload needs --handoff";
    return false;
  }
  if (f.device != "cpu" && f.device != "cuda") {
    error = "--device: expected cpu or cuda";
    return false;
  }
  return true;
}

tandem::StatusOr<std::vector<std::vector<int32_t>>> ReadPrompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return tandem::NotFound(path + ": cannot read");
  std::stringstream s;
  s << in.rdbuf();
  TANDEM_ASSIGN_OR_RETURN(json j, tandem::ParseJsonBounded(s.str(), 16), path);
  if (!j.is_object() || !j.contains("prompts") || !j["prompts"].is_array() || j["prompts"].empty())
    return tandem::InvalidArgument(path + ": prompts: expected a non-empty array of token arrays");
  std::vector<std::vector<int32_t>> prompts;
  for (size_t p = 0; p < j["prompts"].size(); ++p) {
    const json& row = j["prompts"][p];
    const std::string where = path + ": prompts[" + std::to_string(p) + "]";
    if (!row.is_array() || row.empty()) return tandem::InvalidArgument(where + ": expected a non-empty array");
    std::vector<int32_t> ids;
    for (const json& t : row) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        return tandem::InvalidArgument(where + ": expected token ids");
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

// Submits every prompt, waits for all; the outputs by prompt and the run's figures.
struct Run {
  std::vector<std::vector<int32_t>> outputs;
  std::vector<std::vector<float>> logprobs;
  double seconds = 0;
  int64_t tokens = 0;
};

tandem::StatusOr<Run> Generate(inf::Generator& g, const std::vector<std::vector<int32_t>>& prompts, const Flags& f) {
  std::mutex mu;
  std::condition_variable cv;
  Run run;
  const size_t samples = prompts.size() * static_cast<size_t>(f.n);
  run.outputs.resize(samples);
  run.logprobs.resize(samples);
  size_t done = 0;
  // From an empty prefix cache, so that every run prefills its prompts (a
  // run's time includes that); submitted while paused, so that the first
  // step sees them all and two runs of the same prompts batch alike (the
  // comparisons need that).
  TANDEM_RETURN_IF_ERROR(g.FlushCache());
  TANDEM_RETURN_IF_ERROR(g.Pause(inf::PauseMode::kInPlace));
  const auto t0 = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    inf::GenerateRequest r;
    r.input_ids = prompts[i];
    r.params.temperature = f.temperature;
    r.params.max_new_tokens = f.max_new_tokens;
    r.params.n = f.n;
    r.params.seed = i;
    r.return_logprob = f.logprobs;
    r.params.ignore_eos = true;
    TANDEM_RETURN_IF_ERROR(g.Submit(std::move(r), [&, i](inf::SampleUpdate u) {
      if (!u.finished) return;
      const size_t at = i * static_cast<size_t>(f.n) + static_cast<size_t>(u.sample);
      std::lock_guard<std::mutex> l(mu);
      run.outputs[at] = u.finished->output_ids;
      run.logprobs[at] = u.finished->output_token_logprobs;
      run.tokens += static_cast<int64_t>(u.finished->output_ids.size());
      ++done;
      cv.notify_all();
    }).status(), "prompt " + std::to_string(i));
  }
  TANDEM_RETURN_IF_ERROR(g.Continue());
  std::unique_lock<std::mutex> l(mu);
  if (!cv.wait_for(l, std::chrono::minutes(10), [&] { return done == samples; }))
    return tandem::DeadlineExceeded("generation did not finish in 10 minutes");
  run.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return run;
}

json Figures(const Run& r) {
  return {{"seconds", r.seconds}, {"generated_tokens", r.tokens}, {"tokens_per_s", r.tokens / r.seconds}};
}

// The engine's steps between two readings of its stats, and their mean time by part.
json StepFigures(const inf::EngineStats& from, const inf::EngineStats& to) {
  const uint64_t steps = to.steps_total - from.steps_total;
  const double per = steps == 0 ? 0.0 : 1e3 / static_cast<double>(steps);
  return {{"steps", steps},
          {"step_ms",
           {{"plan", (to.step_plan_seconds - from.step_plan_seconds) * per},
            {"launch", (to.step_launch_seconds - from.step_launch_seconds) * per},
            {"wait", (to.step_wait_seconds - from.step_wait_seconds) * per},
            {"commit", (to.step_commit_seconds - from.step_commit_seconds) * per}}}};
}

// Kineto over `body` (CPU ops and CUDA kernels of every thread's launches),
// the Chrome trace saved to `path`.
template <typename Body>
auto Profiled(const std::string& path, Body body) {
  namespace prof = torch::profiler::impl;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  const std::set<prof::ActivityType> activities{prof::ActivityType::CPU, prof::ActivityType::CUDA};
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  auto result = body();
  torch::autograd::profiler::disableProfiler()->save(path);
  return result;
}

// `baseline`: the device's used bytes before the model was loaded.
tandem::StatusOr<json> Handoff(inf::Generator& g, tandem::memory::TaggedMemory& mem, uint64_t baseline,
                               tandem::model::Transformer& model, const std::string& reload) {
  const uint64_t pools = mem.ResidentBytes();
  TANDEM_RETURN_IF_ERROR(g.Pause(inf::PauseMode::kRetract));
  const uint64_t before = mem.Residency().device.used;
  const inf::AllocatorBytes allocator_before = inf::AllocatorDeviceBytes();
  const auto t0 = Clock::now();
  TANDEM_RETURN_IF_ERROR(inf::ReleaseEngineMemory(g, mem, mem.TagNames()).status());
  const double release_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const uint64_t after = mem.Residency().device.used;
  const inf::AllocatorBytes allocator_after = inf::AllocatorDeviceBytes();
  const auto t1 = Clock::now();
  std::vector<std::string> order = {"weights", "kv_cache"};  // the graphs' memory last
  if (mem.ResidentPerTag().count("cuda_graph")) order.push_back("cuda_graph");
  TANDEM_RETURN_IF_ERROR(inf::ResumeEngineMemory(g, mem, order).status());
  const double resume_s = std::chrono::duration<double>(Clock::now() - t1).count();
  if (!reload.empty()) {
    TANDEM_RETURN_IF_ERROR(g.LoadWeights(2, [&]() -> tandem::Status {
      TANDEM_ASSIGN_OR_RETURN(tandem::model::SafetensorsCheckpoint ckpt, tandem::model::SafetensorsCheckpoint::Open(reload));
      return tandem::model::LoadWeights(model, ckpt);
    }), "--reload " + reload);
  }
  TANDEM_RETURN_IF_ERROR(g.Continue());
  const double freed = before > after ? static_cast<double>(before - after) : 0.0;
  // The graphs' pool is in a tag and in LibTorch's reserved bytes both.
  const int64_t in_tags = g.decode_graph_tag_bytes();
  const double held = before > baseline ? static_cast<double>(before - baseline) : 0.0;
  return json{{"pool_bytes", pools},
              {"device_used_at_start", baseline},
              {"device_used_before", before},
              {"device_used_released", after},
              {"returned_fraction", freed / static_cast<double>(pools)},  // of the pools
              {"returned_of_worker", held > 0 ? freed / held : 0.0},   // of all the worker added to the device
              // of what it allocated: its pools and LibTorch's allocator (the rest of
              // `held` is the CUDA runtime's: loaded kernels, library workspaces)
              {"returned_of_allocated",
               freed / static_cast<double>(pools + static_cast<uint64_t>(allocator_before.reserved - in_tags))},
              {"allocator_bytes_in_tags", in_tags},
              {"allocator_bytes_before", allocator_before.reserved},
              {"allocator_bytes_released", allocator_after.reserved},
              {"allocator_live_bytes_before", allocator_before.allocated},
              {"allocator_live_bytes_released", allocator_after.allocated},
              {"released_tags", mem.TagNames()},
              {"release_s", release_s},
              {"resume_s", resume_s},
              {"source", mem.Residency().device.source}};
}

int Main(const Flags& f) {
  auto fail = [](const tandem::Status& st) {
    std::cerr << "tandem-generate: " << st.ToString() << "\n";
    return 1;
  };
  auto prompts = ReadPrompts(f.prompts);
  if (!prompts.ok()) return fail(prompts.status());
  if (!f.profile.empty()) {  // before the model loads: a LibTorch without Kineto cannot save a trace
    try {
      Profiled(f.profile, [] { return 0; });
    } catch (const c10::Error& e) {
      return fail(tandem::FailedPrecondition("--profile " + f.profile + ": " + e.what_without_backtrace()));
    }
  }
  const bool cuda = f.device == "cuda";
  uint64_t baseline = 0;  // the device's reading before the model (the CUDA context made)
  if (cuda) {
    (void)at::zeros({1}, at::TensorOptions().device(at::kCUDA));
    auto probe = tandem::memory::MakeCudaBackend(0);
    if (!probe.ok()) return fail(probe.status());
    baseline = (*probe)->Usage(0).used;
  }
  inf::TaggedModelOptions to;
  to.kv_cache_bytes = f.kv_cache_mib << 20;
  to.block_size = f.block_size;
  auto graphs = inf::DecodeGraphBatches(f.cuda_graphs, f.device == "cuda", f.max_running);
  if (!graphs.ok()) return fail(graphs.status());
  if (!graphs->empty()) to.cuda_graph_bytes = inf::kGraphTagReserve;
  auto placed = inf::LoadTaggedModel(f.model, cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU),
                                     cuda ? at::kBFloat16 : at::kFloat, to);
  if (!placed.ok()) return fail(placed.status());
  std::shared_ptr<tandem::model::Transformer> model(std::move(placed->model));
  inf::GeneratorOptions go;
  go.kv_buffer = placed->kv_buffer;
  go.scheduler.num_blocks = placed->kv_blocks;
  go.scheduler.block_size = f.block_size;
  go.scheduler.max_running = f.max_running;
  go.scheduler.max_step_tokens = f.max_step_tokens;
  go.scheduler.max_waiting = static_cast<int64_t>(prompts->size()) + 1;
  go.decode_graph_batches = *graphs;
  go.graph_memory = placed->memory.get();
  auto engine = inf::Generator::Create(model, go);
  if (!engine.ok()) return fail(engine.status());

  json out = {{"runs", json::array()}, {"decode_graph_batches", (*engine)->decode_graph_batches()},
              {"decode_graph_bytes", (*engine)->decode_graph_bytes()}};
  std::vector<std::vector<int32_t>> first;
  std::vector<std::vector<float>> first_logprobs;
  for (int r = 0; r < f.repeat; ++r) {
    const inf::EngineStats before = (*engine)->Stats();
    auto generate = [&] { return Generate(**engine, *prompts, f); };
    auto run = !f.profile.empty() && r + 1 == f.repeat ? Profiled(f.profile, generate) : generate();
    if (!run.ok()) return fail(run.status());
    out["runs"].push_back(Figures(*run));
    out["runs"].back().update(StepFigures(before, (*engine)->Stats()));
    out["runs"].back()["decode_graph_steps"] = (*engine)->decode_graph_steps();
    if (r == 0) {
      first = run->outputs;
      first_logprobs = run->logprobs;
    }
  }
  out["outputs"] = first;
  out["logprobs"] = first_logprobs;
  if (f.handoff) {
    auto h = Handoff(**engine, *placed->memory, baseline, *model, f.reload);
    if (!h.ok()) return fail(h.status());
    const uint64_t graph_steps = (*engine)->decode_graph_steps();
    auto again = Generate(**engine, *prompts, f);
    if (!again.ok()) return fail(again.status());
    (*h)["same_after_handoff"] = again->outputs == first;
    (*h)["reloaded"] = !f.reload.empty();
    (*h)["outputs_after"] = again->outputs;
    (*h)["logprobs_after"] = again->logprobs;
    (*h)["decode_graph_steps_after"] = (*engine)->decode_graph_steps() - graph_steps;
    (*h)["run_after"] = Figures(*again);
    out["handoff"] = *h;
  }
  engine->reset();
  model.reset();
  std::ofstream o(f.out);
  o << out.dump() << "\n";
  if (!o) return fail(tandem::Internal(f.out + ": cannot write"));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  std::string error;
  if (!ParseFlags(argc, argv, f, error)) return Usage(error);
  try {
    return Main(f);
  } catch (const std::exception& e) {
    std::cerr << "tandem-generate: " << e.what() << "\n";
    return 1;
  }
}
