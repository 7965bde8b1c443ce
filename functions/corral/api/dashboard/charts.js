// Charts on uPlot (vendored as uPlot.iife.min.js, loaded before the modules as window.uPlot).
// A LineChart owns one uPlot in one container: it rebuilds the plot only when the set of
// series changes, otherwise swaps the data, and follows the container's width.

const PALETTE = [
  "#1f6fb2", "#d1495b", "#2a9d55", "#8f5bd1", "#e08a00",
  "#00838f", "#a35200", "#c2185b", "#5d7a00", "#455a9c",
];

export function color(n) {
  return PALETTE[n % PALETTE.length];
}

export class LineChart {
  /**
   * container: the element the plot goes in. options: {height, xLabel, yLabel, time,
   * stepped, points (false: lines only)}. The container carries data-series (how many series have points) so tests and
   * scripts can tell an empty chart from a drawn one.
   */
  constructor(container, options) {
    this.container = container;
    this.options = options;
    this.plot = null;
    this.key = "";
    this.resize = new ResizeObserver(() => this.fit());
    this.resize.observe(container);
  }

  width() {
    return Math.max(280, Math.floor(this.container.clientWidth || 600));
  }

  fit() {
    if (this.plot && Math.abs(this.plot.width - this.width()) > 2) {
      this.plot.setSize({ width: this.width(), height: this.options.height || 280 });
    }
  }

  /** series: [{label, points: [[x, y], ...], color?, dash?}]; yLabel replaces the option's. */
  update(series, { yLabel } = {}) {
    if (yLabel && yLabel !== this.options.yLabel) {
      this.options = { ...this.options, yLabel };
      this.destroy();
    }
    const drawn = series.filter((s) => s.points.length);
    this.container.dataset.series = String(drawn.length);
    this.container.dataset.points = String(drawn.reduce((n, s) => n + s.points.length, 0));
    if (!drawn.length) {
      this.destroy();
      return;
    }
    const data = window.uPlot.join(
      drawn.map((s) => [s.points.map((p) => p[0]), s.points.map((p) => p[1])]),
    );
    const key = drawn.map((s) => s.label).join("\n");
    if (this.plot && key === this.key) {
      this.plot.setData(data);
      return;
    }
    this.destroy();
    this.key = key;
    this.plot = new window.uPlot(this.plotOptions(drawn), data, this.container);
  }

  plotOptions(series) {
    const o = this.options;
    const stepped = o.stepped ? window.uPlot.paths.stepped({ align: 1 }) : undefined;
    return {
      width: this.width(),
      height: o.height || 280,
      scales: { x: { time: Boolean(o.time) } },
      axes: [
        { label: o.xLabel, stroke: "#333", grid: { stroke: "#e3e3e3" } },
        { label: o.yLabel, stroke: "#333", grid: { stroke: "#e3e3e3" } },
      ],
      cursor: { drag: { x: true, y: false } },
      legend: { live: true },
      series: [
        { label: o.xLabel },
        ...series.map((s, n) => ({
          label: s.label,
          stroke: s.color || color(n),
          width: 2,
          dash: s.dash,
          spanGaps: true,
          paths: stepped,
          points: { show: o.points !== false && s.points.length < 40, size: 5 },
        })),
      ],
    };
  }

  destroy() {
    if (this.plot) this.plot.destroy();
    this.plot = null;
    this.key = "";
  }

  dispose() {
    this.resize.disconnect();
    this.destroy();
  }
}
