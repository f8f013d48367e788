// The actor's tagged memory (actor_tags.h): the tags it declares, its
// residency, and a release of `ipc_exports` freeing the published version.
// A cuda-ipc export needs a GPU; the mechanics go through the
// WeightPublisher interface, so an shm publisher stands in for it here.
#include "workers/roles/actor_tags.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "workers/model/parameter_set.h"
#include "workers/model/tests/model_test_util.h"
#include "workers/train/adamw.h"
#include "workers/weights/shm_transport.h"
#include "workers/weights/weight_source.h"

namespace tandem::roles {
namespace {

struct Fixture {
  model::ParameterSet params =
      model::ParameterSet::Create(model::testing::TinyConfig(false, 1), at::Device(at::kCPU), at::kFloat);
  std::unique_ptr<train::AdamW> adamw;
  Fixture() {
    auto o = train::AdamW::Create(params, {});
    EXPECT_TRUE(o.ok());
    adamw = std::move(*o);
    for (const at::Tensor& g : params.grad_buffers()) g.fill_(0.1);
    EXPECT_TRUE(adamw->Step(1e-3).ok());  // the state exists after a step
  }
};

std::vector<std::string> Names(const control::ControlClient::Options& o) {
  std::vector<std::string> out;
  for (const control::TagInfo& t : o.hello.tags) out.push_back(t.name);
  return out;
}

TEST(ActorTags, TheOptimizerAloneWithoutExports) {
  Fixture f;
  ActorTags tags(*f.adamw, false);
  control::ControlClient::Options o;
  tags.Declare(o);
  EXPECT_EQ(Names(o), std::vector<std::string>{"optimizer"});
  EXPECT_EQ(o.hello.tags[0].bytes, static_cast<uint64_t>(f.adamw->resident_bytes()));
  EXPECT_TRUE(o.hello.tags[0].backup) << "a native state is backed up on release";
  const StatusOr<nlohmann::json> refused = tags.Move({"ipc_exports"}, true);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kNotFound);
  EXPECT_NE(refused.status().message().find("ipc_exports"), std::string::npos);
}

TEST(ActorTags, ReleasingTheExportsFreesThePublishedVersion) {
  Fixture f;
  weights::ShmPublisher publisher({"tags-test-" + std::to_string(::getpid()), "actor", 1});
  ActorTags tags(*f.adamw, false, &publisher);
  control::ControlClient::Options o;
  tags.Declare(o);
  EXPECT_EQ(Names(o), (std::vector<std::string>{"optimizer", "ipc_exports"}));
  EXPECT_EQ(o.hello.tags[1].bytes, 0u);
  EXPECT_FALSE(o.hello.tags[1].backup) << "an export has nothing to restore";
  ASSERT_TRUE(o.residency);

  const StatusOr<std::string> source = publisher.Publish(1, f.params);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const uint64_t exported = publisher.ExportedBytes();
  EXPECT_GT(exported, 0u);
  const uint64_t optimizer = static_cast<uint64_t>(f.adamw->device_bytes());
  control::Residency r = o.residency();
  EXPECT_EQ(r.tags.at("ipc_exports"), exported);
  EXPECT_EQ(r.tags.at("optimizer"), optimizer);
  EXPECT_EQ(r.device.used, optimizer + exported);

  const StatusOr<nlohmann::json> released = tags.Move({"ipc_exports"}, true);
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ((*released)["freed_bytes"], exported);
  EXPECT_EQ(publisher.ExportedBytes(), 0u);
  EXPECT_FALSE(weights::OpenWeightSource(*source).ok()) << "the version is gone for new readers";
  r = tags.Residency();
  EXPECT_EQ(r.tags.at("ipc_exports"), 0u);
  EXPECT_EQ(r.device.used, optimizer);

  const StatusOr<nlohmann::json> resumed = tags.Move({"ipc_exports"}, false);
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ((*resumed)["mapped_bytes"], 0) << "nothing comes back: the next publish exports anew";
  EXPECT_EQ(tags.Move({"weights"}, true).status().code(), StatusCode::kNotFound);

  // No tags: all of them (a second version, then the optimizer and the export).
  ASSERT_TRUE(publisher.Publish(2, f.params).ok());
  const StatusOr<nlohmann::json> all = tags.Move({}, true);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(publisher.ExportedBytes(), 0u);
  EXPECT_EQ(tags.Residency().tags.at("optimizer"), static_cast<uint64_t>(f.adamw->device_bytes()));
}

}  // namespace
}  // namespace tandem::roles
