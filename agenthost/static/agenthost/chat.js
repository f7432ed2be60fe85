// The chat page: starts conversations and sends messages through the REST API with the session cookie and CSRF
// token. The conversation is drawn by the server (the host's transcript partials, as on every page that shows one):
// its fragment is the only HTML inserted, escaped by the template engine; everything else goes in as text.
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

  // The conversation's turns as the server draws them.
  async function fetchTranscript(id) {
    let response;
    try {
      response = await fetch(root.dataset.transcript.replace("{id}", encodeURIComponent(String(id))), {
        credentials: "same-origin", headers: { Accept: "text/html" },
      });
    } catch (networkError) {
      throw new ApiError("Could not reach the server. Check that it is running and try again.", 0, null);
    }
    if (!response.ok) {
      throw new ApiError(describeFailure(response.status, null), response.status, null);
    }
    return response.text();
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

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = !message;
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
    const turns = await fetchTranscript(id);
    conversationId = conversation.id;
    sealed = Boolean(conversation.sealed);
    describeConversation(conversation);
    if (agentSelect) {
      agentSelect.value = String(conversation.agent.id);
    }
    transcript.innerHTML = turns;
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
    // Until the server has drawn the turn, the message waits as plain text under the transcript.
    const pending = el("li", "turn pending");
    pending.append(el("div", "pending-text", text));
    pending.append(el("div", "muted thinking", "The agent is working…"));
    transcript.append(pending);
    pending.scrollIntoView({ block: "end" });
    setBusy(true);
    try {
      const result = await api("POST", "conversations/" + conversationId + "/messages/", { text: text });
      transcript.innerHTML = await fetchTranscript(conversationId);
      renderState(result.state);
      messageInput.value = "";
    } catch (error) {
      const body = error.body || {};
      if (body.partial) {
        // What the turn did before it failed is stored: drawn like any turn, with why it stopped under it.
        transcript.innerHTML = await fetchTranscript(conversationId).catch(function () { return transcript.innerHTML; });
        const last = transcript.lastElementChild;
        if (last) {
          last.classList.remove("pending");
          last.querySelector(".thinking") && last.querySelector(".thinking").remove();
          last.append(el("div", "turn-failure", error.message));
        }
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
