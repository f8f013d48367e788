// Muon's update (muon.h).
#include "workers/train/muon.h"

#include <c10/core/GradMode.h>
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "workers/collective/group.h"

namespace tandem::train {

Status Validate(const MuonOptions& o) {
  if (!(o.beta >= 0 && o.beta < 1)) return InvalidArgument("muon: beta must be in [0, 1), got " + std::to_string(o.beta));
  if (o.ns_steps < 1 || o.ns_steps > 100)
    return InvalidArgument("muon: ns_steps must be in [1, 100], got " + std::to_string(o.ns_steps));
  if (!(o.weight_decay >= 0)) return InvalidArgument("muon: weight_decay must be >= 0");
  if (!at::isFloatingType(o.ns_dtype)) return InvalidArgument("muon: ns_dtype must be a floating type");
  if (!(o.lr_scale > 0)) return InvalidArgument("muon: lr_scale must be > 0");
  return Status::Ok();
}

bool MuonTakes(const std::string& name, at::IntArrayRef shape) {
  if (shape.size() < 2) return false;
  return name.find("embed_tokens") == std::string::npos && name.find("lm_head") == std::string::npos;
}

std::vector<at::Tensor> MuonMatrices(const std::string& name, const at::Tensor& t) {
  const auto ends_with = [&name](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with("experts.w_gate_up")) {
    const int64_t i = t.size(-1) / 2;
    return {t.narrow(-1, 0, i).transpose(-2, -1), t.narrow(-1, i, i).transpose(-2, -1)};
  }
  if (ends_with("experts.w_down")) return {t.transpose(-2, -1)};
  return {t};
}

at::Tensor NewtonSchulz5(const at::Tensor& g, int steps, at::ScalarType dtype) {
  constexpr double a = 3.4445, b = -4.7750, c = 2.0315;
  const bool tall = g.size(-2) > g.size(-1);
  at::Tensor x = g.to(dtype);
  if (tall) x = x.transpose(-2, -1);
  x = x / (at::linalg_vector_norm(x, 2, at::IntArrayRef{-2, -1}, /*keepdim=*/true) + 1e-7);
  // Three GEMMs a step and nothing else: the scaling and the sums ride in
  // the GEMMs' alpha/beta (B = b*A + c*A@A, x = a*x + B@x), so the step
  // costs its matrix multiplies (docs/benchmarks.md "Optimizers").
  const std::vector<int64_t> shape = x.sizes().vec();
  const bool batched = x.dim() > 2;
  if (batched) x = x.reshape({-1, x.size(-2), x.size(-1)});
  for (int i = 0; i < steps; ++i) {
    const at::Tensor A = at::matmul(x, x.transpose(-2, -1));
    const at::Tensor B = batched ? at::baddbmm(A, A, A, b, c) : at::addmm(A, A, A, b, c);
    x = batched ? at::baddbmm(x, B, x, a, 1) : at::addmm(x, B, x, a, 1);
  }
  x = x.reshape(shape);
  if (tall) x = x.transpose(-2, -1);
  return x.to(g.scalar_type());
}

std::vector<int> MuonOwners(const std::vector<int64_t>& sizes, int ranks) {
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<int64_t> load(static_cast<size_t>(std::max(ranks, 1)), 0);
  std::vector<int> owner(sizes.size(), 0);
  for (const size_t i : order) {
    const auto r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = static_cast<int>(r);
    load[r] += sizes[i];
  }
  return owner;
}

double MuonScale(int64_t rows, int64_t cols, bool match_adamw_rms) {
  if (match_adamw_rms) return 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
  return std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols)));
}

void MuonUpdate(const at::Tensor& w, const at::Tensor& grad, const at::Tensor& momentum, double lr,
                const MuonOptions& o) {
  const at::Tensor g = grad.to(at::kFloat);
  momentum.lerp_(g, 1 - o.beta);
  const at::Tensor u = o.nesterov ? g.lerp(momentum, o.beta) : momentum;
  const at::Tensor x = NewtonSchulz5(u, o.ns_steps, o.ns_dtype);
  if (o.weight_decay != 0) w.mul_(1 - lr * o.weight_decay);
  w.add_(x, -lr * MuonScale(w.size(-2), w.size(-1), o.match_adamw_rms));
}

