// ModelConfig from HF config.json (workers/model/config.h): both generations
// of config.json (transformers 4.x and 5.x) of dense and MoE Qwen3 load to
// the same config, HF's defaults fill absent keys, every refusal names its
// key path, ToHfJson round-trips, and what it writes (and the fixtures)
// validates against schemas/model.schema.json with ajv (tests/schema/validate.js).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "workers/model/config.h"

namespace tandem::model {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Qwen3-0.6B's config.json as transformers 4.51 wrote it.
const char* kDense4x = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

// The same model saved by transformers 5.x.
const char* kDense5x = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "dtype": "bfloat16", "eos_token_id": 151645, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "layer_types": ["full_attention", "full_attention"], "max_position_embeddings": 40960,
  "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
  "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"}, "sliding_window": null,
  "tie_word_embeddings": true, "transformers_version": "5.0.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

// Qwen3-30B-A3B's config.json (4.x).
const char* kMoe4x = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
  "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
  "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true,
  "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
  "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

// The same saved by transformers 5.x.
const char* kMoe5x = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "dtype": "bfloat16", "eos_token_id": 151645,
  "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 6144, "max_position_embeddings": 40960, "mlp_only_layers": [],
  "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": true,
  "num_attention_heads": 32, "num_local_experts": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": false,
  "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
  "router_aux_loss_coef": 0.001, "sliding_window": null, "tie_word_embeddings": false,
  "transformers_version": "5.0.0", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

ModelConfig MustParse(const std::string& text) {
  auto c = ParseModelConfig(text);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

// The modelled fields only (extra differs between generations).
json Modelled(const ModelConfig& c) {
  ModelConfig copy = c;
  copy.extra = json::object();
  return ToHfJson(copy);
}

TEST(ModelConfig, Dense4xLoads) {
  const ModelConfig c = MustParse(kDense4x);
  EXPECT_EQ(c.architecture, Architecture::kQwen3);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.dtype, ConfigDtype::kBFloat16);
  EXPECT_EQ(c.num_experts, 0);
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_EQ(c.extra.at("eos_token_id"), 151645);
  EXPECT_EQ(c.extra.at("transformers_version"), "4.51.0");
  // Qwen3-0.6B: 596M parameters without the tied head counted twice.
  EXPECT_EQ(c.NumParameters(), 596049920);
}

TEST(ModelConfig, BothGenerationsLoadToTheSameConfig) {
  EXPECT_EQ(Modelled(MustParse(kDense4x)), Modelled(MustParse(kDense5x)));
  EXPECT_EQ(Modelled(MustParse(kMoe4x)), Modelled(MustParse(kMoe5x)));
  const ModelConfig m = MustParse(kMoe5x);
  EXPECT_EQ(m.architecture, Architecture::kQwen3Moe);
  EXPECT_EQ(m.num_experts, 128);
  EXPECT_EQ(m.num_experts_per_tok, 8);
  EXPECT_EQ(m.moe_intermediate_size, 768);
  EXPECT_TRUE(m.norm_topk_prob);
  EXPECT_EQ(m.router_aux_loss_coef, 0.001);
  EXPECT_EQ(m.rope_theta, 1e6);
  EXPECT_EQ(m.dtype, ConfigDtype::kBFloat16);
  for (int l = 0; l < 48; ++l) EXPECT_TRUE(m.IsMoeLayer(l)) << l;
}

TEST(ModelConfig, AbsentKeysTakeHfDefaults) {
  const ModelConfig d = MustParse(R"({"architectures": ["Qwen3ForCausalLM"], "num_key_value_heads": null})");
  EXPECT_EQ(d.hidden_size, 4096);
  EXPECT_EQ(d.num_attention_heads, 32);
  EXPECT_EQ(d.num_key_value_heads, 32);  // null: as many as attention heads
  EXPECT_EQ(d.head_dim, 128);
  EXPECT_EQ(d.intermediate_size, 22016);
  EXPECT_EQ(d.rope_theta, 10000.0);
  EXPECT_EQ(d.rms_norm_eps, 1e-6);
  EXPECT_EQ(d.vocab_size, 151936);
  EXPECT_FALSE(d.tie_word_embeddings);
  EXPECT_EQ(d.dtype, ConfigDtype::kFloat32);

  const ModelConfig m = MustParse(R"({"model_type": "qwen3_moe", "hidden_size": 512, "num_attention_heads": 8})");
  EXPECT_EQ(m.architecture, Architecture::kQwen3Moe);
  EXPECT_EQ(m.head_dim, 64);  // Qwen3-MoE: hidden_size / num_attention_heads
  EXPECT_EQ(m.num_key_value_heads, 4);
  EXPECT_EQ(m.num_experts, 128);
  EXPECT_EQ(m.num_experts_per_tok, 8);
  EXPECT_EQ(m.moe_intermediate_size, 768);
  EXPECT_EQ(m.intermediate_size, 6144);
  EXPECT_FALSE(m.norm_topk_prob);
  EXPECT_EQ(m.decoder_sparse_step, 1);
  EXPECT_TRUE(m.mlp_only_layers.empty());
  EXPECT_EQ(m.router_aux_loss_coef, 0.001);
  EXPECT_FALSE(m.output_router_logits);
}

