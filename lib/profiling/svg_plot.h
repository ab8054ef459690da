#ifndef TITAN_LIB_PROFILING_SVG_PLOT_H_
#define TITAN_LIB_PROFILING_SVG_PLOT_H_

// Small self-contained SVG charts (no scripts, no fonts or files fetched) for profile_run's report.

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace titan {

struct PlotSeries {
  std::string name;
  std::string color;  // any SVG color, e.g. "#4e79a7"
};

// Text safe inside SVG/HTML elements and attribute values.
std::string XmlEscape(absl::string_view text);

// One horizontal bar per label, split into `series` segments: values[bar][series], in `unit`.
std::string StackedBarChart(const std::string& title, const std::vector<std::string>& labels,
                            const std::vector<PlotSeries>& series,
                            const std::vector<std::vector<double>>& values,
                            const std::string& unit);

// Areas stacked bottom to top in series order over x: y[series][point]. Vertical dashed lines at
// `markers` (x, label).
std::string StackedAreaChart(const std::string& title, const std::vector<double>& x,
                             const std::vector<PlotSeries>& series,
                             const std::vector<std::vector<double>>& y,
                             const std::vector<std::pair<double, std::string>>& markers,
                             const std::string& x_unit, const std::string& y_unit);

// One horizontal bar per label, longest first as given, value printed at its end.
std::string BarChart(const std::string& title, const std::vector<std::string>& labels,
                     const std::vector<double>& values, const std::string& unit,
                     const std::string& color);

}  // namespace titan

#endif  // TITAN_LIB_PROFILING_SVG_PLOT_H_
