// The Prometheus text exposition format 0.0.4, the pieces registry.h needs:
// name checks, escaping, number formatting and sample lines.
// https://prometheus.io/docs/instrumenting/exposition_formats/
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::metrics {

class Histogram;

namespace text {

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved).
bool IsValidLabelName(std::string_view name);

// Label values: backslash, double quote and newline escaped; bytes that are
// not UTF-8 become U+FFFD (the format is UTF-8).
std::string EscapeLabelValue(std::string_view v);
// HELP text: backslash and newline escaped (and UTF-8 repaired likewise).
std::string EscapeHelp(std::string_view v);

// Shortest text that parses back to `v`; "+Inf", "-Inf", "NaN".
std::string FormatValue(double v);

// `name{l1="v1",...} value\n`; no braces when there are no labels.
void AppendSample(std::string* out, std::string_view name, const std::vector<std::string>& label_names,
                  const std::vector<std::string>& label_values, double value);
// name_bucket{...,le="b"} for each bound and +Inf, then name_sum and name_count.
void AppendHistogram(std::string* out, std::string_view name, const std::vector<std::string>& label_names,
                     const std::vector<std::string>& label_values, const Histogram& h);

}  // namespace text
}  // namespace tandem::metrics