TEST(ModelConfig, DenseAndMoeLayersAsHfDecides) {
  const ModelConfig c = MustParse(R"({"architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 6,
    "decoder_sparse_step": 2, "mlp_only_layers": [3], "num_experts": 8, "num_experts_per_tok": 2})");
  std::vector<bool> moe;
  for (int l = 0; l < 6; ++l) moe.push_back(c.IsMoeLayer(l));
  EXPECT_EQ(moe, (std::vector<bool>{false, true, false, false, false, true}));
  const ModelConfig none = MustParse(R"({"architectures": ["Qwen3MoeForCausalLM"], "num_experts": 0})");
  EXPECT_FALSE(none.IsMoeLayer(0));
}

struct Refusal {
  const char* patch;     // merged into kMoe5x (RFC 7386)
  const char* expected;  // substrings of the error
  const char* also = "";
};

TEST(ModelConfig, RefusalsNameTheKeyPath) {
  const Refusal cases[] = {
      {R"({"architectures": ["LlamaForCausalLM"]})", "architectures[0]", "Qwen3MoeForCausalLM"},
      {R"({"architectures": "Qwen3ForCausalLM"})", "architectures: expected a list"},
      {R"({"architectures": null, "model_type": "llama"})", "model_type", "qwen3_moe"},
      {R"({"model_type": "qwen3"})", "model_type: expected \"qwen3_moe\""},
      {R"({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}})", "rope_parameters.rope_type",
       "\"yarn\""},
      {R"({"rope_parameters": null, "rope_scaling": {"type": "linear", "factor": 2.0}})", "rope_scaling.type",
       "\"linear\""},
      {R"({"rope_theta": 5000.0})", "rope_theta", "rope_parameters.rope_theta"},
      {R"({"rope_parameters": {"rope_theta": -1}})", "rope_parameters.rope_theta", "> 0"},
      {R"({"num_key_value_heads": 5})", "num_key_value_heads", "divisor of num_attention_heads (32)"},
      {R"({"num_experts": 64})", "num_experts", "num_local_experts (128)"},
      {R"({"num_experts_per_tok": 200})", "num_experts_per_tok", "num_experts (128)"},
      {R"({"mlp_only_layers": [1, 48]})", "mlp_only_layers[1]", "[0, 48)"},
      {R"({"hidden_act": "gelu"})", "hidden_act", "\"silu\""},
      {R"({"attention_bias": true})", "attention_bias", "not implemented"},
      {R"({"use_sliding_window": true})", "use_sliding_window", "not implemented"},
      {R"({"layer_types": ["full_attention", "sliding_attention"]})", "layer_types[1]"},
      {R"({"vocab_size": "big"})", "vocab_size", "\"big\""},
      {R"({"hidden_size": 0})", "hidden_size", "[1, "},
      {R"({"head_dim": 63})", "head_dim", "even"},
      {R"({"dtype": "int8"})", "dtype", "bfloat16"},
      {R"({"torch_dtype": "float32"})", "torch_dtype", "same dtype"},
      {R"({"norm_topk_prob": 1})", "norm_topk_prob", "true or false"},
      {R"({"rms_norm_eps": 0})", "rms_norm_eps", "> 0"},
  };
  for (const Refusal& r : cases) {
    json j = json::parse(kMoe5x);
    j.merge_patch(json::parse(r.patch));
    auto c = ModelConfigFromJson(j, "/ckpt/config.json");
    ASSERT_FALSE(c.ok()) << r.patch;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    const std::string msg = c.status().message();
    EXPECT_NE(msg.find("/ckpt/config.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(r.expected), std::string::npos) << r.patch << " -> " << msg;
    EXPECT_NE(msg.find(r.also), std::string::npos) << r.patch << " -> " << msg;
  }
}

TEST(ModelConfig, HostileTextIsAnError) {
  EXPECT_NE(ParseModelConfig("{not json").status().message().find("not valid JSON"), std::string::npos);
  EXPECT_NE(ParseModelConfig("[1, 2]").status().message().find("expected a JSON object"), std::string::npos);
  EXPECT_NE(ParseModelConfig(std::string(100000, '[')).status().message().find("nested deeper"), std::string::npos);
  EXPECT_NE(ParseModelConfig("{}").status().message().find("supported architectures"), std::string::npos);
  auto missing = LoadModelConfig("/nonexistent/dir/config.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/config.json"), std::string::npos);
}

TEST(ModelConfig, ToHfJsonRoundTripsAndWritesBothSpellings) {
  for (const char* text : {kDense4x, kDense5x, kMoe4x, kMoe5x}) {
    const ModelConfig c = MustParse(text);
    const json out = ToHfJson(c);
    EXPECT_EQ(out.at("rope_parameters"), json({{"rope_type", "default"}, {"rope_theta", c.rope_theta}}));
    EXPECT_EQ(out.at("rope_theta"), c.rope_theta);
    EXPECT_EQ(out.at("dtype"), "bfloat16");
    EXPECT_EQ(out.at("torch_dtype"), "bfloat16");
    EXPECT_EQ(out.at("eos_token_id"), 151645);
    if (c.architecture == Architecture::kQwen3Moe) {
      EXPECT_EQ(out.at("num_local_experts"), 128);
      EXPECT_EQ(out.at("num_experts"), 128);
    }
    const ModelConfig back = MustParse(out.dump());
    EXPECT_EQ(ToHfJson(back), out);
  }
}

fs::path SourceDir() {
  const char* dir = std::getenv("TANDEM_SOURCE_DIR");
  return dir ? fs::path(dir) : fs::current_path();
}

// file -> valid, by ajv.
std::map<std::string, bool> ValidateWithSchema(const std::vector<fs::path>& files) {
  std::string cmd = "node '" + (SourceDir() / "tests/schema/validate.js").string() + "' '" +
                    (SourceDir() / "schemas/model.schema.json").string() + "'";
  for (const auto& f : files) cmd += " '" + f.string() + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::map<std::string, bool> out;
  if (!pipe) return out;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << "validator failed; run scripts/setup.sh --test (node, ajv)";
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    auto j = json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("file")) out[j["file"].get<std::string>()] = j["valid"].get<bool>();
  }
  return out;
}