Muon::Muon(model::ParameterSet& params, MuonOptions muon, double max_grad_norm)
    : params_(params), muon_(muon), max_grad_norm_(max_grad_norm) {}
Muon::~Muon() = default;

StatusOr<std::unique_ptr<Muon>> Muon::Create(model::ParameterSet& params, const MuonOptions& muon,
                                             const AdamWOptions& adamw, collective::Group* dp) {
  TANDEM_RETURN_IF_ERROR(Validate(muon));
  TANDEM_RETURN_IF_ERROR(Validate(adamw));
  if (params.slots().empty()) return InvalidArgument("muon: no parameters");
  std::unique_ptr<Muon> o(new Muon(params, muon, adamw.max_grad_norm));
  const at::Tensor& first = params.slots().front().leaf;
  if (adamw.staging.residency == Residency::kStaged)
    o->buffers_ = std::make_shared<StagingBuffers>(adamw.staging, first.device());
  AdamWOptions rest = adamw;
  rest.max_grad_norm = 0;  // clipped once, by Step
  rest.takes = [](const model::ParameterSet::Slot& s) { return !MuonTakes(s.name, s.leaf.sizes()); };
  TANDEM_ASSIGN_OR_RETURN(o->rest_, AdamW::Create(params, rest, o->buffers_), "muon: the parameters AdamW takes");
  o->master_ = first.scalar_type() != at::kFloat;
  std::vector<StateSlabs::Item> items;
  for (size_t i = 0; i < params.slots().size(); ++i) {
    const model::ParameterSet::Slot& s = params.slots()[i];
    if (!MuonTakes(s.name, s.leaf.sizes())) continue;
    // Staged buckets are cut between matrices only: a stack's leading index.
    const int64_t n = s.leaf.numel();
    const int64_t unit = s.leaf.dim() > 2 && s.leaf.size(0) > 0 ? n / s.leaf.size(0) : n;
    items.push_back({i, s.name, n, std::max<int64_t>(unit, 1)});
  }
  if (items.empty()) return InvalidArgument("muon: the model has no hidden matrices");
  TANDEM_ASSIGN_OR_RETURN(o->slabs_,
                          StateSlabs::Create(std::move(items), o->master_ ? 2 : 1, adamw.staging, first.device(),
                                             o->buffers_),
                          "muon");
  if (dp != nullptr && dp->world_size() > 1) {
    o->dp_ = dp;
    std::vector<int64_t> sizes;
    for (const StateSlabs::Item& item : o->slabs_->items()) sizes.push_back(item.numel);
    o->owner_ = MuonOwners(sizes, dp->world_size());
  }
  try {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; o->master_ && i < o->slabs_->items().size(); ++i)
      o->slabs_->View(1, i).copy_(params.slots()[o->slabs_->items()[i].slot].leaf.detach().reshape({-1}));
  } catch (const std::exception& e) {
    return Internal(std::string("muon: initialising its state: ") + e.what());
  }
  return o;
}

StatusOr<double> Muon::Step(double lr) {
  TANDEM_ASSIGN_OR_RETURN(const double norm, ClipGradNorm(params_, max_grad_norm_), "muon step");
  try {
    c10::NoGradGuard no_grad;
    slabs_->Update([&](const StateSlabs::Piece& piece, const std::vector<at::Tensor>& state) {
      const StateSlabs::Item& item = slabs_->items()[piece.item];
      const model::ParameterSet::Slot& s = params_.slots()[item.slot];
      std::vector<int64_t> shape = s.leaf.sizes().vec();
      if (shape.size() > 2) shape[0] = piece.length / item.unit;  // whole matrices of the stack
      auto part = [&](const at::Tensor& t) { return t.view({-1}).narrow(0, piece.begin, piece.length).view(shape); };
      if (!Mine(piece.item)) {  // another rank's matrices: the momentum only
        state[0].lerp_(part(s.leaf.grad()).reshape({-1}).to(at::kFloat), 1 - muon_.beta);
        return;
      }
      const at::Tensor p = part(s.leaf.detach());
      const at::Tensor w = master_ ? state[1].view(shape) : p;
      const std::vector<at::Tensor> ws = MuonMatrices(s.name, w), gs = MuonMatrices(s.name, part(s.leaf.grad())),
                                    ms = MuonMatrices(s.name, state[0].view(shape));
      for (size_t j = 0; j < ws.size(); ++j) MuonUpdate(ws[j], gs[j], ms[j], lr * muon_.lr_scale, muon_);
      if (master_) p.copy_(w);
    });
  } catch (const std::exception& e) {
    return Internal(std::string("muon step: ") + e.what());
  }
  TANDEM_RETURN_IF_ERROR(GatherOwned(), "muon step");
  TANDEM_RETURN_IF_ERROR(rest_->Step(lr).status(), "muon step");
  ++steps_;
  return norm;
}

