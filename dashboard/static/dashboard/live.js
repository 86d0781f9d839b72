// The live view: telemetry events from the staff websocket, and the generations in flight
// (refreshed when an event says one started or ended, and every two seconds for tokens so far).
(function () {
  "use strict";
  const MAX_EVENTS = 200;
  const table = document.getElementById("in-flight");
  const body = table.querySelector("tbody");
  const empty = document.getElementById("in-flight-empty");
  const csrf = document.getElementById("csrf").value;
  const names = JSON.parse(document.getElementById("organization-names").textContent);
  const events = document.querySelector("#events tbody");
  const orgFilter = document.getElementById("event-org");
  const pause = document.getElementById("event-pause");
  const state = document.getElementById("socket-state");
  const stopping = new Set();

  const runUrl = (id) => table.dataset.runUrl.replace("RUN_ID", encodeURIComponent(id));
  const stopUrl = (id) => table.dataset.stopUrl.replace("RUN_ID", encodeURIComponent(id));

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

  function renderInFlight(generations) {
    body.textContent = "";
    for (const g of generations) {
      const row = body.insertRow();
      row.dataset.runId = g.id;
      link(cell(row, g.id, "mono"), g.id);
      cell(row, g.organization, "clip");
      cell(row, g.model, "clip");
      cell(row, g.session, "mono clip narrow");
      cell(row, g.acceptedAt.replace("T", " ").slice(0, 23));
      cell(row, (g.elapsedMs / 1000).toFixed(1) + " s", "num");
      cell(row, g.tokensSoFar, "num tokens");
      const actions = row.insertCell();
      const button = document.createElement("button");
      button.type = "button";
      button.className = "danger";
      button.dataset.stop = g.id;
      button.textContent = stopping.has(g.id) ? "Stopping…" : "Stop";
      button.disabled = stopping.has(g.id);
      actions.appendChild(button);
    }
    empty.hidden = generations.length > 0;
    document.getElementById("in-flight-count").textContent = generations.length ? "(" + generations.length + ")" : "";
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

  body.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-stop]");
    if (!button) return;
    const id = button.dataset.stop;
    stopping.add(id);
    button.disabled = true;
    button.textContent = "Stopping…";
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

  function details(event) {
    const skip = new Set(["type", "runId", "time", "session", "organization"]);
    return Object.entries(event)
      .filter(([key, value]) => !skip.has(key) && value !== null && value !== "")
      .map(([key, value]) => key + "=" + (typeof value === "object" ? JSON.stringify(value) : value))
      .join("  ");
  }

  function addEvent(event) {
    if (pause.checked) return;
    if (orgFilter.value && String(event.organization) !== orgFilter.value) return;
    const row = events.insertRow(0);
    row.className = "event " + event.type.replace(/\./g, "-");
    cell(row, (event.time || "").replace("T", " ").slice(0, 23));
    cell(row, event.type, "mono");
    cell(row, names[event.organization] || event.organization, "clip narrow");
    link(cell(row, event.runId, "mono"), event.runId);
    cell(row, event.session, "mono clip narrow");
    cell(row, details(event), "details");
    while (events.rows.length > MAX_EVENTS) events.deleteRow(-1);
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/telemetry/");
    socket.onopen = () => { state.textContent = "connected"; state.dataset.state = "open"; refresh(); };
    socket.onmessage = (message) => {
      const event = JSON.parse(message.data);
      addEvent(event);
      if (event.type === "request.accepted" || event.type.startsWith("generation.")) refreshSoon();
    };
    socket.onclose = () => {
      state.textContent = "disconnected — reconnecting";
      state.dataset.state = "closed";
      setTimeout(connect, 2000);
    };
  }

  renderInFlight(JSON.parse(document.getElementById("in-flight-data").textContent));
  connect();
  setInterval(refresh, 2000);
})();
