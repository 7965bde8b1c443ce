// One experiment: its summary, the learning curves of one metric for all its trials on one
// chart, its trials (state, hyperparameters, why pending, restarts, cost) and the live log of
// the trial the user picks.

import { api } from "./api.js";
import { LineChart } from "./charts.js";
import { badge, dash, h, hparams, money, number, replaceKeepingFocus, table, time, visible } from "./dom.js";
import { killButton } from "./kill.js";
import { LogPanel } from "./logs.js";
import { best, progress } from "./view_experiments.js";

const KINDS = ["validation", "training"];

function latest(trial, kind) {
  const values = trial.latest_metrics && trial.latest_metrics[kind];
  if (!values) return dash();
  return Object.entries(values).map(([k, v]) => `${k}=${number(v)}`).join(", ");
}

function restarts(trial) {
  const text = `${trial.restarts} of ${trial.max_restarts}`;
  return trial.preemptions ? `${text} (${trial.preemptions} preempted)` : text;
}

export function create(ctx, experimentId) {
  const shortId = (trialId) =>
    trialId.startsWith(`${experimentId}.`) ? trialId.slice(experimentId.length + 1) : trialId;
  const id = encodeURIComponent(experimentId);
  const els = {};
  let chart;
  let logs;
  let metricNames = new Set();

  function trialColumns() {
    return [
      // The trial's own part of its id ("t0003"): the experiment's part is in the heading.
      { label: "Trial", cell: (t) => h("span", { title: t.id }, shortId(t.id)) },
      { label: "State", cell: (t) => badge(t.state) },
      { label: "Hyperparameters", cell: (t) => hparams(t.hyperparameters), className: "hp" },
      { label: "Waiting for", cell: (t) => t.pending_reason || dash(), className: "reason" },
      { label: "Restarts", cell: restarts },
      { label: "Best", cell: (t) => number(t.best_value), className: "num" },
      { label: "Latest validation", cell: (t) => latest(t, "validation") },
      { label: "Cost", cell: (t) => money(t.cost_usd), className: "num" },
      { label: "GPU-hours", cell: (t) => number(t.gpu_hours, 3), className: "num" },
      {
        label: "Log",
        cell: (t) => h("button", {
          type: "button",
          "aria-pressed": String(logs.trialId === t.id),
          "aria-controls": "trial-log",
          "aria-label": `Show the log of trial ${shortId(t.id)}`,
          dataset: { focusKey: `log-${t.id}`, logTrial: t.id },
          onclick: () => {
            logs.follow(t.id);
            ctx.refreshNow();
          },
        }, logs.trialId === t.id ? "Following" : "Show log"),
      },
    ];
  }

  function summary(e) {
    const rows = [
      ["State", badge(e.state)],
      ["Progress", progress(e)],
      ["Best", best(e)],
      ["Cost so far", money(e.cost_usd)],
      ["GPU-hours", number(e.gpu_hours, 3)],
      ["Owner", e.owner || dash()],
      ["Pool", e.pool],
      ["Submitted", time(e.submitted_at)],
    ];
    if (e.killed_at) rows.push(["Killed", time(e.killed_at)]);
    return h("dl", { className: "summary" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  }

  function metricOptions(detail, trials) {
    const kind = els.kind.value;
    const wanted = (detail.config && detail.config.searcher && detail.config.searcher.metric) || "";
    if (wanted) metricNames.add(wanted);
    for (const t of trials) {
      Object.keys((t.latest_metrics && t.latest_metrics[kind]) || {}).forEach((m) => metricNames.add(m));
    }
    const chosen = els.metric.value || wanted;
    const names = [...metricNames].sort();
    if (els.metric.dataset.names !== names.join("\n")) {
      els.metric.dataset.names = names.join("\n");
      els.metric.replaceChildren(...names.map((m) => h("option", { value: m, selected: m === chosen }, m)));
    }
  }

  async function drawCurves() {
    const query = { kind: els.kind.value, name: els.metric.value || undefined };
    const reply = await ctx.load(api("GET", `experiments/${id}/metrics`, { query }));
    if (!reply) return;
    const series = reply.series.map((s) => ({ label: shortId(s.trial_id), points: s.points }));
    chart.update(series, { yLabel: reply.metric || "value" });
    const drawn = series.filter((s) => s.points.length).length;
    const direction = reply.smaller_is_better ? "smaller is better" : "larger is better";
    const some = reply.truncated ? " (the best 100 trials are drawn)" : "";
    els.chartNote.textContent = drawn
      ? `${reply.metric} (${reply.kind} metrics) by batches trained, ${drawn} trial(s)${some}; ` +
        `${direction}.`
      : `No ${reply.metric} reported in ${reply.kind} metrics yet.`;
  }

  return {
    title: `Experiment ${experimentId}`,
    mount(root) {
      els.heading = h("h1", { tabIndex: -1 }, `Experiment ${experimentId}`);
      els.summary = h("div", { id: "experiment-summary" });
      els.kill = h("div", { className: "actions" });
      els.metric = h("select", { id: "curve-metric", onchange: () => drawCurves() });
      els.kind = h("select", { id: "curve-kind", onchange: () => {
        els.metric.value = "";
        metricNames = new Set();
        ctx.refreshNow();
      } }, KINDS.map((k) => h("option", { value: k }, k)));
      els.chart = h("div", { id: "curves-chart", className: "chart", dataset: { series: "0" } });
      els.chartNote = h("p", { id: "curves-note", className: "note", "aria-live": "polite" });
      els.trials = h("div", { id: "trials" });
      chart = new LineChart(els.chart, { xLabel: "batches", yLabel: "value", height: 300 });
      logs = new LogPanel(ctx);
      root.append(
        h("p", { className: "crumbs" }, h("a", { href: "#/experiments" }, "All experiments")),
        els.heading,
        els.summary,
        els.kill,
        h("section", { "aria-labelledby": "curves-h" },
          h("h2", { id: "curves-h" }, "Learning curves"),
          h("div", { className: "controls" },
            h("label", { htmlFor: "curve-metric" }, "Metric"), els.metric,
            h("label", { htmlFor: "curve-kind" }, "Kind"), els.kind),
          h("figure", { className: "chart-figure" }, els.chart,
            h("figcaption", {}, els.chartNote))),
        h("section", { "aria-labelledby": "trials-h" },
          h("h2", { id: "trials-h" }, "Trials"), els.trials),
        logs.element,
      );
    },
    async refresh() {
      const detail = await ctx.load(api("GET", `experiments/${id}`));
      if (!detail) return;
      els.heading.textContent = visible(`Experiment ${detail.name || ""} ${detail.id}`.replace("  ", " "));
      replaceKeepingFocus(els.summary, summary(detail));
      replaceKeepingFocus(els.kill, killButton(ctx, detail));
      let trials = detail.trials;
      if (detail.trials_truncated) {
        const page = await ctx.load(api("GET", `experiments/${id}/trials`, { query: { limit: 1000 } }));
        if (page) trials = page.trials;
      }
      replaceKeepingFocus(els.trials, table("Trials in submission order", trialColumns(), trials, {
        rowKey: (t) => t.id,
      }));
      metricOptions(detail, trials);
      await Promise.all([drawCurves(), logs.refresh()]);
    },
    dispose() {
      chart.dispose();
    },
  };
}
