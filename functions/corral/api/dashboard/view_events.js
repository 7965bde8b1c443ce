// The event log, newest first, filterable by kind, pool, time window and text (ids or
// message). Follows GET /events with since=next_since, so each refresh reads only what is new.

import { api } from "./api.js";
import { badge, dash, h, link, replaceKeepingFocus, table, time } from "./dom.js";

const KINDS = [
  "launch_planned", "launch_requested", "launch_failed", "launch_cancelled",
  "offering_unavailable", "pool_backoff", "breaker_open", "breaker_reset", "budget_exhausted",
  "agent_registered", "agent_lost", "agent_draining", "agent_undrained",
  "instance_terminating", "instance_terminated", "instance_stopped", "instance_adopted",
  "orphan_terminated",
  "spot_interruption", "spot_request_cancelled", "trial_assigned", "trial_state",
  "trial_requeued", "experiment_submitted", "experiment_killed",
];
const WINDOWS = [
  ["900", "last 15 minutes"], ["3600", "last hour"], ["86400", "last 24 hours"], ["604800", "last 7 days"],
];
const MAX_KEPT = 5000;
const MAX_SHOWN = 500;
const PAGES_PER_REFRESH = 5;

const COLUMNS = [
  { label: "Time", cell: (e) => time(e.at) },
  { label: "Kind", cell: (e) => badge(e.kind) },
  { label: "Message", cell: (e) => e.message, className: "reason" },
  { label: "Pool", cell: (e) => e.pool || dash() },
  { label: "Instance", cell: (e) => e.instance_id || dash(), className: "ids" },
  { label: "Trial", cell: (e) => e.trial_id || dash(), className: "ids" },
  {
    label: "Experiment",
    cell: (e) => (e.experiment_id ? link(`#/experiments/${encodeURIComponent(e.experiment_id)}`, e.experiment_id) : dash()),
    className: "ids",
  },
];

function field(id, label, control) {
  control.id = id;
  return h("div", { className: "field" }, h("label", { htmlFor: id }, label), control);
}

export function create(ctx) {
  const els = {};
  let events = [];
  let since = null;

  function reset() {
    events = [];
    since = null;
  }

  function matches(e) {
    const kind = els.kind.value;
    const text = els.text.value.trim().toLowerCase();
    if (kind && e.kind !== kind) return false;
    if (!text) return true;
    return [e.message, e.instance_id, e.trial_id, e.experiment_id, e.pool, e.kind]
      .some((v) => v && String(v).toLowerCase().includes(text));
  }

  function render() {
    const shown = events.filter(matches).reverse();
    const caption = shown.length > MAX_SHOWN
      ? `Events, newest first: the latest ${MAX_SHOWN} of ${shown.length} matching`
      : `Events, newest first: ${shown.length} matching of ${events.length} loaded`;
    replaceKeepingFocus(els.table, table(caption, COLUMNS, shown.slice(0, MAX_SHOWN), {
      empty: "No events match.",
      rowKey: (e) => `${e.at}:${e.kind}:${e.instance_id || e.trial_id || e.experiment_id || ""}`,
    }));
  }

  return {
    title: "Event log",
    mount(root) {
      els.kind = h("select", { onchange: render },
        h("option", { value: "" }, "all kinds"), KINDS.map((k) => h("option", { value: k }, k)));
      els.pool = h("input", { type: "text", placeholder: "all pools", autocomplete: "off", spellcheck: "false" });
      els.pool.addEventListener("change", () => {
        reset();
        ctx.refreshNow();
      });
      els.text = h("input", { type: "search", placeholder: "id or words", oninput: render });
      els.window = h("select", { onchange: () => {
        reset();
        ctx.refreshNow();
      } }, WINDOWS.map(([v, label]) => h("option", { value: v, selected: v === "3600" }, label)));
      els.table = h("div", { id: "events" });
      root.append(
        h("h1", { tabIndex: -1 }, "Event log"),
        h("form", { className: "filters", role: "search", "aria-label": "Filter events", onsubmit: (e) => e.preventDefault() },
          field("events-kind", "Kind", els.kind),
          field("events-pool", "Pool", els.pool),
          field("events-text", "Search", els.text),
          field("events-window", "Since", els.window)),
        els.table,
      );
    },
    async refresh() {
      if (since === null) since = Date.now() / 1000 - Number(els.window.value);
      const pool = els.pool.value.trim() || undefined;
      for (let n = 0; n < PAGES_PER_REFRESH; n += 1) {
        const page = await ctx.load(api("GET", "events", { query: { since, limit: 500, pool } }));
        if (!page) break;
        events.push(...page.events);
        since = page.next_since;
        if (!page.has_more) break;
      }
      if (events.length > MAX_KEPT) events = events.slice(-MAX_KEPT);
      render();
    },
    dispose() {},
  };
}
