// The shared weight-transport suite (transport_suite.h): what every
// transport must do, run by each one's INSTANTIATE_TEST_SUITE_P.
#include "workers/weights/tests/transport_suite.h"

#include <cmath>
#include <future>

namespace tandem::weights::testing {
namespace {

TEST_P(TransportSuite, ReaderGetsTheParametersBitForBit) {
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet published = RandomParameters(c, 1, device());
  auto pub = harness().MakePublisher(c, 1);
  auto source = pub->Publish(1, published);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_EQ(source->rfind(std::string(pub->kind()) + ":", 0), 0u) << *source;
  const model::ParameterSet reader = PoisonedParameters(c, at::kFloat, device());
  std::unique_ptr<WeightSource> from;
  ASSERT_TRUE(OpenAndLoad(*source, reader, &from).ok()) << OpenAndLoad(*source, reader).ToString();
  EXPECT_EQ(FirstDifference(published, reader), "");
  EXPECT_EQ(from->Describe(), *source);
  EXPECT_TRUE(from->Acknowledge().ok());
}

TEST_P(TransportSuite, ReaderOfAnotherDtypeGetsTheRoundedValues) {
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet published = RandomParameters(c, 2, device());
  auto pub = harness().MakePublisher(c, 1);
  auto source = pub->Publish(1, published);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const model::ParameterSet reader = PoisonedParameters(c, at::kBFloat16, device());
  const Status st = OpenAndLoad(*source, reader);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (size_t i = 0; i < published.size(); ++i) {
    const at::Tensor want = published.named()[i].view.to(at::kDouble);
    const at::Tensor got = reader.named()[i].view.to(at::kDouble);
    // bf16 keeps 8 significant bits: round to nearest is within 2^-8 relative.
    const double worst = ((got - want).abs() - want.abs() * std::ldexp(1.0, -8)).max().item<double>();
    EXPECT_LE(worst, 0.0) << published.named()[i].name;
    EXPECT_TRUE(at::equal(reader.named()[i].view, published.named()[i].view.to(at::kBFloat16)))
        << published.named()[i].name << ": not LibTorch's rounding";
  }
  // And back up: a bf16 publisher into an fp32 reader is exact.
  model::ParameterSet bf16 = model::ParameterSet::Create(c, device(), at::kBFloat16);
  for (size_t i = 0; i < bf16.slots().size(); ++i) bf16.slots()[i].leaf.copy_(published.slots()[i].leaf);
  auto pub2 = harness().MakePublisher(c, 1);
  auto source2 = pub2->Publish(2, bf16);
  ASSERT_TRUE(source2.ok()) << source2.status().ToString();
  const model::ParameterSet up = PoisonedParameters(c, at::kFloat, device());
  ASSERT_TRUE(OpenAndLoad(*source2, up).ok());
  for (size_t i = 0; i < up.size(); ++i)
    EXPECT_TRUE(at::equal(up.named()[i].view, bf16.named()[i].view.to(at::kFloat))) << up.named()[i].name;
}

TEST_P(TransportSuite, NewVersionReplacesTheOld) {
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet a = RandomParameters(c, 3, device()), b = RandomParameters(c, 4, device());
  auto pub = harness().MakePublisher(c, 0);
  auto v1 = pub->Publish(1, a);
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  auto v2 = pub->Publish(2, b);
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  EXPECT_NE(*v1, *v2);
  const model::ParameterSet reader = PoisonedParameters(c, at::kFloat, device());
  ASSERT_TRUE(OpenAndLoad(*v2, reader).ok());
  EXPECT_EQ(FirstDifference(b, reader), "");
  const Status old = OpenAndLoad(*v1, reader);
  EXPECT_EQ(old.code(), StatusCode::kNotFound) << "the replaced version is gone: " << old.ToString();
  EXPECT_EQ(FirstDifference(b, reader), "") << "a refused load wrote nothing";
  const auto again = pub->Publish(2, a);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("versions must grow"), std::string::npos) << again.status().message();
}

TEST_P(TransportSuite, VersionIsFreedAfterTheExpectedAcks) {
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet p = RandomParameters(c, 5, device());
  auto pub = harness().MakePublisher(c, 2);
  auto source = pub->Publish(7, p);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  if (!harness().durable()) EXPECT_GE(pub->ExportedBytes(), static_cast<uint64_t>(p.buffers()[0].nbytes()));
  const model::ParameterSet r1 = PoisonedParameters(c, at::kFloat, device()), r2 = PoisonedParameters(c, at::kFloat, device());
  std::unique_ptr<WeightSource> s1, s2;
  // The two readers load at once, as a job's rollouts do (nccl sends to
  // both together); the second acknowledges after the first.
  std::future<Status> second = std::async(std::launch::async, [&] { return OpenAndLoad(*source, r2, &s2); });
  const Status first = OpenAndLoad(*source, r1, &s1);
  ASSERT_TRUE(first.ok()) << first.ToString();
  EXPECT_TRUE(s1->Acknowledge().ok());
  EXPECT_TRUE(s1->Acknowledge().ok());  // a repeated ack counts once
  const Status loaded = second.get();
  ASSERT_TRUE(loaded.ok()) << "one of two readers acknowledged: still published: " << loaded.ToString();
  EXPECT_EQ(FirstDifference(p, r1), "");
  EXPECT_EQ(FirstDifference(p, r2), "");
  EXPECT_TRUE(s2->Acknowledge().ok());
  const Status after = OpenAndLoad(*source, PoisonedParameters(c, at::kFloat, device()));
  if (harness().durable()) {
    EXPECT_TRUE(after.ok()) << "a durable version stays: " << after.ToString();
    EXPECT_EQ(pub->ExportedBytes(), 0u);
  } else {
    EXPECT_EQ(after.code(), StatusCode::kNotFound) << after.ToString();
    EXPECT_EQ(pub->ExportedBytes(), 0u);
  }
}

TEST_P(TransportSuite, PublisherGoneFreesWhatIsNotDurable) {
  const model::ModelConfig c = SuiteConfig();
  const model::ParameterSet p = RandomParameters(c, 6, device());
  auto pub = harness().MakePublisher(c, 3);
  auto source = pub->Publish(1, p);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  pub.reset();  // no reader acknowledged
  const model::ParameterSet reader = PoisonedParameters(c, at::kFloat, device());
  const Status st = OpenAndLoad(*source, reader);
  if (harness().durable()) {
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(FirstDifference(p, reader), "");
  } else {
    EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  }
}

// Publishes, damages the version with `damage`, and checks that the load
// is refused naming what the harness says and writes nothing.
void ExpectDamagedVersionRefused(TransportHarness& h, at::Device device,
                                 std::string (TransportHarness::*damage)(const std::string&), uint64_t seed) {
  const model::ModelConfig c = SuiteConfig();
  auto pub = h.MakePublisher(c, 1);
  auto source = pub->Publish(1, RandomParameters(c, seed, device));
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const std::string expect = (h.*damage)(*source);
  const model::ParameterSet reader = PoisonedParameters(c, at::kFloat, device);
  const model::ParameterSet untouched = PoisonedParameters(c, at::kFloat, device);
  const Status st = OpenAndLoad(*source, reader);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(expect), std::string::npos) << st.message() << "\n  expected to contain: " << expect;
  EXPECT_EQ(FirstDifference(untouched, reader), "") << "a refused load wrote nothing";
}

