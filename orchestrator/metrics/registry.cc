// Metric types, families and the registry; see registry.h.
#include "orchestrator/metrics/registry.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/log.h"

namespace tandem::metrics {

void Counter::Inc(double amount) {
  if (amount >= 0) value_ += amount;  // false for NaN too
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  // First bound >= v (bounds are inclusive upper limits); NaN lands in +Inf.
  size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  if (std::isnan(v)) i = bounds_.size();
  ++counts_[i];
  ++count_;
  sum_ += v;
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(counts_.size());
  uint64_t run = 0;
  for (size_t i = 0; i < counts_.size(); ++i) out[i] = run += counts_[i];
  return out;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> out;
  for (int i = 0; i < count; ++i) out.push_back(start + width * i);
  return out;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) out.push_back(b);
  return out;
}

FamilyBase::FamilyBase(std::string name, std::string help, MetricType type, std::vector<std::string> label_names)
    : name_(std::move(name)), help_(std::move(help)), type_(type), label_names_(std::move(label_names)) {}

std::vector<std::string> FamilyBase::Fit(std::vector<std::string> values) {
  if (values.size() != label_names_.size()) {
    if (!warned_) {
      log::Error("metrics", "wrong number of label values metric={} want={} got={}", name_, label_names_.size(),
                 values.size());
      warned_ = true;
    }
    values.resize(label_names_.size());
  }
  return values;
}

std::vector<std::string> FamilyBase::Overflow(size_t limit) {
  if (!overflowed_) {
    log::Warn("metrics", "too many label values: further ones count as \"other\" metric={} limit={}", name_, limit);
    overflowed_ = true;
  }
  return std::vector<std::string>(label_names_.size(), "other");
}

void FamilyBase::Render(std::string* out) const {
  static constexpr const char* kTypeNames[] = {"counter", "gauge", "histogram"};
  *out += "# HELP " + name_ + " " + text::EscapeHelp(help_) + "\n";
  *out += "# TYPE " + name_ + " " + kTypeNames[static_cast<int>(type_)] + "\n";
  RenderSeries(out);
}

namespace {

// The sample names a family of `type` called `name` writes.
std::vector<std::string> SampleNames(const std::string& name, MetricType type) {
  if (type != MetricType::kHistogram) return {name};
  return {name, name + "_bucket", name + "_sum", name + "_count"};
}

}  // namespace

Status Registry::Check(const std::string& name, const std::vector<std::string>& label_names,
                       MetricType type) const {
  if (!text::IsValidMetricName(name)) {
    return InvalidArgument("metric name \"" + name + "\": expected [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  std::set<std::string> seen;
  for (const std::string& l : label_names) {
    if (!text::IsValidLabelName(l)) {
      return InvalidArgument("metric " + name + ": label name \"" + l +
                             "\": expected [a-zA-Z_][a-zA-Z0-9_]* not starting with __");
    }
    if (type == MetricType::kHistogram && l == "le") {
      return InvalidArgument("metric " + name + ": label \"le\" is reserved for histogram buckets");
    }
    if (!seen.insert(l).second) return InvalidArgument("metric " + name + ": label \"" + l + "\" given twice");
  }
  std::vector<std::string> mine = SampleNames(name, type);
  for (const auto& f : families_) {
    for (const std::string& theirs : SampleNames(f->name(), f->type())) {
      if (std::find(mine.begin(), mine.end(), theirs) != mine.end()) {
        return AlreadyExists("metric " + name + ": the name " + theirs + " is already used by metric " + f->name());
      }
    }
  }
  return Status::Ok();
}

StatusOr<Family<Counter>*> Registry::AddCounter(std::string name, std::string help,
                                                std::vector<std::string> label_names) {
  TANDEM_RETURN_IF_ERROR(Check(name, label_names, MetricType::kCounter));
  auto f = std::make_unique<Family<Counter>>(std::move(name), std::move(help), MetricType::kCounter,
                                             std::move(label_names));
  Family<Counter>* raw = f.get();
  families_.push_back(std::move(f));
  return raw;
}

StatusOr<Family<Gauge>*> Registry::AddGauge(std::string name, std::string help,
                                            std::vector<std::string> label_names) {
  TANDEM_RETURN_IF_ERROR(Check(name, label_names, MetricType::kGauge));
  auto f = std::make_unique<Family<Gauge>>(std::move(name), std::move(help), MetricType::kGauge,
                                           std::move(label_names));
  Family<Gauge>* raw = f.get();
  families_.push_back(std::move(f));
  return raw;
}

StatusOr<Family<Histogram>*> Registry::AddHistogram(std::string name, std::string help,
                                                    std::vector<double> upper_bounds,
                                                    std::vector<std::string> label_names) {
  TANDEM_RETURN_IF_ERROR(Check(name, label_names, MetricType::kHistogram));
  if (!upper_bounds.empty() && std::isinf(upper_bounds.back()) && upper_bounds.back() > 0) {
    upper_bounds.pop_back();  // +Inf is always there
  }
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i]) || (i > 0 && upper_bounds[i] <= upper_bounds[i - 1])) {
      return InvalidArgument("histogram " + name + ": bucket bounds must be finite and strictly increasing");
    }
  }
  auto f = std::make_unique<Family<Histogram>>(std::move(name), std::move(help), MetricType::kHistogram,
                                               std::move(label_names), std::move(upper_bounds));
  Family<Histogram>* raw = f.get();
  families_.push_back(std::move(f));
  return raw;
}

std::string Registry::Render() const {
  std::string out;
  for (const auto& f : families_) f->Render(&out);
  return out;
}

}  // namespace tandem::metrics
