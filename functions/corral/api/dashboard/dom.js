// Small DOM and formatting helpers shared by the views: no framework, just elements.

/** An element: h("td", {className: "num", scope: "row"}, "text", child, ...). */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "className") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key in el) el[key] = value; // a DOM property: htmlFor, tabIndex, colSpan, value...
    else el.setAttribute(key, value === true ? "" : String(value)); // aria-*, data-like names
  }
  append(el, children);
  return el;
}

// What a page must not show as it is (the CLI's rule, corral.domain.text.visible): control
// characters, bidirectional overrides and isolates (they reorder what follows: "exe.gnp"
// shown as "png.exe"), line and paragraph separators, and lone surrogates.
const HIDDEN =
  /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069\u2028\u2029]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
const NAMED = { "\n": "\\n", "\t": "\\t", "\r": "\\r" };

/**
 * Text from stored records, safe to show: what HIDDEN matches is written as an escape
 * ("\x1b", "\n", "\u202e"), except the characters in keep (a log keeps its tabs).
 */
export function visible(text, keep = "") {
  return String(text).replace(HIDDEN, (c) => {
    if (keep.includes(c)) return c;
    if (NAMED[c]) return NAMED[c];
    const code = c.charCodeAt(0);
    return code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
  });
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    // Always a text node (never HTML), and every string shown through visible(): the page
    // is built only from elements, so this is where every piece of stored text passes.
    el.append(child instanceof Node ? child : document.createTextNode(visible(child)));
  }
}

/**
 * Replace an element's children, keeping keyboard focus on the element with the same
 * data-focus-key (a refresh must not throw the user's focus back to the top of the page).
 */
export function replaceKeepingFocus(parent, ...children) {
  const active = document.activeElement;
  const key = active && parent.contains(active) ? active.dataset.focusKey : undefined;
  parent.replaceChildren();
  append(parent, children);
  if (key) {
    const again = parent.querySelector(`[data-focus-key="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

/**
 * A table with a caption and column headers (scope="col"); the first cell of each row is
 * its header (scope="row"). columns: [{label, cell(row) -> node|text, className?}].
 */
export function table(caption, columns, rows, { empty = "Nothing to show.", rowKey } = {}) {
  const head = h("tr", {}, columns.map((c) => h("th", { scope: "col", className: c.className }, c.label)));
  const body = h("tbody");
  if (!rows.length) {
    body.append(h("tr", {}, h("td", { colSpan: columns.length, className: "empty" }, empty)));
  }
  for (const row of rows) {
    const tr = h("tr", { dataset: rowKey ? { key: rowKey(row) } : undefined });
    columns.forEach((column, n) => {
      const tag = n === 0 ? "th" : "td";
      tr.append(h(tag, { scope: n === 0 ? "row" : undefined, className: column.className }, column.cell(row)));
    });
    body.append(tr);
  }
  return h("div", { className: "table-wrap" },
    h("table", {}, h("caption", {}, caption), h("thead", {}, head), body));
}

export function badge(state) {
  const text = state ? String(state) : "—";
  return h("span", { className: `badge state-${text.toLowerCase()}` }, text);
}

export function dash() {
  return h("span", { className: "none", "aria-label": "none" }, "—");
}

export function money(value) {
  if (value === null || value === undefined) return "—";
  const v = Number(value);
  return v !== 0 && Math.abs(v) < 1 ? `$${v.toFixed(4)}` : `$${v.toFixed(2)}`;
}

export function number(value, digits = 4) {
  if (value === null || value === undefined || Number.isNaN(Number(value))) return "—";
  const v = Number(value);
  return Math.abs(v) >= 1000 || Number.isInteger(v) ? v.toLocaleString() : v.toPrecision(digits);
}

/** Seconds as "1h 02m", "3m 20s", "12s". */
export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  let s = Math.max(0, Math.round(Number(seconds)));
  const hours = Math.floor(s / 3600);
  s -= hours * 3600;
  const minutes = Math.floor(s / 60);
  s -= minutes * 60;
  if (hours) return `${hours}h ${String(minutes).padStart(2, "0")}m`;
  if (minutes) return `${minutes}m ${String(s).padStart(2, "0")}s`;
  return `${s}s`;
}

/** An epoch time as a <time> element: the clock time today, else the date too. */
export function time(epoch) {
  if (epoch === null || epoch === undefined) return dash();
  const at = new Date(Number(epoch) * 1000);
  const today = new Date().toDateString() === at.toDateString();
  const text = today
    ? at.toLocaleTimeString([], { hour12: false })
    : at.toLocaleString([], { hour12: false, dateStyle: "short", timeStyle: "medium" });
  return h("time", { dateTime: at.toISOString(), title: at.toISOString() }, text);
}

/** Hyperparameters on one line: "batch_size=32, learning_rate=0.05". */
export function hparams(values) {
  const entries = Object.entries(values || {});
  if (!entries.length) return dash();
  return entries.map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(", ");
}

export function link(href, text) {
  return h("a", { href }, text);
}
