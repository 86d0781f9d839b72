// A run's page: replay the stored stream into the page, and copy the request as curl.
(function () {
  "use strict";
  const section = document.getElementById("replay");
  const text = document.getElementById("replay-text");
  const raw = document.getElementById("replay-events");
  const state = document.getElementById("replay-state");
  let current = null;
  let outcome = {};

  // A Messages run: a Message body, or one of Anthropic's stream events.
  function applyAnthropic(payload) {
    const blocks = payload.type === "message" ? payload.content || []
      : payload.type === "content_block_start" ? [payload.content_block || {}] : [];
    for (const block of blocks) {
      text.textContent += (block.thinking || "") + (block.text || "");
      if (block.type === "tool_use") {
        const input = payload.type === "message" ? JSON.stringify(block.input || {}) : "";
        text.textContent += "\n[tool call] " + block.name + " " + input;
      }
    }
    const delta = payload.delta || {};
    if (payload.type === "content_block_delta") {
      text.textContent += (delta.thinking || "") + (delta.text || "") + (delta.partial_json || "");
    }
    const stopReason = payload.type === "message" ? payload.stop_reason : delta.stop_reason;
    if (stopReason) outcome.finishReason = stopReason;
    if (payload.type === "message_stop") outcome.messageStop = true;
  }

  function apply(payload) {
    if (payload.error) {
      text.textContent += "\n[error] " + (payload.error.message || JSON.stringify(payload.error));
      return;
    }
    if (typeof payload.type === "string") { applyAnthropic(payload); return; }
    for (const choice of payload.choices || []) {
      const part = choice.delta || choice.message || {};
      text.textContent += (part.reasoning_content || part.reasoning || "") + (part.content || "");
      for (const call of part.tool_calls || []) {
        const fn = call.function || {};
        text.textContent += (fn.name ? "\n[tool call] " + fn.name + " " : "") + (fn.arguments || "");
      }
      if (choice.finish_reason) outcome.finishReason = choice.finish_reason;
    }
  }

  function handleEvent(block) {
    raw.textContent += block + "\n\n";
    outcome.events = (outcome.events || 0) + 1;
    for (const line of block.split("\n")) {
      if (!line.startsWith("data:")) continue;
      const data = line.slice(5).trim();
      if (data === "[DONE]") { outcome.done = true; continue; }
      try { apply(JSON.parse(data)); } catch (error) { /* a non-JSON event: shown raw only */ }
    }
  }

  async function replay(url) {
    if (current) current.abort();
    current = new AbortController();
    section.hidden = false;
    text.textContent = "";
    raw.textContent = "";
    outcome = {};
    state.textContent = "playing…";
    section.dataset.state = "playing";
    try {
      const response = await fetch(url, { signal: current.signal, credentials: "same-origin" });
      if ((response.headers.get("Content-Type") || "").startsWith("application/json")) {
        const body = await response.text();
        raw.textContent = body;
        outcome.json = true;
        apply(JSON.parse(body));
      } else {
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            handleEvent(buffer.slice(0, end));
            buffer = buffer.slice(end + 2);
          }
        }
        if (buffer.trim()) handleEvent(buffer);
      }
      const parts = ["done", (outcome.events || 1) + " events"];
      if (outcome.finishReason) parts.push("finish_reason " + outcome.finishReason);
      parts.push(
        outcome.json ? "JSON body"
          : outcome.done ? "[DONE]"
          : outcome.messageStop ? "message_stop" : "no [DONE]"
      );
      state.textContent = parts.join(" · ");
      section.dataset.state = "done";
    } catch (error) {
      if (error.name !== "AbortError") { state.textContent = "failed: " + error; section.dataset.state = "failed"; }
    }
  }

  document.getElementById("replay-fast").addEventListener("click", (e) => replay(e.target.dataset.url));
  document.getElementById("replay-paced").addEventListener("click", (e) => replay(e.target.dataset.url));

  const copy = document.getElementById("copy-curl");
  if (copy) {
    copy.addEventListener("click", async () => {
      const command = document.getElementById("curl").textContent;
      try {
        await navigator.clipboard.writeText(command);
      } catch (error) {
        const area = document.createElement("textarea");
        area.value = command;
        document.body.appendChild(area);
        area.select();
        document.execCommand("copy");
        area.remove();
      }
      copy.textContent = "Copied";
      setTimeout(() => { copy.textContent = "Copy as curl"; }, 2000);
    });
  }
})();
