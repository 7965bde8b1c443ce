// Kill an experiment from the page: ask first, then POST /experiments/{id}/kill.

import { api } from "./api.js";
import { h, visible } from "./dom.js";

const ACTIVE = new Set(["ACTIVE"]);

export function killButton(ctx, experiment) {
  // Also in the confirm dialog: a name's newlines or bidi overrides must not reword it.
  const label = visible(experiment.name ? `${experiment.name} (${experiment.id})` : experiment.id);
  return h(
    "button",
    {
      type: "button",
      className: "danger",
      disabled: !ACTIVE.has(experiment.state),
      dataset: { focusKey: `kill-${experiment.id}`, kill: experiment.id },
      "aria-label": `Kill experiment ${label}`,
      onclick: (event) => kill(ctx, experiment, label, event.currentTarget),
    },
    "Kill",
  );
}

async function kill(ctx, experiment, label, button) {
  const ok = window.confirm(
    `Kill experiment ${label}?\n\nIts pending trials are cancelled and its running trials ` +
      "stopped. This cannot be undone.",
  );
  if (!ok) return;
  button.disabled = true;
  try {
    const view = await api("POST", `experiments/${encodeURIComponent(experiment.id)}/kill`);
    ctx.announce(`Experiment ${label} is ${view.state.toLowerCase()}.`);
  } catch (error) {
    button.disabled = false;
    ctx.reportAction(error);
  }
  await ctx.refreshNow();
}