OptimizerState Muon::State() const {
  OptimizerState out = rest_->State();
  out.steps = steps_;
  if (steps_ == 0) return out;
  for (size_t i = 0; i < slabs_->items().size(); ++i) {
    const model::ParameterSet::Slot& s = params_.slots()[slabs_->items()[i].slot];
    out.tensors["momentum/" + s.name] = slabs_->View(0, i).view(s.leaf.sizes());
    if (master_) out.tensors["master/" + s.name] = slabs_->View(1, i).view(s.leaf.sizes());
  }
  return out;
}

Status Muon::Restore(const OptimizerState& in) {
  if (in.steps < 0 || in.tensors.empty() != (in.steps == 0))
    return InvalidArgument("optimizer state: " + std::to_string(in.steps) + " steps and " +
                           std::to_string(in.tensors.size()) + " optimizer tensors");
  const std::vector<StateSlabs::Item>& items = slabs_->items();
  OptimizerState rest;
  rest.steps = in.steps;
  std::vector<const at::Tensor*> momentum(items.size(), nullptr), master(items.size(), nullptr);
  std::map<std::string, size_t> item_of;
  for (size_t i = 0; i < items.size(); ++i) item_of[items[i].name] = i;
  for (const auto& [name, t] : in.tensors) {
    const size_t slash = name.find('/');
    const auto k = slash == std::string::npos ? item_of.end() : item_of.find(name.substr(slash + 1));
    const std::string kind = slash == std::string::npos ? "" : name.substr(0, slash);
    if (k != item_of.end() && kind == "momentum") {
      momentum[k->second] = &t;
    } else if (k != item_of.end() && kind == "master") {
      master[k->second] = &t;
    } else {
      rest.tensors[name] = t;
    }
  }
  // Muon's part first, then AdamW's (which checks all of its own before it
  // changes anything): nothing is half-restored.
  for (size_t i = 0; i < items.size() && in.steps > 0; ++i) {
    const at::IntArrayRef shape = params_.slots()[items[i].slot].leaf.sizes();
    if (momentum[i] == nullptr) return InvalidArgument("optimizer state: no tensor \"momentum/" + items[i].name + "\"");
    for (const at::Tensor* t : {momentum[i], master[i]}) {
      if (t != nullptr && (!t->defined() || t->sizes() != shape || !at::isFloatingType(t->scalar_type())))
        return InvalidArgument("optimizer state: Muon's tensors of \"" + items[i].name +
                               "\" have the wrong shape or dtype");
    }
    if (master[i] != nullptr && !master_)
      return InvalidArgument("optimizer state: \"master/" + items[i].name + "\" for fp32 parameters");
  }
  TANDEM_RETURN_IF_ERROR(rest_->Restore(rest));
  try {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < items.size(); ++i) {
      if (in.steps == 0) {
        slabs_->View(0, i).zero_();
      } else {
        slabs_->View(0, i).copy_(momentum[i]->reshape({-1}));
      }
      if (master_) {
        const at::Tensor& from = master[i] != nullptr && in.steps > 0 ? *master[i] : params_.slots()[items[i].slot].leaf.detach();
        slabs_->View(1, i).copy_(from.reshape({-1}));
      }
    }
  } catch (const std::exception& e) {
    return Internal(std::string("optimizer state: ") + e.what());
  }
  steps_ = in.steps;
  return Status::Ok();
}

Status Muon::Release() {
  TANDEM_RETURN_IF_ERROR(slabs_->Release(), "muon");
  return rest_->Release();
}

Status Muon::Resume() {
  TANDEM_RETURN_IF_ERROR(slabs_->Resume(), "muon");
  return rest_->Resume();
}

bool Muon::Mine(size_t item) const { return dp_ == nullptr || owner_[item] == dp_->rank(); }

int64_t Muon::owned_elements() const {
  int64_t n = 0;
  for (size_t i = 0; i < slabs_->items().size(); ++i) n += Mine(i) ? slabs_->items()[i].numel : 0;
  return n;
}

