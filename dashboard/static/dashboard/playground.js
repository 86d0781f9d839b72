// The playground: send the form, read the gateway's stream as it comes, link the stored run.
(function () {
  "use strict";
  const form = document.getElementById("playground-form");
  const result = document.getElementById("playground-result");
  const reply = document.getElementById("playground-reply");
  const runLabel = document.getElementById("playground-run");
  const outcome = document.getElementById("playground-outcome");
  const state = document.getElementById("playground-state");
  const button = document.getElementById("playground-send");

  function showRun(runId) {
    runLabel.textContent = "";
    if (!runId) return;
    const link = document.createElement("a");
    link.href = form.dataset.runsUrl + encodeURIComponent(runId) + "/";
    link.id = "playground-run-link";
    link.className = "mono";
    link.textContent = runId;
    runLabel.append("stored as run ", link);
  }

  function apply(payload, facts) {
    if (payload.error) {
      facts.error = payload.error.message || JSON.stringify(payload.error);
      return;
    }
    for (const choice of payload.choices || []) {
      const part = choice.delta || choice.message || {};
      reply.textContent += (part.reasoning_content || "") + (part.content || "");
      for (const call of part.tool_calls || []) {
        const fn = call.function || {};
        reply.textContent += (fn.name ? "\n[tool call] " + fn.name + " " : "") + (fn.arguments || "");
      }
      if (choice.finish_reason) facts.finishReason = choice.finish_reason;
    }
    if (payload.usage) facts.usage = payload.usage;
  }

  function describe(facts) {
    const parts = [];
    if (facts.finishReason) parts.push("finish reason: " + facts.finishReason);
    if (facts.usage) {
      parts.push(facts.usage.prompt_tokens + " prompt + " + facts.usage.completion_tokens + " completion tokens");
    }
    if (facts.error) parts.push("error: " + facts.error);
    outcome.textContent = parts.join(" · ");
  }

  async function readStream(response, facts) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffered.indexOf("\n\n")) >= 0) {
        const block = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        for (const line of block.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") { facts.done = true; continue; }
          try { apply(JSON.parse(data), facts); } catch (error) { /* not JSON: skipped */ }
        }
        describe(facts);
      }
    }
  }

  function showFormErrors(errors) {
    const messages = [];
    for (const [field, list] of Object.entries(errors)) messages.push(field + ": " + list.join(" "));
    outcome.textContent = messages.join(" · ");
  }

  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    button.disabled = true;
    state.textContent = "sending…";
    result.hidden = false;
    reply.textContent = "";
    outcome.textContent = "";
    runLabel.textContent = "";
    const facts = {};
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: new FormData(form),
        headers: { "X-CSRFToken": form.querySelector("[name=csrfmiddlewaretoken]").value },
        credentials: "same-origin",
      });
      showRun(response.headers.get("X-Mortar-Run-Id"));
      const type = response.headers.get("Content-Type") || "";
      if (type.startsWith("text/event-stream")) {
        state.textContent = "streaming…";
        await readStream(response, facts);
      } else {
        const body = await response.json();
        if (body.errors) showFormErrors(body.errors);
        else { apply(body, facts); describe(facts); }
      }
      state.textContent = response.ok && !facts.error ? "done" : "failed (" + response.status + ")";
    } catch (error) {
      state.textContent = "failed: " + error;
    } finally {
      button.disabled = false;
      state.dataset.state = state.textContent;
    }
  });
})();
