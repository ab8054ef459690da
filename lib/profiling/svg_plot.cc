#include "lib/profiling/svg_plot.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace titan {
namespace {

constexpr double kWidth = 760;
constexpr char kFont[] = "font-family=\"sans-serif\" font-size=\"12\"";

// A round tick spacing (1, 2 or 5 times a power of ten) giving about `ticks` ticks up to `max`.
double TickStep(double max, int ticks) {
  if (max <= 0) return 1;
  const double raw = max / ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (raw <= m * power) return m * power;
  }
  return 10 * power;
}

std::string Number(double value) {
  if (value != 0 && std::fabs(value) < 0.1) return absl::StrFormat("%.3g", value);
  return absl::StrFormat(std::fabs(value) >= 100 ? "%.0f" : "%.1f", value);
}

std::string Open(double height, const std::string& title) {
  return absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 "
      "%.0f %.0f\" %s>\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"18\" font-weight=\"bold\" font-size=\"14\">%s</text>\n",
      kWidth, height, kWidth, height, kFont, XmlEscape(title));
}

// Legend entries in one row at height y.
std::string Legend(const std::vector<PlotSeries>& series, double x, double y) {
  std::string svg;
  for (const PlotSeries& s : series) {
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                          x, y - 10, s.color, x + 16, y, XmlEscape(s.name));
    x += 30 + 7.0 * s.name.size();
  }
  return svg;
}

// Vertical grid lines and labels along a horizontal axis from x0 (value 0) with `scale` px/unit.
std::string XAxis(double x0, double scale, double max, double top, double bottom,
                  const std::string& unit) {
  std::string svg;
  const double step = TickStep(max, 5);
  for (double v = 0; v <= max * 1.0001; v += step) {
    const double x = x0 + v * scale;
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n",
        x, top, x, bottom, x, bottom + 14, Number(v));
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s</text>\n",
                        kWidth - 10, bottom + 28, XmlEscape(unit));
  return svg;
}

}  // namespace

std::string XmlEscape(absl::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string StackedBarChart(const std::string& title, const std::vector<std::string>& labels,
                            const std::vector<PlotSeries>& series,
                            const std::vector<std::vector<double>>& values,
                            const std::string& unit) {
  constexpr double kLeft = 110, kRight = 80, kTop = 50, kBar = 22, kGap = 10;
  const double bottom = kTop + labels.size() * (kBar + kGap);
  std::string svg = Open(bottom + 40, title) + Legend(series, kLeft, 38);
  double max = 0;
  for (const std::vector<double>& bar : values) {
    double total = 0;
    for (double v : bar) total += v;
    max = std::max(max, total);
  }
  const double scale = max > 0 ? (kWidth - kLeft - kRight) / max : 0;
  svg += XAxis(kLeft, scale, max, kTop - 4, bottom, unit);
  for (size_t i = 0; i < labels.size(); ++i) {
    const double y = kTop + i * (kBar + kGap);
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                          kLeft - 8, y + kBar * 0.7, XmlEscape(labels[i]));
    double x = kLeft, total = 0;
    for (size_t s = 0; s < series.size() && s < values[i].size(); ++s) {
      const double w = values[i][s] * scale;
      absl::StrAppendFormat(
          &svg,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s: "
          "%s %s</title></rect>\n",
          x, y, w, kBar, series[s].color, XmlEscape(series[s].name), Number(values[i][s]),
          XmlEscape(unit));
      x += w;
      total += values[i][s];
    }
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x + 6, y + kBar * 0.7,
                          Number(total));
  }
  return svg + "</svg>\n";
}

std::string StackedAreaChart(const std::string& title, const std::vector<double>& x,
                             const std::vector<PlotSeries>& series,
                             const std::vector<std::vector<double>>& y,
                             const std::vector<std::pair<double, std::string>>& markers,
                             const std::string& x_unit, const std::string& y_unit) {
  constexpr double kLeft = 70, kRight = 20, kTop = 50, kHeight = 300;
  const double bottom = kTop + kHeight;
  std::string svg = Open(bottom + 40, title) + Legend(series, kLeft, 38);
  std::vector<double> stacked(x.size(), 0);
  std::vector<std::vector<double>> tops;
  for (size_t s = 0; s < series.size(); ++s) {
    for (size_t i = 0; i < x.size(); ++i) stacked[i] += y[s][i];
    tops.push_back(stacked);
  }
  const double max_y = stacked.empty() ? 0 : *std::max_element(stacked.begin(), stacked.end());
  const double max_x = x.empty() ? 0 : x.back();
  const double sx = max_x > 0 ? (kWidth - kLeft - kRight) / max_x : 0;
  const double sy = max_y > 0 ? kHeight / (max_y * 1.05) : 0;
  svg += XAxis(kLeft, sx, max_x, kTop, bottom, x_unit);
  const double y_step = TickStep(max_y * 1.05, 5);
  for (double v = 0; v <= max_y * 1.05; v += y_step) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s</text>\n",
        kLeft, bottom - v * sy, kWidth - kRight, bottom - v * sy, kLeft - 6, bottom - v * sy + 4,
        Number(v));
  }
  absl::StrAppendFormat(&svg, "<text x=\"10\" y=\"%.1f\" fill=\"#555\">%s</text>\n", kTop - 4,
                        XmlEscape(y_unit));
  for (size_t s = 0; s < series.size(); ++s) {
    std::string points;
    for (size_t i = 0; i < x.size(); ++i) {
      absl::StrAppendFormat(&points, "%.1f,%.1f ", kLeft + x[i] * sx, bottom - tops[s][i] * sy);
    }
    for (size_t i = x.size(); i-- > 0;) {
      const double below = s == 0 ? 0 : tops[s - 1][i];
      absl::StrAppendFormat(&points, "%.1f,%.1f ", kLeft + x[i] * sx, bottom - below * sy);
    }
    absl::StrAppendFormat(&svg, "<polygon points=\"%s\" fill=\"%s\"><title>%s</title></polygon>\n",
                          points, series[s].color, XmlEscape(series[s].name));
  }
  for (const auto& [at, label] : markers) {
    const double mx = kLeft + at * sx;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" "
                          "stroke-dasharray=\"4,3\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"#333\">%s"
                          "</text>\n",
                          mx, kTop, mx, bottom, mx + 3, kTop + 12, XmlEscape(label));
  }
  return svg + "</svg>\n";
}

std::string BarChart(const std::string& title, const std::vector<std::string>& labels,
                     const std::vector<double>& values, const std::string& unit,
                     const std::string& color) {
  constexpr double kLeft = 330, kRight = 70, kTop = 34, kBar = 16, kGap = 5;
  const double bottom = kTop + labels.size() * (kBar + kGap);
  std::string svg = Open(bottom + 40, title);
  const double max = values.empty() ? 0 : *std::max_element(values.begin(), values.end());
  const double scale = max > 0 ? (kWidth - kLeft - kRight) / max : 0;
  svg += XAxis(kLeft, scale, max, kTop - 4, bottom, unit);
  for (size_t i = 0; i < labels.size(); ++i) {
    const double y = kTop + i * (kBar + kGap);
    std::string label = labels[i];
    if (label.size() > 48) label = label.substr(0, 45) + "...";
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>"
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                          "<title>%s</title></rect><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                          kLeft - 6, y + kBar * 0.8, XmlEscape(label), kLeft, y, values[i] * scale,
                          kBar, color, XmlEscape(labels[i]), kLeft + values[i] * scale + 4,
                          y + kBar * 0.8, Number(values[i]));
  }
  return svg + "</svg>\n";
}

}  // namespace titan
