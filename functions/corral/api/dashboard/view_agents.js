// Agents (one per instance): state, offering, spot or on-demand, GPUs busy, GPU utilisation,
// idle time, heartbeat and cost.

import { api } from "./api.js";
import { badge, dash, duration, h, money, replaceKeepingFocus, table, time } from "./dom.js";

function utilisation(agent) {
  const values = agent.gpu_utilization_pct || [];
  if (!values.length) return dash();
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  const each = values.map((v) => `${Math.round(v)}`).join(", ");
  return h("span", { className: "nowrap", title: `per GPU: ${each} %` },
    h("meter", { min: 0, max: 100, value: mean, "aria-label": `mean GPU utilisation ${Math.round(mean)} %` }),
    ` ${Math.round(mean)} %`,
    values.length > 1 ? h("span", { className: "sub" }, `per GPU ${each}`) : null);
}

function gpusBusy(agent) {
  return `${agent.slots - agent.free_slots} of ${agent.slots}`;
}

function notes(agent) {
  const out = [];
  if (agent.interruption_notice_at) out.push(h("span", { className: "warn" }, "interruption notice at ", time(agent.interruption_notice_at)));
  if (agent.last_error) out.push(h("span", { className: "sub" }, agent.last_error));
  return out.length ? out : dash();
}

const COLUMNS = [
  { label: "Instance", cell: (a) => [a.id, h("span", { className: "sub" }, a.cloud_id || "no cloud id yet")] },
  { label: "Pool", cell: (a) => a.pool },
  { label: "State", cell: (a) => badge(a.state) },
  { label: "Offering", cell: (a) => [a.instance_type, h("span", { className: "sub" }, a.location)] },
  { label: "Capacity", cell: (a) => h("span", { className: `nowrap capacity-${a.capacity_type}` }, a.capacity_type) },
  { label: "GPUs busy", cell: gpusBusy, className: "num" },
  { label: "GPU utilisation", cell: utilisation },
  { label: "Idle for", cell: (a) => (a.idle_s === null ? dash() : duration(a.idle_s)), className: "num" },
  { label: "Heartbeat", cell: (a) => (a.heartbeat_age_s === null ? dash() : `${duration(a.heartbeat_age_s)} ago`) },
  { label: "Cost so far", cell: (a) => money(a.cost_usd), className: "num" },
  { label: "Trials", cell: (a) => (a.trials.length ? a.trials.join(", ") : dash()), className: "ids" },
  { label: "Notes", cell: notes },
];

export function create(ctx) {
  let holder;
  let all;
  return {
    title: "Agents",
    mount(root) {
      holder = h("div", { id: "agents" });
      all = h("input", { type: "checkbox", id: "agents-all", onchange: () => ctx.refreshNow() });
      root.append(
        h("h1", { tabIndex: -1 }, "Agents"),
        h("div", { className: "controls" }, all, h("label", { htmlFor: "agents-all" }, "Include ended instances")),
        holder,
      );
    },
    async refresh() {
      const reply = await ctx.load(api("GET", "agents", { query: { all: all.checked ? "true" : undefined } }));
      if (!reply) return;
      const live = reply.instances;
      const caption = all.checked ? "Every instance record, oldest first" : "Live instances, oldest first";
      replaceKeepingFocus(holder, table(caption, COLUMNS, live, { empty: "No instances.", rowKey: (a) => a.id }));
    },
    dispose() {},
  };
}
