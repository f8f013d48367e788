// tandem-model-eval: runs a Hugging Face model directory through tandem's
// model on given token sequences and writes what a user compares against
// transformers (docs/model.md "Checking a model against transformers";
// scripts/gpu/model_golden.py drives it on the GPU machine).
//
//   tandem-model-eval --model DIR --batch BATCH.json --out OUT.safetensors
//       [--device cpu|cuda] [--dtype fp32|bf16] [--mode packed|flat]
//       [--grads] [--decode] [--save DIR]
//
// BATCH.json: {"sequences": [[token ids], ...]}. Written to OUT (F32):
//   logprobs.{s}, entropy.{s}  [len(s) - 1]: log p(token i | tokens < i) and
//                              the entropy of that distribution, i = 1..;
//   loss                       [1]: mean of -logprobs over every sequence;
//   grad.{hf name}             the gradient of loss per parameter (--grads);
//   decode_logits              [S, V]: the logits after decoding each
//                              sequence token by token (--decode).
// --mode packed shares common prefixes (a trie); flat keeps every sequence
// whole. --save writes the loaded model back with SavePretrained.
#include <ATen/core/ivalue.h>  // before ATen.h (clang 14, C++20)
#include <c10/core/GradMode.h>
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/bounded_json.h"
#include "workers/model/checkpoint.h"
#include "workers/model/safetensors.h"

namespace mdl = tandem::model;

