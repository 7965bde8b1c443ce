// The page's only way to the API: relative URLs (so a stage prefix or a proxy just works),
// the user's token as "Authorization: Bearer", and every failure as an ApiError naming the
// call, the status and the API's message.

const TOKEN_KEY = "corral.token";

export class ApiError extends Error {
  constructor(status, message, call) {
    super(message);
    this.status = status; // 0: no answer at all
    this.call = call;
  }

  describe() {
    const status = this.status ? `${this.status}` : "no answer";
    return `${this.call}: ${status}: ${this.message}`;
  }
}

/**
 * Take "token=..." out of the URL fragment (the link `corral dev up` and `corral dashboard`
 * print) into sessionStorage, so it is neither kept in the address bar nor sent anywhere
 * (fragments never leave the browser), and lasts as long as the tab.
 */
export function takeTokenFromFragment() {
  const hash = window.location.hash || "";
  const match = hash.match(/(^#|[&?])token=([^&]*)/);
  if (!match) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[2]));
  let rest = hash.replace(match[0], match[1] === "#" ? "#" : "").replace(/^#&/, "#");
  if (rest === "#" || rest === "") rest = "#/experiments";
  history.replaceState(null, "", window.location.pathname + window.location.search + rest);
}

export function hasToken() {
  return Boolean(sessionStorage.getItem(TOKEN_KEY));
}

/** api("GET", "experiments", {query: {limit: 5}}) -> the parsed JSON reply. */
export async function api(method, path, { query, body } = {}) {
  const url = new URL(path, document.baseURI);
  for (const [key, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  const call = `${method} /${path}`;
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let reply;
  try {
    reply = await fetch(url, init);
  } catch (error) {
    throw new ApiError(0, `cannot reach the API (${error.message})`, call);
  }
  const text = await reply.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!reply.ok) {
    throw new ApiError(reply.status, errorMessage(reply, data, text), call);
  }
  if (text && data === null) throw new ApiError(reply.status, "the reply is not JSON", call);
  return data;
}

function errorMessage(reply, data, text) {
  if (data && typeof data === "object") {
    const message = String(data.message || data.Message || reply.statusText || "error");
    const fields = (data.errors || []).map((e) => `${e.field || "(document)"}: ${e.reason}`);
    let out = fields.length ? `${message}; ${fields.join("; ")}` : message;
    if (reply.status === 401 || reply.status === 403) {
      out += hasToken()
        ? " (the token in this tab was refused: open the link the stack printed again)"
        : " (no token: open the link printed by `corral dev up` or `corral dashboard`)";
    }
    return out;
  }
  const line = (text || "").trim().split("\n")[0].slice(0, 200);
  return line || reply.statusText || "error";
}
