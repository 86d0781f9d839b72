// The Spend page's charts, drawn with uPlot from the page's JSON: spend over time per top
// spender (lines), and the latency and TTFT histograms (bars over the bins).
// Each chart's uPlot instance is kept in `window.spendCharts[name]` (the browser tests read
// the data a chart was drawn with there).
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("chart-data").textContent);
  const colors = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#64748b"];
  const dollars = (u, splits) => splits.map((v) => (v === null ? "" : "$" + v));
  window.spendCharts = {};

  function spendChart(element, chart) {
    const options = {
      width: element.clientWidth || 480,
      height: 220,
      series: [{}].concat(
        chart.series.map(([label], i) => ({
          label,
          stroke: colors[i % colors.length],
          width: 2,
          points: { size: 4 },
          value: (u, v) => (v === null ? "—" : "$" + v.toFixed(v >= 1 ? 2 : 6)),
        }))
      ),
      axes: [{}, { size: 80, values: dollars }],
      legend: { live: false },
      scales: { x: { time: true } },
    };
    return new uPlot(options, [chart.x].concat(chart.series.map(([, values]) => values)), element);
  }

  function histogramChart(element, chart) {
    // The axis names each bin by its upper bound ("< 50 ms"), the last by its lower one: the
    // whole ranges ("50 ms–100 ms") do not fit under eleven bars.
    const bins = chart.bins.map((label) => {
      const parts = label.split("\u2013");
      return parts.length === 2 ? "< " + parts[1] : label;
    });
    const options = {
      width: element.clientWidth || 480,
      height: 220,
      series: [
        {},
        {
          label: "runs",
          stroke: colors[0],
          fill: "rgba(37, 99, 235, 0.35)",
          width: 1,
          paths: uPlot.paths.bars({ size: [0.8, 60] }),
          points: { show: false },
        },
      ],
      axes: [
        { values: (u, splits) => splits.map((i) => bins[i] || ""), incrs: [1], size: 50, rotate: -35 },
        { size: 60 },
      ],
      legend: { live: false },
      scales: { x: { time: false, range: [-0.5, bins.length - 0.5] } },
    };
    return new uPlot(options, [bins.map((_, i) => i), chart.runs], element);
  }

  for (const element of document.querySelectorAll("[data-chart]")) {
    const name = element.dataset.chart;
    const draw = element.dataset.kind === "histogram" ? histogramChart : spendChart;
    window.spendCharts[name] = draw(element, data[name]);
  }
})();
