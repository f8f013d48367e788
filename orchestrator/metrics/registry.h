// A small Prometheus metrics registry for tandemd's GET /metrics (issue #2
// part 3: jobs and tasks by state, launches, a launch-latency histogram).
// Counters, gauges and histograms with fixed buckets, each a family with
// label names; Render() produces the Prometheus text exposition format 0.0.4
// (# HELP / # TYPE, escaped label values, name_bucket{le=...}, _sum, _count).
//
// Not thread-safe, by design: the daemon is single-threaded on its
// io_context and updates and renders metrics only there. Metrics owned by
// other threads must be read into a gauge on the io thread before Render.
//
// Families render in registration order; their series sorted by label values.
// References returned by WithLabels stay valid until that series is Removed.
// A family holds at most kMaxSeries series: label values beyond that (which
// would grow /metrics without bound) all land in one series whose every label
// is "other", and the first such overflow is logged.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"
#include "orchestrator/metrics/text_format.h"

namespace tandem::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// A value that only goes up; Inc with a negative or NaN amount is ignored.
class Counter {
 public:
  void Inc(double amount = 1);
  double value() const { return value_; }

 private:
  double value_ = 0;
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_ = v; }
  void Inc(double amount = 1) { value_ += amount; }
  void Dec(double amount = 1) { value_ -= amount; }
  double value() const { return value_; }

 private:
  double value_ = 0;
};

// Observations counted into fixed buckets (upper bounds, inclusive), plus a
// sum and a count. The +Inf bucket is implicit.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);

  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Cumulative count for each bound, then for +Inf (== count()).
  std::vector<uint64_t> CumulativeCounts() const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Bucket helpers, as in the Prometheus client libraries.
std::vector<double> LinearBuckets(double start, double width, int count);
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, MetricType type, std::vector<std::string> label_names);
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Appends this family's HELP, TYPE and sample lines.
  void Render(std::string* out) const;

 protected:
  // `values` fitted to the label names (a programming error otherwise: logged once).
  std::vector<std::string> Fit(std::vector<std::string> values);
  // The label values of the overflow series ("other" for each); logs once.
  std::vector<std::string> Overflow(size_t limit);
  virtual void RenderSeries(std::string* out) const = 0;

 private:
  std::string name_;
  std::string help_;
  MetricType type_;
  std::vector<std::string> label_names_;
  bool warned_ = false;
  bool overflowed_ = false;
};

// All series of one metric name, one per combination of label values.
template <typename M>
class Family final : public FamilyBase {
 public:
  Family(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
         std::vector<double> bounds = {})
      : FamilyBase(std::move(name), std::move(help), type, std::move(label_names)), bounds_(std::move(bounds)) {
    if (this->label_names().empty()) WithLabels({});  // a label-less metric exists from the start, at 0
  }

  static constexpr size_t kMaxSeries = 1000;

  // The series for these label values (in label-name order), created at 0.
  M& WithLabels(std::vector<std::string> values) {
    values = Fit(std::move(values));
    auto it = series_.find(values);
    if (it == series_.end()) {
      if (series_.size() >= kMaxSeries) values = Overflow(kMaxSeries);
      it = series_.find(values);
      if (it == series_.end()) it = series_.emplace(std::move(values), Make()).first;
    }
    return *it->second;
  }
  // The only series of a family without labels.
  M& Get() { return WithLabels({}); }
  // Drops a series (e.g. a finished job's); references to it become invalid.
  void Remove(std::vector<std::string> values) { series_.erase(Fit(std::move(values))); }
  size_t size() const { return series_.size(); }

 private:
  std::unique_ptr<M> Make() const {
    if constexpr (std::is_same_v<M, Histogram>) return std::make_unique<M>(bounds_);
    else return std::make_unique<M>();
  }
  void RenderSeries(std::string* out) const override;

  std::vector<double> bounds_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> series_;
};

template <typename M>
void Family<M>::RenderSeries(std::string* out) const {
  for (const auto& [values, m] : series_) {
    if constexpr (std::is_same_v<M, Histogram>) text::AppendHistogram(out, name(), label_names(), values, *m);
    else text::AppendSample(out, name(), label_names(), values, m->value());
  }
}

class Registry {
 public:
  // Errors: kInvalidArgument for a bad metric or label name (or, for a
  // histogram, the reserved label "le" or bounds not strictly increasing);
  // kAlreadyExists when the name, or a sample name it renders (x_bucket,
  // x_sum, x_count), is taken.
  StatusOr<Family<Counter>*> AddCounter(std::string name, std::string help,
                                        std::vector<std::string> label_names = {});
  StatusOr<Family<Gauge>*> AddGauge(std::string name, std::string help, std::vector<std::string> label_names = {});
  StatusOr<Family<Histogram>*> AddHistogram(std::string name, std::string help, std::vector<double> upper_bounds,
                                            std::vector<std::string> label_names = {});

  // The whole registry in the text exposition format
  // (Content-Type: text/plain; version=0.0.4; charset=utf-8).
  std::string Render() const;

 private:
  Status Check(const std::string& name, const std::vector<std::string>& label_names, MetricType type) const;
  std::vector<std::unique_ptr<FamilyBase>> families_;
};

}  // namespace tandem::metrics
