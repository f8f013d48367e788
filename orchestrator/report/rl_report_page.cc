// The curves page of `tandem report` (rl_report_page.h).
#include "orchestrator/report/rl_report_page.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "orchestrator/report/rl_summary.h"

namespace tandem::report {
namespace {

struct Chart {
  const char* title;
  std::vector<const char*> keys;
};

const std::vector<Chart>& Charts() {
  static const std::vector<Chart> kCharts = {
      {"held-out accuracy and sampled reward", {"eval/accuracy", "reward/mean"}},
      {"seconds per phase", {"seconds/step", "seconds/rollout", "seconds/train", "seconds/sync"}},
      {"KL to the reference and entropy", {"loss/ref_kl_mean", "loss/entropy_mean"}},
      {"gradient norm", {"grad_norm"}},
      {"response length (tokens)", {"response_length/mean"}},
  };
  return kCharts;
}

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};

std::string Escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string ChartSvg(const RlMetrics& m, const Chart& chart) {
  constexpr double kW = 720, kH = 240, kLeft = 56, kRight = 16, kTop = 12, kBottom = 28;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 0;
  bool any = false;
  for (const char* key : chart.keys) {
    const auto& s = m.Of(key);
    const size_t n = std::min(s.size(), kMaxReportPoints);
    for (size_t i = 0; i < n; ++i) {
      const double x = static_cast<double>(s[i].first), y = s[i].second;
      if (!any) x0 = x1 = x, y0 = y1 = y;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      any = true;
    }
  }
  if (!any) return "";
  y0 = std::min(y0, 0.0);
  if (y1 <= y0) y1 = y0 + 1;
  if (x1 <= x0) x1 = x0 + 1;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * (kW - kLeft - kRight); };
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * (kH - kTop - kBottom); };
  std::string svg = fmt::format("<h2>{}</h2>\n<svg width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\">\n", Escape(chart.title),
                                kW, kH, kW, kH);
  svg += fmt::format("<rect class=\"frame\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", kLeft, kTop,
                     kW - kLeft - kRight, kH - kTop - kBottom);
  for (const double y : {y0, (y0 + y1) / 2, y1})
    svg += fmt::format("<text class=\"tick\" x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.4g}</text>\n", kLeft - 4, py(y) + 4, y);
  svg += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{}\">step {:.0f}</text>\n", px(x0), kH - 8, x0);
  svg += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"end\">step {:.0f}</text>\n", px(x1),
                     kH - 8, x1);
  std::string legend;
  size_t color = 0;
  for (const char* key : chart.keys) {
    const auto& s = m.Of(key);
    if (s.empty()) continue;
    const size_t n = std::min(s.size(), kMaxReportPoints);
    const char* c = kColors[color++ % std::size(kColors)];
    std::string points;
    for (size_t i = 0; i < n; ++i) points += fmt::format("{:.1f},{:.1f} ", px(static_cast<double>(s[i].first)), py(s[i].second));
    svg += fmt::format("<polyline class=\"series\" data-key=\"{}\" data-points=\"{}\" stroke=\"{}\" points=\"{}\"/>\n",
                       Escape(key), n, c, points);
    legend += fmt::format("<span style=\"color:{}\">&#9632; {} (last {:.4g})</span> ", c, Escape(key), s[n - 1].second);
  }
  return svg + "</svg>\n<p class=\"legend\">" + legend + "</p>\n";
}

}  // namespace

std::string RlReportHtml(const RlMetrics& m, const std::string& title) {
  std::string page = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>tandem report: " + Escape(title) +
                     "</title>\n<style>body{font:14px sans-serif;margin:24px}pre{background:#f6f6f6;padding:8px}"
                     "polyline{fill:none;stroke-width:1.5}.frame{fill:none;stroke:#999}.tick{font-size:11px;fill:#555}"
                     "</style></head><body>\n<h1>" + Escape(title) + "</h1>\n";
  page += "<pre class=\"summary\">" + Escape(RlSummaryText(SummarizeRl(m), title + "/metrics.jsonl", nullptr)) + "</pre>\n";
  size_t drawn = 0;
  for (const Chart& chart : Charts()) {
    const std::string svg = ChartSvg(m, chart);
    drawn += !svg.empty();
    page += svg;
  }
  if (drawn == 0) page += "<p class=\"note\">no metrics to draw</p>\n";
  return page + "</body></html>\n";
}

}  // namespace tandem::report