TEST(ModelConfig, SchemaAgreesWithTheParser) {
  const fs::path dir = fs::temp_directory_path() / ("model_config_schema_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<fs::path> files;
  std::map<std::string, bool> want;
  auto add = [&](const std::string& name, const json& j, bool valid) {
    const fs::path p = dir / (name + ".json");
    std::ofstream(p) << j.dump(2);
    files.push_back(p);
    want[p.string()] = valid;
  };
  int i = 0;
  for (const char* text : {kDense4x, kDense5x, kMoe4x, kMoe5x}) {
    add("fixture" + std::to_string(i), json::parse(text), true);
    add("written" + std::to_string(i++), ToHfJson(MustParse(text)), true);
  }
  i = 0;
  for (const char* patch : {R"({"rope_parameters": {"rope_type": "yarn"}})", R"({"hidden_act": "gelu"})",
                            R"({"architectures": ["LlamaForCausalLM"]})", R"({"attention_bias": true})",
                            R"({"dtype": "int8"})", R"({"head_dim": 63})"}) {
    json j = json::parse(kMoe5x);
    j.merge_patch(json::parse(patch));
    EXPECT_FALSE(ModelConfigFromJson(j).ok()) << patch;
    add("refused" + std::to_string(i++), j, false);
  }
  const auto got = ValidateWithSchema(files);
  ASSERT_EQ(got.size(), files.size());
  for (const auto& [file, valid] : want) EXPECT_EQ(got.at(file), valid) << file;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::model
