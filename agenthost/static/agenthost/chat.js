// The chat page: starts conversations and sends messages through the REST API with the session cookie and CSRF
// token. Everything from the server is inserted as text, never as HTML.
(function () {
  "use strict";

  const root = document.getElementById("chat");
  if (!root) {
    return;
  }
  const apiBase = root.dataset.api;
  const csrfToken = root.dataset.csrf;
  const startForm = document.getElementById("start-form");
  const agentSelect = document.getElementById("agent-select");
  const initialStateInput = document.getElementById("initial-state");
  const info = document.getElementById("conversation-info");
  const errorBox = document.getElementById("error");
  const transcript = document.getElementById("transcript");
  const messageForm = document.getElementById("message-form");
  const messageInput = document.getElementById("message-input");
  const sendButton = document.getElementById("send-button");
  const stateTable = document.getElementById("state-table");
  const stateEmpty = document.getElementById("state-empty");

  const FINISH_LABELS = {
    stop_completion: "a tool that ends the turn",
    missing_function: "a function with no implementation",
  };

  let conversationId = root.dataset.conversation ? Number(root.dataset.conversation) : null;
  // A sealed conversation is shown, never continued: the server refuses every send to it without its seal key.
  let sealed = root.dataset.sealed === "1";
  let shownState = {};
  let busy = false;

  class ApiError extends Error {
    constructor(message, status, body) {
      super(message);
      this.status = status;
      this.body = body;
    }
  }

  // --- API -----------------------------------------------------------------------------------------------------

  async function api(method, path, body) {
    const options = { method: method, credentials: "same-origin", headers: { Accept: "application/json" } };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.headers["X-CSRFToken"] = csrfToken;
      options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path.startsWith("/") ? path : apiBase + path, options);
    } catch (networkError) {
      throw new ApiError("Could not reach the server. Check that it is running and try again.", 0, null);
    }
    let data = null;
    if ((response.headers.get("Content-Type") || "").includes("application/json")) {
      try {
        data = await response.json();
      } catch (parseError) {
        data = null;
      }
    }
    if (!response.ok) {
      throw new ApiError(describeFailure(response.status, data), response.status, data);
    }
    return data;
  }

  async function fetchAllPages(path) {
    const items = [];
    let next = path;
    while (next) {
      const page = await api("GET", next);
      items.push(...page.results);
      // `next` is absolute; keeping only path and query keeps the request same-origin behind any proxy.
      const url = page.next ? new URL(page.next, window.location.href) : null;
      next = url ? url.pathname + url.search : null;
    }
    return items;
  }

  function describeFailure(status, data) {
    if (data && typeof data === "object") {
      if (typeof data.detail === "string") {
        return data.detail;
      }
      const problems = fieldProblems(data, "");
      if (problems.length) {
        return problems.join("\n");
      }
    }
    if (status === 401 || status === 403) {
      return "You are signed out or not allowed to do this. Reload the page to sign in again.";
    }
    if (status === 404) {
      return "Not found: it may have been deleted, or it is not yours to see.";
    }
    if (status >= 500) {
      return "The server failed (HTTP " + status + "). Try again; if it keeps failing, look at the server log.";
    }
    return "The request failed (HTTP " + status + ").";
  }

  // DRF field errors nest as objects and lists: {"history": {"0": {"role": ["…"]}}} → "history.0.role: …".
  function fieldProblems(value, path) {
    if (typeof value === "string") {
      return [path ? path + ": " + value : value];
    }
    if (Array.isArray(value)) {
      return value.flatMap(function (item) { return fieldProblems(item, path); });
    }
    if (value && typeof value === "object") {
      return Object.entries(value).flatMap(function (entry) {
        const key = entry[0] === "non_field_errors" ? path : path ? path + "." + entry[0] : entry[0];
        return fieldProblems(entry[1], key);
      });
    }
    return [];
  }

  // --- Rendering -----------------------------------------------------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) {
      node.className = className;
    }
    if (text !== undefined && text !== null) {
      node.textContent = text;
    }
    return node;
  }

  function pretty(value) {
    if (typeof value === "string") {
      try {
        return JSON.stringify(JSON.parse(value), null, 2);
      } catch (notJson) {
        return value;
      }
    }
    return JSON.stringify(value, null, 2);
  }

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = !message;
  }

  function renderToolCall(call) {
    const box = el("details", "tool-call" + (call.error ? " tool-error" : ""));
    const summary = el("summary");
    summary.append(el("span", "tool-name", call.name || "(no name)"));
    summary.append(el("span", "badge outcome-" + (call.outcome || "none"), call.outcome || "no result"));
    if (call.agent) {
      summary.append(el("span", "muted", "by " + call.agent));
    }
    if (call.trigger && call.trigger !== "model") {
      summary.append(el("span", "muted", "(" + call.trigger + ")"));
    }
    box.append(summary);
    box.append(el("div", "label", "Arguments"));
    box.append(el("pre", "code", pretty(call.arguments === null || call.arguments === undefined ? {} : call.arguments)));
    box.append(el("div", "label", "Result"));
    box.append(el("pre", "code", pretty(call.result || "")));
    return box;
  }

  function renderTurn(turn) {
    const item = el("li", "turn");
    if (turn.turn === -1) {
      item.append(el("div", "turn-caption muted", "When the conversation started"));
    }
    turn.userTexts.forEach(function (text) {
      const bubble = el("div", "msg msg-user");
      bubble.append(el("div", "msg-who", "You"));
      bubble.append(el("div", "msg-text", text));
      item.append(bubble);
    });
    if (turn.toolCalls.length) {
      const tools = el("div", "tool-calls");
      turn.toolCalls.forEach(function (call) { tools.append(renderToolCall(call)); });
      item.append(tools);
    }
    if (turn.output) {
      const reply = el("div", "msg msg-agent");
      reply.append(el("div", "msg-who", turn.agentChain.length ? turn.agentChain[turn.agentChain.length - 1] : "Agent"));
      reply.append(el("div", "msg-text", turn.output));
      item.append(reply);
    }
    if (turn.failure) {
      item.append(el("div", "turn-failure", turn.failure));
    }
    if (typeof turn.turn === "number" && turn.turn >= 0) {
      item.append(renderMeta(turn));
    }
    return item;
  }

  function renderMeta(turn) {
    const meta = el("div", "turn-meta");
    const parts = [];
    if (turn.agentChain.length) {
      parts.push(["Agents", turn.agentChain.join(" → ")]);
    }
    parts.push(["Tokens", turn.inputTokens + " in / " + turn.outputTokens + " out"]);
    parts.push(["Model latency", formatMs(turn.latencyMs)]);
    parts.push(["Steps", String(turn.steps)]);
    if (turn.finish && turn.finish !== "answer") {
      parts.push(["Ended by", FINISH_LABELS[turn.finish] || turn.finish]);
    }
    parts.forEach(function (part) {
      const span = el("span", "meta-item");
      span.append(el("span", "meta-label", part[0] + ": "));
      span.append(document.createTextNode(part[1]));
      meta.append(span);
    });
    return meta;
  }

  function formatMs(ms) {
    return ms >= 1000 ? (ms / 1000).toFixed(2) + " s" : Math.round(ms) + " ms";
  }

  function renderState(state) {
    const body = stateTable.tBodies[0];
    body.replaceChildren();
    const keys = Object.keys(state || {});
    keys.forEach(function (key) {
      const row = el("tr");
      const changed = !(key in shownState) || JSON.stringify(shownState[key]) !== JSON.stringify(state[key]);
      if (changed && Object.keys(shownState).length) {
        row.className = "changed";
      }
      row.append(el("th", "state-key", key));
      const value = state[key];
      row.append(el("td", "state-value", typeof value === "string" ? value : JSON.stringify(value)));
      body.append(row);
    });
    stateTable.hidden = keys.length === 0;
    stateEmpty.hidden = keys.length !== 0;
    shownState = Object.assign({}, state || {});
  }

  function describeConversation(conversation) {
    // "Conversation #N" opens the conversation's own page (its transcript, and for staff Record / Extract).
    const pattern = root.dataset.conversationPage;
    const title = "Conversation #" + conversation.id;
    const parts = ["agent " + conversation.agent.name];
    if (conversation.current_agent) {
      parts.push("next turn starts with " + conversation.current_agent.name);
    }
    if (conversation.tags.length) {
      parts.push("tags: " + conversation.tags.join(", "));
    }
    const link = pattern ? el("a", "conversation-link", title) : null;
    if (link) {
      link.href = pattern.replace("{id}", encodeURIComponent(String(conversation.id)));
    }
    info.replaceChildren(link || title, " · " + parts.join(" · "));
  }

  // --- Turns from the API --------------------------------------------------------------------------------------

  function turnFromResult(result, userText, failure) {
    return {
      turn: result.turn,
      userTexts: [userText],
      toolCalls: result.tool_calls,
      output: result.output,
      agentChain: result.agent_chain,
      inputTokens: result.usage.input_tokens,
      outputTokens: result.usage.output_tokens,
      latencyMs: result.model_latency_ms,
      steps: result.steps,
      finish: result.finish,
      failure: failure,
    };
  }

  // Stored messages → the same turn shape the send endpoint returns, so old and new turns look alike.
  function turnsFromMessages(messages) {
    const byTurn = new Map();
    messages.forEach(function (message) {
      if (!byTurn.has(message.turn)) {
        byTurn.set(message.turn, []);
      }
      byTurn.get(message.turn).push(message);
    });
    return Array.from(byTurn.entries()).map(function (entry) {
      const rows = entry[1];
      const results = new Map();
      rows.filter(function (m) { return m.role === "tool_result"; }).forEach(function (m) { results.set(m.tool_call_id, m); });
      const turn = {
        turn: entry[0], userTexts: [], toolCalls: [], output: "", agentChain: [], inputTokens: 0, outputTokens: 0,
        latencyMs: 0, steps: 0, finish: "", failure: "",
      };
      rows.forEach(function (m) {
        if (m.agent && turn.agentChain[turn.agentChain.length - 1] !== m.agent && m.role !== "user") {
          turn.agentChain.push(m.agent);
        }
        if (m.role === "user") {
          turn.userTexts.push(m.content);
        } else if (m.role === "assistant") {
          turn.inputTokens += m.input_tokens;
          turn.outputTokens += m.output_tokens;
          turn.latencyMs += m.latency_ms;
          turn.steps += m.model ? 1 : 0;
        } else if (m.role === "tool_call") {
          const result = results.get(m.tool_call_id);
          turn.toolCalls.push({
            name: m.function_name,
            arguments: m.arguments !== null ? m.arguments : m.raw_arguments,
            result: result ? result.content : "",
            outcome: result ? result.outcome : "",
            agent: m.agent,
            trigger: m.trigger,
          });
        }
      });
      const last = rows[rows.length - 1];
      if (last.role === "assistant") {
        turn.output = last.content;
      } else if (last.role === "tool_result") {
        turn.output = last.content;
        turn.finish = last.function_name;
      }
      return turn;
    });
  }

  // --- Actions -------------------------------------------------------------------------------------------------

  function setBusy(value) {
    busy = value;
    messageInput.disabled = value || conversationId === null || sealed;
    sendButton.disabled = value || conversationId === null || sealed;
    sendButton.textContent = value ? "Waiting…" : "Send";
    if (startForm) {
      startForm.querySelector("button[type=submit]").disabled = value;
    }
  }

  async function loadConversation(id) {
    const conversation = await api("GET", "conversations/" + id + "/");
    const messages = await fetchAllPages("conversations/" + id + "/messages/?page_size=500");
    conversationId = conversation.id;
    sealed = Boolean(conversation.sealed);
    describeConversation(conversation);
    if (agentSelect) {
      agentSelect.value = String(conversation.agent.id);
    }
    transcript.replaceChildren();
    turnsFromMessages(messages).forEach(function (turn) { transcript.append(renderTurn(turn)); });
    shownState = {};
    renderState(conversation.state);
    setBusy(false);
    messageInput.focus();
  }

  async function startConversation(event) {
    event.preventDefault();
    if (busy) {
      return;
    }
    let initialState = {};
    const rawState = initialStateInput.value.trim();
    if (rawState) {
      try {
        initialState = JSON.parse(rawState);
      } catch (syntaxError) {
        showError("Initial state is not valid JSON: " + syntaxError.message);
        return;
      }
    }
    showError("");
    setBusy(true);
    try {
      const conversation = await api("POST", "conversations/", {
        agent: agentSelect.value, initial_state: initialState, tags: ["chat"],
      });
      window.history.replaceState(null, "", "?conversation=" + conversation.id);
      await loadConversation(conversation.id);
    } catch (error) {
      showError(error.message);
      setBusy(false);
    }
  }

  async function sendMessage(event) {
    event.preventDefault();
    const text = messageInput.value.trim();
    if (busy || conversationId === null || !text) {
      return;
    }
    showError("");
    const pending = renderTurn({
      turn: null, userTexts: [text], toolCalls: [], output: "", agentChain: [], inputTokens: 0, outputTokens: 0,
      latencyMs: 0, steps: 0, finish: "", failure: "",
    });
    pending.classList.add("pending");
    pending.append(el("div", "muted thinking", "The agent is working…"));
    transcript.append(pending);
    pending.scrollIntoView({ block: "end" });
    setBusy(true);
    try {
      const result = await api("POST", "conversations/" + conversationId + "/messages/", { text: text });
      pending.replaceWith(renderTurn(turnFromResult(result, text, "")));
      renderState(result.state);
      messageInput.value = "";
    } catch (error) {
      const body = error.body || {};
      if (body.partial) {
        pending.replaceWith(renderTurn(turnFromResult(body.partial, text, error.message)));
        messageInput.value = "";
      } else {
        pending.remove();
      }
      if (body.state) {
        renderState(body.state);
      }
      showError(error.message);
    } finally {
      setBusy(false);
      transcript.lastElementChild && transcript.lastElementChild.scrollIntoView({ block: "end" });
      messageInput.focus();
    }
  }

  if (startForm) {
    startForm.addEventListener("submit", startConversation);
  }
  messageForm.addEventListener("submit", sendMessage);
  messageInput.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      messageForm.requestSubmit();
    }
  });

  if (conversationId !== null) {
    setBusy(true);
    loadConversation(conversationId).catch(function (error) {
      showError(error.message);
      setBusy(false);
    });
  }
})();