TEST_P(TransportSuite, CorruptManifestIsRefusedNamingWhatIsWrong) {
  ExpectDamagedVersionRefused(harness(), device(), &TransportHarness::CorruptManifest, 7);
}

TEST_P(TransportSuite, TruncatedVersionIsRefusedNamingWhatIsWrong) {
  ExpectDamagedVersionRefused(harness(), device(), &TransportHarness::Truncate, 8);
}

TEST_P(TransportSuite, MismatchedModelIsRefusedNamingTheTensor) {
  const model::ModelConfig c = SuiteConfig();
  auto pub = harness().MakePublisher(c, 1);
  auto source = pub->Publish(1, RandomParameters(c, 9, device()));
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  struct Case {
    const char* what;
    model::ModelConfig config;
    std::vector<std::string> message;  // substrings
  };
  model::ModelConfig narrow = c, deeper = c, shallower = c;
  narrow.moe_intermediate_size = 16;  // the experts of layer 0 differ first
  deeper.num_hidden_layers = 4;
  deeper.mlp_only_layers = {1};
  shallower.num_hidden_layers = 2;
  shallower.mlp_only_layers = {1};
  const std::vector<Case> cases = {
      {"other expert width", narrow, {"tensor \"model.layers.0.mlp.experts.", "shape", "32"}},
      {"a layer more", deeper, {"\"model.layers.3.input_layernorm.weight\"", "[64]"}},
      {"a layer less", shallower, {"\"model.layers.2.", "not a parameter of this model"}},
  };
  for (const Case& k : cases) {
    ASSERT_TRUE(model::ValidateModelConfig(k.config).ok()) << k.what;
    const model::ParameterSet reader = PoisonedParameters(k.config, at::kFloat, device());
    const model::ParameterSet untouched = PoisonedParameters(k.config, at::kFloat, device());
    const Status st = OpenAndLoad(*source, reader);
    ASSERT_FALSE(st.ok()) << k.what;
    for (const std::string& m : k.message)
      EXPECT_NE(st.message().find(m), std::string::npos) << k.what << ": " << st.message() << "\n  expected: " << m;
    EXPECT_EQ(FirstDifference(untouched, reader), "") << k.what << ": a refused load wrote nothing";
  }
}

}  // namespace
}  // namespace tandem::weights::testing
