// The dashboard's entry point: hash routing, the refresh loop, the error banner.
//
// Every view is create(ctx, params) -> {title, mount(root), refresh(), dispose()}. The loop
// refreshes the shown view (and samples GPU capacity) every few seconds while the tab is
// visible; a failed call never fails silently: it lands in the banner with its status.

import { ApiError, takeTokenFromFragment } from "./api.js";
import { sampleCapacity } from "./capacity.js";
import { h, visible } from "./dom.js";
import * as agents from "./view_agents.js";
import * as events from "./view_events.js";
import * as experiment from "./view_experiment.js";
import * as experiments from "./view_experiments.js";
import * as pools from "./view_pools.js";

const ROUTES = [
  { pattern: /^\/experiments\/([^/]+)$/, view: experiment, nav: "experiments" },
  { pattern: /^\/experiments$/, view: experiments, nav: "experiments" },
  { pattern: /^\/agents$/, view: agents, nav: "agents" },
  { pattern: /^\/pools$/, view: pools, nav: "pools" },
  { pattern: /^\/events$/, view: events, nav: "events" },
];

// ?refresh=<seconds> (tests use 1); at least half a second.
const REFRESH_MS = Math.max(500, 1000 * (Number(new URLSearchParams(location.search).get("refresh")) || 5));

const main = document.getElementById("main");
const banner = document.getElementById("error-banner");
const bannerList = document.getElementById("error-list");
const updated = document.getElementById("updated");
const announcer = document.getElementById("announcer");
const autoRefresh = document.getElementById("auto-refresh");

let current = null; // {view, key}
let timer = null;
let running = null;
let again = false; // a refresh was asked for while one ran (a new view, a kill)
let cycleErrors = new Map();
const actionErrors = new Map();

function describe(error) {
  return error instanceof ApiError ? error.describe() : `${error.name || "Error"}: ${error.message}`;
}

function showErrors() {
  const lines = [...new Set([...actionErrors.values(), ...cycleErrors.values()])];
  const text = lines.join("\n");
  if (banner.dataset.text === text) return; // unchanged: do not make screen readers repeat it
  banner.dataset.text = text;
  bannerList.replaceChildren(...lines.map((line) => h("li", {}, line)));
  banner.hidden = lines.length === 0;
}

const ctx = {
  /** A failed read of this refresh: shown until a refresh passes without it. */
  report(error) {
    cycleErrors.set(describe(error), describe(error));
    showErrors();
  },
  /** A failed action (a kill): shown until dismissed. */
  reportAction(error) {
    actionErrors.set(describe(error), describe(error));
    showErrors();
  },
  /** The call's result, or null after reporting its error. */
  async load(promise) {
    try {
      return await promise;
    } catch (error) {
      ctx.report(error);
      return null;
    }
  },
  announce(message) {
    announcer.textContent = message;
  },
  refreshNow() {
    return refresh();
  },
};

function route() {
  const path = (location.hash || "#/experiments").slice(1).split("?")[0] || "/experiments";
  for (const r of ROUTES) {
    const match = path.match(r.pattern);
    if (match) return { ...r, params: match.slice(1).map(decodeURIComponent), key: path };
  }
  return null;
}

function show() {
  const found = route();
  if (!found) {
    location.hash = "#/experiments";
    return;
  }
  if (current && current.key === found.key) return;
  if (current) current.view.dispose();
  const view = found.view.create(ctx, ...found.params);
  current = { view, key: found.key };
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.nav === found.nav) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = visible(`${view.title} · Corral`);
  cycleErrors = new Map();
  showErrors();
  main.replaceChildren();
  view.mount(main);
  const heading = main.querySelector("h1");
  if (heading && document.activeElement !== document.body) heading.focus();
  refresh();
}

async function refresh() {
  if (running) {
    again = true;
    return running;
  }
  clearTimeout(timer);
  running = (async () => {
    const errors = new Map();
    cycleErrors = errors;
    const view = current && current.view;
    // Views that draw the capacity samples wait for this refresh's sample (ctx.sampled).
    ctx.sampled = sampleCapacity().catch((error) => ctx.report(error));
    await Promise.all([view ? view.refresh().catch((error) => ctx.report(error)) : null, ctx.sampled]);
    if (cycleErrors === errors) showErrors();
    updated.replaceChildren("Updated ", h("time", {}, new Date().toLocaleTimeString([], { hour12: false })));
  })();
  try {
    await running;
  } finally {
    running = null;
    if (again) {
      again = false;
      refresh();
    } else {
      schedule();
    }
  }
}

function schedule() {
  clearTimeout(timer);
  if (!document.hidden && autoRefresh.checked) timer = setTimeout(refresh, REFRESH_MS);
}

// The skip link must not change the hash: the hash is the route.
document.getElementById("skip-link").addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});
document.getElementById("dismiss-errors").addEventListener("click", () => {
  actionErrors.clear();
  cycleErrors = new Map();
  showErrors();
});
autoRefresh.addEventListener("change", () => (autoRefresh.checked ? refresh() : clearTimeout(timer)));
document.addEventListener("visibilitychange", () => (document.hidden ? clearTimeout(timer) : refresh()));
window.addEventListener("hashchange", show);
document.getElementById("refresh-interval").textContent = `${REFRESH_MS / 1000} s`;

takeTokenFromFragment();
show();