namespace {

struct Flags {
  std::string model, batch, out, device = "cpu", dtype = "fp32", mode = "packed", save;
  bool grads = false, decode = false;
};

int Usage(const std::string& why) {
  std::cerr << "tandem-model-eval: " << why << "\n"
            << "usage: tandem-model-eval --model DIR --batch BATCH.json --out OUT.safetensors [--device cpu|cuda]\n"
               "       [--dtype fp32|bf16] [--mode packed|flat] [--grads] [--decode] [--save DIR]\n";
  return 2;
}

bool ParseFlags(int argc, char** argv, Flags& f, std::string& error) {
  std::map<std::string, std::string*> values = {{"--model", &f.model}, {"--batch", &f.batch}, {"--out", &f.out},
                                                {"--device", &f.device}, {"--dtype", &f.dtype},
                                                {"--mode", &f.mode}, {"--save", &f.save}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--grads") { f.grads = true; continue; }
    if (a == "--decode") { f.decode = true; continue; }
    auto it = values.find(a);
    if (it == values.end() || i + 1 >= argc) { error = "unknown flag or missing value: " + a; return false; }
    *it->second = argv[++i];
  }
  if (f.model.empty() || f.batch.empty() || f.out.empty()) { error = "--model, --batch and --out are required"; return false; }
  if (f.device != "cpu" && f.device != "cuda") { error = "--device: expected cpu or cuda"; return false; }
  if (f.dtype != "fp32" && f.dtype != "bf16") { error = "--dtype: expected fp32 or bf16"; return false; }
  if (f.mode != "packed" && f.mode != "flat") { error = "--mode: expected packed or flat"; return false; }
  return true;
}

tandem::StatusOr<std::vector<std::vector<int32_t>>> ReadBatch(const std::string& path) {
  std::ifstream in(path);
  if (!in) return tandem::NotFound(path + ": cannot read");
  std::stringstream text;
  text << in.rdbuf();
  auto doc = tandem::ParseJsonBounded(text.str(), 16);
  if (!doc.ok()) return tandem::InvalidArgument(path + ": " + doc.status().message());
  const auto& j = *doc;
  if (!j.is_object() || !j.contains("sequences") || !j["sequences"].is_array())
    return tandem::InvalidArgument(path + ": sequences: expected an array of token arrays");
  std::vector<std::vector<int32_t>> seqs;
  for (size_t s = 0; s < j["sequences"].size(); ++s) {
    const auto& row = j["sequences"][s];
    if (!row.is_array() || row.size() < 2)
      return tandem::InvalidArgument(path + ": sequences[" + std::to_string(s) +
                                             "]: expected an array of at least 2 token ids");
    std::vector<int32_t> ids;
    for (const auto& t : row) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        return tandem::InvalidArgument(path + ": sequences[" + std::to_string(s) + "]: expected token ids");
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    seqs.push_back(std::move(ids));
  }
  if (seqs.empty()) return tandem::InvalidArgument(path + ": sequences: expected at least one sequence");
  return seqs;
}

// Outputs as host F32 tensors, kept alive until written.
struct Outputs {
  std::vector<at::Tensor> keep;
  std::vector<mdl::TensorToWrite> tensors;
  void Add(const std::string& name, const at::Tensor& t) {
    at::Tensor host = t.detach().to(at::kCPU, at::kFloat).contiguous();
    keep.push_back(host);
    tensors.push_back({name, mdl::DType::kF32, host.sizes().vec(), host.data_ptr(),
                       static_cast<size_t>(host.numel()) * sizeof(float)});
  }
};

int Run(const Flags& f) {
  const at::Device device = f.device == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const at::ScalarType dtype = f.dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  auto seqs = ReadBatch(f.batch);
  if (!seqs.ok()) { std::cerr << "tandem-model-eval: " << seqs.status().ToString() << "\n"; return 1; }
  auto model = mdl::LoadPretrained(f.model, device, dtype);
  if (!model.ok()) { std::cerr << "tandem-model-eval: " << model.status().ToString() << "\n"; return 1; }
  mdl::Transformer& m = **model;
  Outputs out;

  // Forward over the packed (or flat) forest; pairs score every next token.
  auto batch = mdl::BuildForestBatch(*seqs, {}, m.config().vocab_size, device, f.mode == "packed");
  if (!batch.ok()) { std::cerr << "tandem-model-eval: " << batch.status().ToString() << "\n"; return 1; }
  if (f.grads) m.parameters().EnableGrad();
  mdl::ForestOutput fwd = m.Forward(*batch);
  const int64_t pairs = batch->num_pairs();
  at::Tensor loss = -fwd.logprob.sum() / static_cast<double>(pairs);
  if (f.grads) torch::autograd::backward({loss});
  for (int64_t s = 0; s < batch->num_sequences(); ++s) {
    const int64_t a = batch->pair_offsets[s], b = batch->pair_offsets[s + 1];
    out.Add("logprobs." + std::to_string(s), fwd.logprob.slice(0, a, b));
    out.Add("entropy." + std::to_string(s), fwd.entropy.slice(0, a, b));
  }
  out.Add("loss", loss.reshape({1}));
  if (f.grads)
    for (const auto& p : m.parameters().named()) out.Add("grad." + p.name, m.parameters().Grad(p.name));

  // Incremental decoding, one sequence at a time, every token through Decode.
  if (f.decode) {
    c10::NoGradGuard no_grad;
    std::vector<at::Tensor> last;
    for (const auto& seq : *seqs) {
      mdl::KvCache cache = mdl::KvCache::Empty(m.config(), 1, device, dtype);
      at::Tensor logits;
      for (size_t i = 0; i < seq.size(); ++i) {
        auto opts = at::TensorOptions().dtype(at::kLong).device(device);
        at::Tensor tok = at::full({1}, seq[i], opts);
        at::Tensor pos = at::full({1}, static_cast<int64_t>(i), opts);
        mdl::DecodeOutput d = m.Decode(tok, pos, cache);
        cache.Append(d.new_keys, d.new_values);
        logits = d.logits;
      }
      last.push_back(logits[0]);
    }
    out.Add("decode_logits", at::stack(last));
  }

  if (!f.save.empty()) {
    tandem::Status s = mdl::SavePretrained(m, f.save);
    if (!s.ok()) { std::cerr << "tandem-model-eval: " << s.ToString() << "\n"; return 1; }
  }
  tandem::Status w = mdl::WriteSafetensors(f.out, out.tensors, {});
  if (!w.ok()) { std::cerr << "tandem-model-eval: " << w.ToString() << "\n"; return 1; }
  std::printf("{\"sequences\": %zu, \"pairs\": %lld, \"packed_tokens\": %lld, \"loss\": %.8f}\n", seqs->size(),
              static_cast<long long>(pairs), static_cast<long long>(batch->num_tokens()), loss.item<double>());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  std::string error;
  if (!ParseFlags(argc, argv, f, error)) return Usage(error);
  try {
    return Run(f);
  } catch (const std::exception& e) {  // LibTorch errors (c10::Error) stop here, named
    std::cerr << "tandem-model-eval: " << e.what() << "\n";
    return 1;
  }
}
