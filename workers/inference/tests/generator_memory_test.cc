// The engine's side of the memory handoff on CPU (generator.h, "Memory
// handoff"; docs/inference.md "Memory and the control protocol"): the model
// and the KV pool in real tagged-memory pools (LoadTaggedModel, from a
// saved directory); requests retracted by a
// pause go on after the pools were released (pages returned to the kernel)
// and resumed at the same addresses, with GreedyDecode's tokens; the
// engine refuses a release it cannot survive; with the `cuda_graph` tag
// out it decodes eagerly; LoadWeights switches the
// weights between steps and versions the requests that start after it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <unistd.h>

#include "workers/inference/generator.h"
#include "workers/inference/greedy.h"
#include "workers/inference/tagged_model.h"
#include "workers/inference/tests/engine_test_util.h"
#include "workers/model/checkpoint.h"
#include "workers/model/tests/model_test_util.h"

namespace tandem::inference {
namespace {

using testing::Collector;
using testing::Greedy;
using testing::MakeEngine;
using testing::TinyModel;

std::vector<int32_t> Want(const model::Transformer& m, const std::vector<int32_t>& prompt, int64_t max_new) {
  GreedyOptions go;
  go.max_new_tokens = max_new;
  StatusOr<std::vector<std::vector<int32_t>>> want = GreedyDecode(m, {prompt}, go);
  EXPECT_TRUE(want.ok()) << want.status().ToString();
  return want.ok() ? (*want)[0] : std::vector<int32_t>{};
}

TEST(GeneratorMemoryTest, RetractedRequestsGoOnAfterTheirMemoryWasReleasedAndResumed) {
  char tmpl[] = "/tmp/tandem-tagged-model-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_TRUE(model::SavePretrained(*TinyModel(11), dir).ok());
  TaggedModelOptions to;
  to.kv_blocks = 64;
  to.block_size = 4;
  StatusOr<TaggedModel> placed = LoadTaggedModel(dir, at::kCPU, at::kFloat, to);
  model::testing::RemoveTree(dir);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  memory::TaggedMemory& mem = *placed->memory;
  void* weights = *mem.Base("weights");
  std::shared_ptr<model::Transformer> m(std::move(placed->model));
  ASSERT_EQ(m->parameters().buffers()[0].data_ptr(), weights);
  const uint64_t weight_bytes = static_cast<uint64_t>(model::ParameterSet::BufferNumel(m->config(), at::kFloat) * 4);
  std::unique_ptr<Generator> g = MakeEngine(m, placed->kv_blocks, 64, placed->kv_buffer);
  ASSERT_EQ(g->kv_pool_data(), *mem.Base("kv_cache")) << "the KV pool is not in its tagged pool";

  const std::vector<std::vector<int32_t>> prompts = {{3, 1, 4, 1, 5}, {9, 2, 6}, {5, 3, 5, 8, 9, 7, 9}, {3, 2}};
  constexpr int64_t kNew = 40;
  std::vector<Collector> got(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) ASSERT_TRUE(g->Submit(Greedy(prompts[i], kNew), got[i].Callback()).ok());
  for (Collector& c : got) ASSERT_TRUE(c.WaitTokens(2));

  // Not without a pause; then retract: the sequences give their KV back.
  EXPECT_EQ(g->MarkAbsent(MemoryPart::kKvCache).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(g->Pause(PauseMode::kRetract).ok());
  ASSERT_TRUE(g->MarkAbsent(MemoryPart::kKvCache).ok());
  ASSERT_TRUE(g->MarkAbsent(MemoryPart::kWeights).ok());
  ASSERT_TRUE(mem.Release("kv_cache").ok());
  StatusOr<memory::TaggedMemory::Moved> backed = mem.Release("weights");
  ASSERT_TRUE(backed.ok()) << backed.status().ToString();
  EXPECT_GE(backed->copied_bytes, weight_bytes);
  EXPECT_EQ(mem.ResidentBytes(), 0u);
  const Status refused = g->Continue();
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();

  ASSERT_TRUE(mem.Resume("weights").ok());
  ASSERT_TRUE(mem.Resume("kv_cache").ok());
  EXPECT_EQ(*mem.Base("weights"), weights);
  g->MarkPresent(MemoryPart::kWeights);
  g->MarkPresent(MemoryPart::kKvCache);
  ASSERT_TRUE(g->Continue().ok());
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<SampleResult> r = got[i].Wait(1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].output_ids, Want(*m, prompts[i], kNew)) << "prompt " << i;
    EXPECT_EQ(got[i].streamed()[0], r[0].output_ids) << "prompt " << i << ": streamed twice or lost tokens";
    EXPECT_EQ(r[0].finish_reason, FinishReason::kLength);
  }
}

TEST(GeneratorMemoryTest, WhileTheCudaGraphTagIsOutDecodeStepsRunEagerlyAndTheGraphsComeBackAfter) {
  char tmpl[] = "/tmp/tandem-tagged-model-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_TRUE(model::SavePretrained(*TinyModel(12), dir).ok());
  TaggedModelOptions to;
  to.kv_blocks = 65;
  to.block_size = 4;
  to.cuda_graph_bytes = 1 << 30;
  StatusOr<TaggedModel> placed = LoadTaggedModel(dir, at::kCPU, at::kFloat, to);
  model::testing::RemoveTree(dir);
  ASSERT_TRUE(placed.ok()) << placed.status().ToString();
  memory::TaggedMemory& mem = *placed->memory;
  EXPECT_EQ(mem.TagNames(), (std::vector<std::string>{"cuda_graph", "kv_cache", "weights"}));
  EXPECT_EQ(mem.ResidentPerTag()["cuda_graph"], 0u) << "a grow tag maps nothing until graphs are captured (CUDA)";
  std::shared_ptr<model::Transformer> m(std::move(placed->model));
  GeneratorOptions o;
  o.kv_buffer = placed->kv_buffer;
  o.scheduler.num_blocks = placed->kv_blocks;
  o.scheduler.block_size = 4;
  o.decode_graph_batches = {1, 2};
  o.graph_memory = &mem;
  StatusOr<std::unique_ptr<Generator>> made = Generator::Create(m, o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Generator& g = **made;
  const std::vector<int32_t> prompt = {4, 8, 15, 16};
  auto run = [&] {
    Collector got;
    EXPECT_TRUE(g.Submit(Greedy(prompt, 6), got.Callback()).ok());
    return got.Wait(1)[0].output_ids;
  };
  const std::vector<int32_t> want = Want(*m, prompt, 6);
  EXPECT_EQ(run(), want);
  const uint64_t steps = g.decode_graph_steps();
  EXPECT_GE(steps, 5u);

  ASSERT_TRUE(g.Pause(PauseMode::kRetract).ok());
  StatusOr<memory::TaggedMemory::Moved> out = ReleaseEngineMemory(g, mem, {"cuda_graph"});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_TRUE(g.Continue().ok()) << "the weights and the KV cache are there: the engine decodes eagerly";
  EXPECT_EQ(run(), want);
  EXPECT_EQ(g.decode_graph_steps(), steps) << "a graph replayed while its memory was out";

  ASSERT_TRUE(g.Pause(PauseMode::kRetract).ok());
  ASSERT_TRUE(ResumeEngineMemory(g, mem, {"cuda_graph"}).ok());
  ASSERT_TRUE(g.Continue().ok());
  EXPECT_EQ(run(), want);
  EXPECT_GE(g.decode_graph_steps(), steps + 5);
  EXPECT_EQ(ReleaseEngineMemory(g, mem, {"cuda_graph"}).status().code(), StatusCode::kFailedPrecondition)
      << "released while generating";
}

TEST(GeneratorMemoryTest, AnInPlacePauseKeepsTheKvCacheAndTheWeightsMayStillGo) {
  std::shared_ptr<model::Transformer> m = TinyModel(11);
  std::unique_ptr<Generator> g = MakeEngine(m);
  EXPECT_EQ(g->MarkAbsent(MemoryPart::kWeights).code(), StatusCode::kFailedPrecondition) << "not paused";
  const std::vector<int32_t> prompt = {7, 7, 1};
  Collector got;
  ASSERT_TRUE(g->Submit(Greedy(prompt, 120), got.Callback()).ok());
  ASSERT_TRUE(got.WaitTokens(1));
  ASSERT_TRUE(g->Pause(PauseMode::kInPlace).ok());
  const Status kv = g->MarkAbsent(MemoryPart::kKvCache);
  EXPECT_EQ(kv.code(), StatusCode::kFailedPrecondition) << kv.ToString();
  EXPECT_NE(kv.message().find("in_place"), std::string::npos) << kv.message();
  ASSERT_TRUE(g->MarkAbsent(MemoryPart::kWeights).ok());
  ASSERT_TRUE(g->MarkAbsent(MemoryPart::kWeights).ok()) << "idempotent";
  EXPECT_EQ(g->LoadWeights(1, [] { return Status::Ok(); }).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(g->Continue().code(), StatusCode::kFailedPrecondition);
  g->MarkPresent(MemoryPart::kWeights);
  ASSERT_TRUE(g->Continue().ok());
  std::vector<SampleResult> r = got.Wait(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].output_ids, Want(*m, prompt, 120));
}

TEST(GeneratorMemoryTest, LoadWeightsSwitchesModelsBetweenStepsAndVersionsNewRequests) {
  char tmpl[] = "/tmp/tandem-load-weights-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::shared_ptr<model::Transformer> a = TinyModel(11);
  std::shared_ptr<model::Transformer> b = TinyModel(12);
  ASSERT_TRUE(model::SavePretrained(*b, dir + "/b").ok());
  const std::vector<int32_t> prompt = {4, 8, 15, 16, 23, 42};
  const std::vector<int32_t> from_a = Want(*a, prompt, 12), from_b = Want(*b, prompt, 12);
  ASSERT_NE(from_a, from_b) << "the two models must differ for this test to mean anything";

  std::unique_ptr<Generator> g = MakeEngine(a);
  auto load = [&](const std::string& d) {
    return [&a, d]() -> Status {
      TANDEM_ASSIGN_OR_RETURN(model::SafetensorsCheckpoint ckpt, model::SafetensorsCheckpoint::Open(d));
      return model::LoadWeights(*a, ckpt);
    };
  };
  Collector before;
  ASSERT_TRUE(g->Submit(Greedy(prompt, 12), before.Callback()).ok());
  std::vector<SampleResult> r = before.Wait(1);
  EXPECT_EQ(r[0].output_ids, from_a);
  EXPECT_EQ(r[0].weight_version, 0);

  ASSERT_TRUE(g->LoadWeights(5, load(dir + "/b")).ok());  // not paused: between steps
  EXPECT_EQ(g->Info().weight_version, 5);
  Collector after;
  ASSERT_TRUE(g->Submit(Greedy(prompt, 12), after.Callback()).ok());
  r = after.Wait(1);
  EXPECT_EQ(r[0].output_ids, from_b);
  EXPECT_EQ(r[0].weight_version, 5);

  const Status missing = g->LoadWeights(6, load(dir + "/nope"));
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
  EXPECT_EQ(g->Info().weight_version, 5) << "a failed load keeps the version";
  EXPECT_EQ(g->LoadWeights(7, []() -> Status { throw std::runtime_error("transport broke"); }).code(),
            StatusCode::kInternal);
  EXPECT_TRUE(g->Health().ok());
  model::testing::RemoveTree(dir);
}

}  // namespace
}  // namespace tandem::inference
