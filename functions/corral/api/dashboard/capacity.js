// GPUs demanded vs GPUs paid over time. The API answers "now" (GET /capacity); the page
// samples it on every refresh, whichever view is shown, and keeps the samples for the tab's
// life (sessionStorage), so the chart has a history when the pools view is opened.

import { api } from "./api.js";

const KEY = "corral.capacity";
const MAX_SAMPLES = 2000; // 2.8 hours at one sample every 5 s

function load() {
  try {
    const stored = JSON.parse(sessionStorage.getItem(KEY) || "[]");
    return Array.isArray(stored) ? stored : [];
  } catch {
    return [];
  }
}

let samples = load();

export function capacitySamples() {
  return samples;
}

/** Take one sample; returns it. Samples are ordered by the API's clock, never repeated. */
export async function sampleCapacity() {
  const now = await api("GET", "capacity");
  const last = samples[samples.length - 1];
  if (!last || now.at > last.at) {
    samples.push({ at: now.at, demanded: now.gpus_demanded, busy: now.gpus_busy, paid: now.gpus_paid });
    if (samples.length > MAX_SAMPLES) samples = samples.slice(-MAX_SAMPLES);
    try {
      sessionStorage.setItem(KEY, JSON.stringify(samples));
    } catch {
      // Storage full or disabled: the chart still works for this page's life.
    }
  }
  return now;
}

/** The chart's series: [{label, points, color}] from the samples. */
export function capacitySeries() {
  const pick = (field) => samples.map((s) => [s.at, s[field]]);
  return [
    { label: "GPUs demanded", points: pick("demanded"), color: "#d1495b" },
    { label: "GPUs busy", points: pick("busy"), color: "#1f6fb2", dash: [6, 4] },
    { label: "GPUs paid for", points: pick("paid"), color: "#2a9d55" },
  ];
}
