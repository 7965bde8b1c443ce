// Experiments, newest first: state, progress, best metric, cost, owner; kill from the page.

import { api } from "./api.js";
import { badge, dash, h, link, money, number, replaceKeepingFocus, table, time } from "./dom.js";
import { killButton } from "./kill.js";

const ENDED = ["COMPLETED", "FAILED", "CANCELLED"];

export function progress(experiment) {
  const counts = experiment.trials_by_state || {};
  const total = experiment.trial_count || 0;
  const ended = ENDED.reduce((n, s) => n + (counts[s] || 0), 0);
  const running = counts.RUNNING || 0;
  const pending = counts.PENDING || 0;
  const parts = [`${ended} of ${total} ended`];
  if (running) parts.push(`${running} running`);
  if (pending) parts.push(`${pending} pending`);
  if (counts.FAILED) parts.push(`${counts.FAILED} failed`);
  const text = parts.join(", ");
  return h("span", { className: "progress" },
    h("progress", { max: total || 1, value: ended, "aria-label": text }),
    h("span", { className: "progress-text" }, text));
}

export function best(experiment) {
  const b = experiment.best;
  if (!b) return dash();
  return h("span", { title: `trial ${b.trial_id}` }, `${b.metric} ${number(b.value)}`);
}

const COLUMNS = (ctx) => [
  {
    label: "Experiment",
    cell: (e) => [
      link(`#/experiments/${encodeURIComponent(e.id)}`, e.name || e.id),
      h("span", { className: "sub" }, e.is_command ? `${e.id} · command` : e.id),
    ],
  },
  { label: "State", cell: (e) => badge(e.state) },
  { label: "Progress", cell: progress },
  { label: "Best", cell: best },
  { label: "Cost so far", cell: (e) => money(e.cost_usd), className: "num" },
  { label: "GPU-hours", cell: (e) => number(e.gpu_hours, 3), className: "num" },
  { label: "Owner", cell: (e) => e.owner || dash(), className: "owner" },
  { label: "Submitted", cell: (e) => time(e.submitted_at) },
  { label: "Actions", cell: (e) => killButton(ctx, e) },
];

export function create(ctx) {
  let holder;
  return {
    title: "Experiments",
    mount(root) {
      holder = h("div", { id: "experiments" });
      root.append(h("h1", { tabIndex: -1 }, "Experiments"), holder);
    },
    async refresh() {
      const reply = await ctx.load(api("GET", "experiments", { query: { limit: 100 } }));
      if (!reply) return;
      replaceKeepingFocus(holder, table("Experiments, newest first", COLUMNS(ctx), reply.experiments, {
        empty: "No experiments yet: corral experiment create examples/grid.yaml",
        rowKey: (e) => e.id,
      }));
    },
    dispose() {},
  };
}