// Each slot's new weights from its owner: summed over the ranks, the
// others' set to -0.0 (x + -0.0 is x for every x, -0.0 too: exact). The masters for bf16 parameters
// (then the parameter is their rounding), else the parameters.
Status Muon::GatherOwned() {
  if (dp_ == nullptr) return Status::Ok();
  Status st;
  auto gather = [&](size_t item, const at::Tensor& w, const at::Tensor& p) {
    if (!st.ok()) return;  // the group is broken: no further collective
    const bool mine = Mine(item);
    if (!mine) w.fill_(-0.0);
    std::vector<at::Tensor> one = {w};
    st = dp_->AllReduceSum(one).WithContext("gathering " + slabs_->items()[item].name + " from rank " +
                                            std::to_string(owner_[item]));
    if (st.ok() && !mine && master_) p.copy_(w);
  };
  try {
    c10::NoGradGuard no_grad;
    auto flat = [&](size_t item, int64_t begin, int64_t length) {
      return params_.slots()[slabs_->items()[item].slot].leaf.detach().view({-1}).narrow(0, begin, length);
    };
    if (master_) {
      slabs_->Update([&](const StateSlabs::Piece& piece, const std::vector<at::Tensor>& master) {
        gather(piece.item, master[0], flat(piece.item, piece.begin, piece.length));
      }, /*only_kind=*/1);
    } else {
      for (size_t i = 0; i < slabs_->items().size(); ++i) {
        const at::Tensor p = flat(i, 0, slabs_->items()[i].numel);
        gather(i, p, p);
      }
    }
  } catch (const std::exception& e) {
    return Internal(std::string("gathering the owned matrices: ") + e.what());
  }
  return st;
}

std::vector<size_t> Muon::muon_slots() const {
  std::vector<size_t> out;
  for (const StateSlabs::Item& item : slabs_->items()) out.push_back(item.slot);
  return out;
}

// Staged, both parts stream through the same buffers.
int64_t Muon::device_bytes() const {
  if (buffers_) return buffers_->bytes();
  return slabs_->device_bytes() + rest_->device_bytes();
}

int64_t Muon::resident_bytes() const {
  if (buffers_) return std::max(slabs_->resident_bytes(), rest_->resident_bytes());
  return slabs_->resident_bytes() + rest_->resident_bytes();
}

StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(model::ParameterSet& params, const OptimizerChoice& choice) {
  if (choice.name == "adamw") {
    AdamWOptions adamw = choice.adamw;
    if (choice.shard_state) adamw.shard = choice.data_parallel;
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<AdamW> o, AdamW::Create(params, adamw));
    return std::unique_ptr<Optimizer>(std::move(o));
  }
  if (choice.shard_state)
    return InvalidArgument("--optimizer-shard: AdamW's state only (Muon already shares its matrices among the ranks)");
  if (choice.name == "muon") {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Muon> o, Muon::Create(params, choice.muon, choice.adamw, choice.data_parallel));
    return std::unique_ptr<Optimizer>(std::move(o));
  }
  return InvalidArgument("--optimizer: expected adamw or muon, got \"" + choice.name + "\"");
}

StatusOr<OptimizerChoice> ChooseOptimizer(const std::string& name, double muon_lr_scale, const std::string& residency,
                                          int64_t slots, int64_t slot_mib, double weight_decay, double max_grad_norm) {
  if (name != "adamw" && name != "muon") return InvalidArgument("--optimizer: expected adamw or muon, got \"" + name + "\"");
  OptimizerChoice c;
  c.name = name;
  TANDEM_ASSIGN_OR_RETURN(c.adamw.staging, MakeStaging(residency, slots, slot_mib));
  c.adamw.weight_decay = weight_decay;
  c.adamw.max_grad_norm = max_grad_norm;
  c.muon.weight_decay = weight_decay;
  c.muon.lr_scale = muon_lr_scale;
  c.muon.match_adamw_rms = true;
  if (!(muon_lr_scale > 0)) return InvalidArgument("--muon-lr-scale: expected a number > 0");
  return c;
}

std::string Describe(const OptimizerChoice& c) {
  return c.name + ", state " + Describe(c.adamw.staging) + (c.shard_state ? ", sharded across the data-parallel ranks" : "");
}

}  // namespace tandem::train
