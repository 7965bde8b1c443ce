// The live log of one trial: follows GET /trials/{id}/logs with after_seq until the log is
// complete, appending lines (never redrawing the whole log), and keeps the view at the end
// while the reader is there.

import { api } from "./api.js";
import { h, visible } from "./dom.js";

const MAX_LINES = 5000;
const PAGES_PER_REFRESH = 5;

export class LogPanel {
  constructor(ctx) {
    this.ctx = ctx;
    this.trialId = null;
    this.title = h("h2", { id: "log-h" }, "Trial log");
    this.state = h("p", { className: "note", id: "log-state" }, "Pick a trial's \u201cShow log\u201d.");
    this.pre = h("pre", { id: "trial-log", className: "log", tabIndex: 0, "aria-labelledby": "log-h", hidden: true });
    this.element = h("section", { "aria-labelledby": "log-h" }, this.title, this.state, this.pre);
  }

  follow(trialId) {
    if (trialId === this.trialId) return;
    this.trialId = trialId;
    this.afterSeq = -1;
    this.count = 0;
    this.complete = false;
    this.title.textContent = `Log of ${trialId}`;
    this.state.textContent = "Loading\u2026";
    this.pre.replaceChildren();
    this.pre.hidden = false;
  }

  async refresh() {
    if (!this.trialId || this.complete) return;
    const trialId = this.trialId;
    for (let n = 0; n < PAGES_PER_REFRESH; n += 1) {
      const page = await this.ctx.load(
        api("GET", `trials/${encodeURIComponent(trialId)}/logs`, { query: { after_seq: this.afterSeq } }),
      );
      if (!page || trialId !== this.trialId) return;
      this.append(page.lines);
      this.afterSeq = page.next_after_seq;
      this.complete = page.logs_complete;
      const exit = page.exit_code === null || page.exit_code === undefined ? "" : `, exit code ${page.exit_code}`;
      this.state.textContent = page.logs_complete
        ? `${page.trial_state}${exit}: the whole log (${this.count} lines).`
        : `${page.trial_state}: following (${this.count} lines so far).`;
      if (!page.has_more) return;
    }
  }

  append(lines) {
    if (!lines.length) return;
    const atEnd = this.pre.scrollTop + this.pre.clientHeight >= this.pre.scrollHeight - 4;
    for (const line of lines) {
      // The trial's own output: tabs kept, other control characters (ESC colours) escaped.
      const text = document.createTextNode(`${visible(line.line, "\t")}\n`);
      this.pre.append(h("span", { className: line.stream === "stderr" ? "stderr" : undefined }, text));
    }
    this.count += lines.length;
    while (this.pre.childNodes.length > MAX_LINES) this.pre.firstChild.remove();
    if (atEnd) this.pre.scrollTop = this.pre.scrollHeight;
  }
}
