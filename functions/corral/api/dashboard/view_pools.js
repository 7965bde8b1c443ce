// Pools: instances live, starting and allowed; backoff and breaker; budget used this month;
// and GPUs demanded vs GPUs paid for over time (sampled by the page, see capacity.js).

import { api } from "./api.js";
import { capacitySamples, capacitySeries } from "./capacity.js";
import { LineChart } from "./charts.js";
import { dash, h, money, replaceKeepingFocus, table, time } from "./dom.js";

const STARTING = ["QUEUED", "REQUESTED", "ALLOCATED"];

function sum(values) {
  return values.reduce((a, b) => a + (b || 0), 0);
}

// Live: up and past starting (registered, or on their way out); starting: launched but not
// yet registered. Together they are what the pool counts against max_instances.
function live(pool) {
  return sum(Object.values(pool.instances_by_state || {})) - starting(pool);
}

function starting(pool) {
  return sum(STARTING.map((s) => (pool.instances_by_state || {})[s]));
}

function backoff(pool) {
  const b = pool.backoff;
  if (!b || !b.active) return b && b.failures ? `clear (${b.failures} recent failures)` : "clear";
  return h("span", { className: "warn" }, "backed off until ", time(b.until),
    ` after ${b.failures} failure(s)`, b.reason ? `: ${b.reason}` : "");
}

function breaker(pool) {
  const b = pool.breaker;
  if (!b || !b.open) return b && b.boot_failures ? `closed (${b.boot_failures} boot failures)` : "closed";
  return h("span", { className: "warn" }, "open since ", time(b.since), b.reason ? `: ${b.reason}` : "");
}

function budget(pool) {
  const b = pool.budget || {};
  if (b.budget_usd === null || b.budget_usd === undefined) return `${money(b.spent_usd)} (no budget)`;
  const text = `${money(b.spent_usd)} of ${money(b.budget_usd)}`;
  const meter = h("meter", {
    min: 0, max: b.budget_usd || 1, value: b.spent_usd, optimum: 0, high: 0.8 * b.budget_usd,
    "aria-label": `budget used: ${text}`,
  });
  return h("span", { className: b.exhausted ? "warn" : undefined },
    h("span", { className: "line" }, meter), text, b.exhausted ? " (exhausted)" : "");
}

function unavailable(pool) {
  const out = (pool.offerings || []).filter((o) => !o.available).map((o) => o.key);
  return out.length ? out.join(", ") : dash();
}

const COLUMNS = [
  { label: "Pool", cell: (p) => [p.name, p.is_default ? h("span", { className: "sub" }, "default") : null] },
  {
    label: "Instances live / starting / max",
    cell: (p) => [`${live(p)} / ${starting(p)} / ${p.max_instances}`, h("span", { className: "sub" }, `min ${p.min_instances}`)],
    className: "num",
  },
  { label: "Trials pending / running", cell: (p) => `${p.trials_pending} / ${p.trials_running}`, className: "num" },
  {
    label: "Backoff / breaker",
    cell: (p) => [
      h("span", { className: "line" }, "backoff: ", backoff(p)),
      h("span", { className: "line" }, "breaker: ", breaker(p)),
    ],
  },
  { label: "Budget used this month", cell: budget },
  { label: "Burn per hour", cell: (p) => money((p.budget || {}).hourly_burn_usd), className: "num" },
  { label: "Offerings unavailable", cell: unavailable, className: "ids" },
  { label: "Why pending trials wait", cell: (p) => p.cannot_serve || p.blocked_reason || dash(), className: "reason" },
];

export function create(ctx) {
  const els = {};
  let chart;
  return {
    title: "Pools",
    mount(root) {
      els.pools = h("div", { id: "pools" });
      els.chart = h("div", { id: "capacity-chart", className: "chart", dataset: { series: "0" } });
      els.now = h("p", { className: "note", id: "capacity-now" });
      chart = new LineChart(els.chart, { xLabel: "time", yLabel: "GPUs", time: true, stepped: true, points: false, height: 240 });
      root.append(
        h("h1", { tabIndex: -1 }, "Pools"),
        els.pools,
        h("section", { "aria-labelledby": "capacity-h" },
          h("h2", { id: "capacity-h" }, "GPUs demanded vs paid for"),
          h("figure", { className: "chart-figure" }, els.chart, h("figcaption", {}, els.now))),
      );
    },
    async refresh() {
      const reply = await ctx.load(api("GET", "pools"));
      if (reply) {
        replaceKeepingFocus(els.pools, table("Resource pools", COLUMNS, reply.pools, { rowKey: (p) => p.name }));
      }
      await ctx.sampled;
      this.draw();
    },
    draw() {
      chart.update(capacitySeries());
      const samples = capacitySamples();
      const last = samples[samples.length - 1];
      els.now.textContent = last
        ? `Now: ${last.demanded} GPU(s) demanded by unfinished trials, ${last.busy} busy, ` +
          `${last.paid} paid for. Sampled by this page on each refresh (${samples.length} samples).`
        : "No samples yet.";
    },
    dispose() {
      chart.dispose();
    },
  };
}
