// The live view, from the staff websocket's telemetry events and the generations in flight:
// - figures: requests/s and generated tokens/s over the last 10 s, errors in the last minute,
//   in flight (by model); all counted here, from the events the page receives anyway;
// - generations in flight (refreshed when an event says one started or ended, and every two
//   seconds for tokens so far), each with its Stop button;
// - one line per request, updated in place as its events arrive, filterable by organization,
//   model, key and status, and pausable: paused, the table holds still while events are still
//   counted; Resume shows what came meanwhile.
(function () {
  "use strict";
  const MAX_REQUESTS = 200;
  const RATE_WINDOW_MS = 10_000;
  const ERROR_WINDOW_MS = 60_000;

  const table = document.getElementById("in-flight");
  const body = table.querySelector("tbody");
  const empty = document.getElementById("in-flight-empty");
  const csrf = document.getElementById("csrf").value;
  const names = JSON.parse(document.getElementById("organization-names").textContent);
  const keyNames = JSON.parse(document.getElementById("key-names").textContent);
  const feed = document.querySelector("#events tbody");
  const feedEmpty = document.getElementById("events-empty");
  const filters = {
    organization: document.getElementById("event-org"),
    model: document.getElementById("event-model"),
    key: document.getElementById("event-key"),
    status: document.getElementById("event-status"),
  };
  const pauseButton = document.getElementById("feed-pause");
  const feedState = document.getElementById("feed-state");
  const state = document.getElementById("socket-state");
  const stopping = new Set();

  const runUrl = (id) => table.dataset.runUrl.replace("RUN_ID", encodeURIComponent(id));
  const stopUrl = (id) => table.dataset.stopUrl.replace("RUN_ID", encodeURIComponent(id));

  // The `money` template filter's rules (dashboard/templatetags/dashboard.py): a dollar sign,
  // two decimals from a dollar up, four from a cent, six below.
  function money(text) {
    if (text === null || text === undefined || text === "") return "—";
    const amount = Number(text);
    if (!Number.isFinite(amount)) return "—";
    const size = Math.abs(amount);
    const sign = amount < 0 ? "-" : "";
    if (size === 0) return "$0.00";
    if (size < 0.000001) return sign + "<$0.000001";
    const most = size >= 1 ? 2 : size >= 0.01 ? 4 : 6;
    let places = most;
    for (const p of [2, 4]) {
      if (p < most && Math.abs(size - Number(size.toFixed(p))) < 1e-12) { places = p; break; }
    }
    return sign + "$" + size.toLocaleString("en-US", { minimumFractionDigits: places, maximumFractionDigits: places });
  }

  // A duration in one unit whatever its size, so that "TTFT / total" reads alike on both
  // sides: milliseconds below a second ("2 ms / 3 ms", never "2 ms / 0.00 s"), seconds above.
  function duration(ms) {
    if (ms === undefined || ms === null) return "—";
    if (ms < 1) return "<1 ms";
    if (ms < 1000) return Math.round(ms) + " ms";
    return (ms / 1000).toFixed(2) + " s";
  }

  function cell(row, text, className) {
    const td = row.insertCell();
    td.textContent = text === null || text === undefined || text === "" ? "—" : String(text);
    if (className) td.className = className;
    // A long name is cut with an ellipsis (dashboard.css, td.clip); the whole of it on hover.
    if (className && className.split(" ").includes("clip")) td.title = td.textContent;
    return td;
  }

  function link(td, id) {
    td.textContent = "";
    const a = document.createElement("a");
    a.href = runUrl(id);
    a.textContent = id;
    td.appendChild(a);
  }

  function stopButton(id) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "danger";
    button.dataset.stop = id;
    button.textContent = stopping.has(id) ? "Stopping…" : "Stop";
    button.disabled = stopping.has(id);
    return button;
  }

  // -- generations in flight -------------------------------------------------------------

  function renderInFlight(generations) {
    body.textContent = "";
    const byModel = new Map();
    for (const g of generations) {
      byModel.set(g.model, (byModel.get(g.model) || 0) + 1);
      const row = body.insertRow();
      row.dataset.runId = g.id;
      link(cell(row, g.id, "mono"), g.id);
      cell(row, g.organization, "clip");
      cell(row, g.model, "clip");
      cell(row, g.session, "mono clip narrow");
      cell(row, g.acceptedAt.replace("T", " ").slice(0, 23));
      cell(row, (g.elapsedMs / 1000).toFixed(1) + " s", "num");
      cell(row, g.tokensSoFar, "num tokens");
      row.insertCell().appendChild(stopButton(g.id));
    }
    empty.hidden = generations.length > 0;
    document.getElementById("in-flight-count").textContent = generations.length ? "(" + generations.length + ")" : "";
    document.getElementById("in-flight-total").textContent = String(generations.length);
    const models = document.getElementById("in-flight-by-model");
    models.textContent = "";
    for (const [model, count] of [...byModel].sort((a, b) => b[1] - a[1])) {
      const tag = document.createElement("span");
      tag.className = "tag";
      tag.dataset.model = model;
      tag.textContent = model + " × " + count;
      tag.title = tag.textContent;
      models.appendChild(tag);
    }
  }

  let inFlightRequest = null;
  async function refresh() {
    if (inFlightRequest) return inFlightRequest;
    inFlightRequest = fetch(table.dataset.source, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then((response) => (response.ok ? response.json() : null))
      .then((data) => data && renderInFlight(data.generations))
      .catch(() => {})
      .finally(() => { inFlightRequest = null; });
    return inFlightRequest;
  }
  let refreshTimer = null;
  function refreshSoon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refresh, 150);
  }

  // One Stop handler for both tables: the button is one click away wherever the run shows.
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-stop]");
    if (!button) return;
    const id = button.dataset.stop;
    stopping.add(id);
    for (const twin of document.querySelectorAll("button[data-stop]")) {
      if (twin.dataset.stop === id) { twin.disabled = true; twin.textContent = "Stopping…"; }
    }
    try {
      const response = await fetch(stopUrl(id), {
        method: "POST",
        headers: { "X-CSRFToken": csrf, Accept: "application/json" },
        credentials: "same-origin",
      });
      const result = await response.json();
      button.textContent = result.stopped ? "Stopped" : "Already ended";
    } catch (error) {
      button.textContent = "Stop failed";
      button.disabled = false;
    }
    stopping.delete(id);
    refreshSoon();
  });

  // -- one record per request, from its events ---------------------------------------------

  const requests = new Map(); // runId -> record, oldest first (Map keeps insertion order)
  const accepted = []; // times (ms) of request.accepted events, for requests/s
  const generated = []; // [time ms, completion tokens] of finished and stopped runs
  const errors = []; // [time ms, code] of failed runs
  let seen = 0;

  function record(event) {
    let r = requests.get(event.runId);
    if (!r) {
      r = { runId: event.runId, time: event.time, organization: event.organization, status: "in_progress" };
      requests.set(event.runId, r);
      seen += 1;
      while (requests.size > MAX_REQUESTS) requests.delete(requests.keys().next().value);
    }
    return r;
  }

  function apply(event) {
    const r = record(event);
    const now = Date.now();
    switch (event.type) {
      case "request.accepted":
        r.time = event.time;
        r.model = event.model;
        r.deployment = event.deployment;
        r.key = event.keyId === null || event.keyId === undefined ? "" : String(event.keyId);
        r.endUser = event.endUser;
        accepted.push(now);
        offer(filters.key, r.key, keyLabel(r.key));
        offer(filters.model, r.model, r.model);
        break;
      case "request.routed":
        r.deployment = event.deployment || r.deployment;
        break;
      case "generation.first_token":
        r.ttftMs = event.ttftMs;
        break;
      case "generation.finished":
        r.status = "completed";
        r.finishReason = event.finishReason;
        r.latencyMs = event.latencyMs;
        r.usage = event.usage;
        generated.push([now, (event.usage && event.usage.completion_tokens) || 0]);
        break;
      case "generation.stopped":
        r.status = event.reason === "client_disconnected" ? "cancelled" : "stopped";
        r.latencyMs = event.latencyMs;
        r.usage = event.usage;
        generated.push([now, (event.usage && event.usage.completion_tokens) || 0]);
        break;
      case "generation.failed":
        r.status = "failed";
        r.detail = [event.httpStatus, event.code, event.message].filter((part) => part).join(" ");
        errors.push([now, event.code || String(event.httpStatus || "error")]);
        break;
      case "cost":
        r.cost = event.cost;
        break;
      default:
        break;
    }
  }

  // A key made, or a model asked for, after the page loaded becomes a choice when it shows up.
  function offer(select, value, label) {
    if (!value || [...select.options].some((option) => option.value === value)) return;
    select.add(new Option(label, value));
  }

  function matches(r) {
    if (filters.organization.value && String(r.organization) !== filters.organization.value) return false;
    if (filters.model.value && r.model !== filters.model.value) return false;
    if (filters.key.value && r.key !== filters.key.value) return false;
    if (filters.status.value && r.status !== filters.status.value) return false;
    return true;
  }

  function tokens(usage) {
    if (!usage) return "";
    return (usage.prompt_tokens ?? "?") + " → " + (usage.completion_tokens ?? "?");
  }

  function keyLabel(key) {
    if (!key) return "";
    return keyNames[key] || "key #" + key;
  }

  function renderFeed() {
    const shown = [...requests.values()].reverse().filter(matches);
    feed.textContent = "";
    for (const r of shown) {
      const row = feed.insertRow();
      row.className = "request " + r.status;
      row.dataset.runId = r.runId;
      row.dataset.status = r.status;
      row.dataset.model = r.model || "";
      row.dataset.key = r.key || "";
      const time = cell(row, (r.time || "").slice(11, 23), "mono");
      time.title = r.time || "";
      const status = cell(row, "");
      const badge = document.createElement("span");
      badge.className = "status " + r.status;
      badge.textContent = r.status.replace("_", " ");
      // A reply cut short (length, content_filter, tool_calls) says so beside its status.
      if (r.finishReason && r.finishReason !== "stop") badge.textContent += " · " + r.finishReason;
      status.textContent = "";
      status.appendChild(badge);
      const run = cell(row, r.runId, "mono clip narrow");
      link(run, r.runId);
      const who = cell(row, names[r.organization] || r.organization, "clip");
      const key = document.createElement("small");
      key.className = "key";
      key.textContent = keyLabel(r.key) || "—";
      who.append(document.createElement("br"), key);
      who.title = who.textContent.replace(/\n/g, " ");
      cell(row, r.model, "clip");
      cell(row, duration(r.ttftMs) + " / " + duration(r.latencyMs), "num");
      cell(row, tokens(r.usage), "num");
      cell(row, r.cost === undefined ? "" : money(r.cost), "num cost");
      const detail = cell(row, r.detail || "", "clip");
      if (r.status === "in_progress") {
        detail.textContent = "";
        detail.appendChild(stopButton(r.runId));
      }
    }
    feedEmpty.hidden = shown.length > 0;
    feedEmpty.textContent = requests.size ? "No request matches the filters." : "No request yet — they appear here as they arrive.";
  }

  let paused = false;
  let missed = 0; // requests that arrived while paused
  let renderQueued = false;
  function renderSoon() {
    if (paused || renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => { renderQueued = false; if (!paused) renderFeed(); });
  }

  pauseButton.addEventListener("click", () => {
    paused = !paused;
    pauseButton.textContent = paused ? "Resume" : "Pause";
    pauseButton.setAttribute("aria-pressed", String(paused));
    if (paused) {
      missed = 0;
      feedState.textContent = "paused";
    } else {
      feedState.textContent = "";
      renderFeed();
    }
  });
  for (const select of Object.values(filters)) {
    // A filter applies at once, paused or not: the operator asked to see something else.
    select.addEventListener("change", renderFeed);
  }

  // -- figures ---------------------------------------------------------------------------

  function prune(list, since, time) {
    while (list.length && time(list[0]) < since) list.shift();
  }

  function renderFigures() {
    const now = Date.now();
    prune(accepted, now - RATE_WINDOW_MS, (t) => t);
    prune(generated, now - RATE_WINDOW_MS, (g) => g[0]);
    prune(errors, now - ERROR_WINDOW_MS, (e) => e[0]);
    const seconds = RATE_WINDOW_MS / 1000;
    document.getElementById("rate-requests").textContent = (accepted.length / seconds).toFixed(1);
    const made = generated.reduce((sum, g) => sum + g[1], 0);
    document.getElementById("rate-tokens").textContent = (made / seconds).toFixed(made && made < seconds * 10 ? 1 : 0);
    document.getElementById("errors-minute").textContent = String(errors.length);
    const codes = new Map();
    for (const [, code] of errors) codes.set(code, (codes.get(code) || 0) + 1);
    document.getElementById("errors-by-code").textContent = [...codes].map(([code, n]) => code + " × " + n).join(", ");
    document.getElementById("seen-total").textContent = String(seen);
    if (paused) feedState.textContent = "paused — " + missed + " new request" + (missed === 1 ? "" : "s") + " since";
  }

  function onEvents(events) {
    for (const event of events) {
      if (!event || !event.runId) continue;
      const known = requests.has(event.runId);
      apply(event);
      if (paused && !known) missed += 1;
      if (event.type === "request.accepted" || event.type.startsWith("generation.")) refreshSoon();
    }
    renderSoon();
    renderFigures();
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/telemetry/");
    socket.onopen = () => { state.textContent = "connected"; state.dataset.state = "open"; refresh(); };
    socket.onmessage = (message) => onEvents([JSON.parse(message.data)]);
    socket.onclose = () => {
      state.textContent = "disconnected — reconnecting";
      state.dataset.state = "closed";
      setTimeout(connect, 2000);
    };
  }

  renderInFlight(JSON.parse(document.getElementById("in-flight-data").textContent));
  renderFeed();
  connect();
  setInterval(refresh, 2000);
  setInterval(renderFigures, 1000);
})();
