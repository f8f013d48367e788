// Prometheus text exposition format pieces; see text_format.h.
#include "orchestrator/metrics/text_format.h"

#include <fmt/format.h>

#include <cmath>

#include "orchestrator/metrics/registry.h"

namespace tandem::metrics::text {
namespace {

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Length of the valid UTF-8 sequence at s[i], or 0 if it is not one.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((b0 & 0xE0) == 0xC0) { len = 2; cp = b0 & 0x1F; }
  else if ((b0 & 0xF0) == 0xE0) { len = 3; cp = b0 & 0x0F; }
  else if ((b0 & 0xF8) == 0xF0) { len = 4; cp = b0 & 0x07; }
  else return 0;
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;  // overlong, surrogate
  return len;
}

std::string Escape(std::string_view v, bool quotes) {
  std::string out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size();) {
    size_t len = Utf8SequenceLength(v, i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    char c = v[i];
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quotes) out += "\\\"";
    else out.append(v.substr(i, len));
    i += len;
  }
  return out;
}

void AppendLabels(std::string* out, const std::vector<std::string>& names, const std::vector<std::string>& values,
                  std::string_view extra_name = {}, std::string_view extra_value = {}) {
  if (names.empty() && extra_name.empty()) return;
  *out += '{';
  bool first = true;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!first) *out += ',';
    first = false;
    *out += names[i];
    *out += "=\"";
    *out += EscapeLabelValue(i < values.size() ? values[i] : std::string());
    *out += '"';
  }
  if (!extra_name.empty()) {
    if (!first) *out += ',';
    *out += extra_name;
    *out += "=\"";
    *out += extra_value;
    *out += '"';
  }
  *out += '}';
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (!(IsAlpha(c) || c == '_' || c == ':' || (i > 0 && IsDigit(c)))) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (!(IsAlpha(c) || c == '_' || (i > 0 && IsDigit(c)))) return false;
  }
  return true;
}

std::string EscapeLabelValue(std::string_view v) { return Escape(v, /*quotes=*/true); }
std::string EscapeHelp(std::string_view v) { return Escape(v, /*quotes=*/false); }

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

void AppendSample(std::string* out, std::string_view name, const std::vector<std::string>& label_names,
                  const std::vector<std::string>& label_values, double value) {
  *out += name;
  AppendLabels(out, label_names, label_values);
  *out += ' ';
  *out += FormatValue(value);
  *out += '\n';
}

void AppendHistogram(std::string* out, std::string_view name, const std::vector<std::string>& label_names,
                     const std::vector<std::string>& label_values, const Histogram& h) {
  const std::string bucket = std::string(name) + "_bucket";
  std::vector<uint64_t> cumulative = h.CumulativeCounts();
  const std::vector<double>& bounds = h.upper_bounds();
  for (size_t i = 0; i < cumulative.size(); ++i) {
    *out += bucket;
    AppendLabels(out, label_names, label_values, "le", i < bounds.size() ? FormatValue(bounds[i]) : "+Inf");
    *out += ' ';
    *out += std::to_string(cumulative[i]);
    *out += '\n';
  }
  AppendSample(out, std::string(name) + "_sum", label_names, label_values, h.sum());
  AppendSample(out, std::string(name) + "_count", label_names, label_values, static_cast<double>(h.count()));
}

}  // namespace tandem::metrics::text
