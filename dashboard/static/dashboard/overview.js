// The overview's charts: hourly series from the page's JSON, drawn with uPlot.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("chart-data").textContent);
  const s = data.series;
  const colors = ["#2563eb", "#dc2626", "#16a34a", "#9333ea"];
  const charts = {
    requests: [["requests", s.requests], ["errors", s.errors]],
    tokens: [["prompt", s.prompt_tokens], ["completion", s.completion_tokens], ["cached", s.cached_tokens]],
    cache: [["hit ratio %", s.cache_hit_ratio.map((v) => (v === null ? null : v * 100))]],
    cost: [["cost", s.cost]],
    latency: [["p50", s.latency_p50], ["p95", s.latency_p95]],
    ttft: [["p50", s.ttft_p50], ["p95", s.ttft_p95]],
  };
  // The cost axis in dollars, with the decimals uPlot chose for its ticks.
  const dollars = (u, splits) => splits.map((v) => (v === null ? "" : "$" + v));
  for (const element of document.querySelectorAll("[data-chart]")) {
    const lines = charts[element.dataset.chart];
    const options = {
      width: element.clientWidth || 480,
      height: 200,
      series: [{}].concat(
        lines.map(([label], i) => ({ label, stroke: colors[i], width: 2, spanGaps: false, points: { size: 4 } }))
      ),
      axes: [{}, element.dataset.chart === "cost" ? { size: 70, values: dollars } : { size: 70 }],
      legend: { live: false },
      scales: { x: { time: true } },
    };
    new uPlot(options, [data.hours].concat(lines.map(([, values]) => values)), element);
  }
})();
