// fanloop web: the chat page. Vanilla JS, no build step, nothing from the internet.
// It speaks the AG-UI protocol to POST /ag-ui (server-sent events) and reads the small JSON
// endpoints of `fanloop web` (/api/info, /api/sessions, /api/sessions/{id}).
"use strict";

const $ = (id) => document.getElementById(id);
const MAX_TEXT = 200000; // characters kept per text block on the page

const page = {
  threadId: null, // the session the next prompt goes to
  abort: null, // the AbortController of the stream in flight
  turn: null, // the Turn being written
  model: "",
};

// -- small DOM helpers -----------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function newId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes); // works where crypto.randomUUID does not (plain http)
  return "web-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function status(text) {
  $("status").textContent = text || "";
}

function scrollDown() {
  const log = $("log");
  if (log.scrollHeight - log.scrollTop - log.clientHeight < 160) log.scrollTop = log.scrollHeight;
}

function pretty(text) {
  if (typeof text !== "string") text = JSON.stringify(text, null, 2);
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

// -- one exchange on the page: the prompt, then everything the agent (and its sub-agents) did --

class Turn {
  constructor(prompt) {
    $("empty-hint")?.remove();
    this.node = el("section", { class: "turn" });
    if (prompt !== null) this.node.append(el("div", { class: "user", text: prompt }));
    this.root = el("div", { class: "assistant" });
    this.node.append(this.root);
    $("log").append(this.node);
    this.lanes = null; // the grid of sub-agent columns, made when the first one speaks
    this.lane = new Map(); // path key -> {node, body}
    this.texts = new Map(); // messageId -> element
    this.tools = new Map(); // toolCallId -> Tool
    this.current = new Map(); // path key -> the text element being written
  }

  // Where events of an agent path go: the main column, or the sub-agent's own column.
  body(path) {
    if (!path || path.length === 0) return this.root;
    const key = path.join(" › ");
    let lane = this.lane.get(key);
    if (!lane) {
      if (!this.lanes) {
        this.lanes = el("div", { class: "lanes", role: "group", "aria-label": "sub-agents" });
        this.root.append(this.lanes);
      }
      const body = el("div", { class: "lane-body" });
      const node = el(
        "section",
        { class: "lane", "data-state": "running", "aria-label": `sub-agent ${key}` },
        el("h3", { text: key }),
        body,
      );
      this.lanes.append(node);
      lane = { node, body };
      this.lane.set(key, lane);
    }
    return lane.body;
  }

  laneDone(path) {
    const lane = path && this.lane.get(path.join(" › "));
    if (lane) lane.node.dataset.state = "done";
  }

  text(messageId, path, cls = "text") {
    let node = messageId ? this.texts.get(messageId) : null;
    if (!node) {
      node = el("div", { class: cls });
      this.body(path).append(node);
      if (messageId) this.texts.set(messageId, node);
    }
    return node;
  }

  append(messageId, path, delta, cls = "text") {
    const node = this.text(messageId, path, cls);
    if (node.textContent.length < MAX_TEXT) node.textContent += delta;
    scrollDown();
  }

  tool(callId, name, path) {
    let tool = this.tools.get(callId);
    if (!tool) {
      tool = new Tool(callId, name || "tool");
      this.body(path).append(tool.node);
      this.tools.set(callId, tool);
    } else if (name && tool.name === "tool") {
      tool.rename(name);
    }
    return tool;
  }

  error(message, path) {
    this.body(path).append(el("p", { class: "error", role: "alert", text: message }));
  }
}

// -- a tool call: collapsible, with its arguments, its result, and (if dangerous) the question --

class Tool {
  constructor(callId, name) {
    this.callId = callId;
    this.name = name;
    this.args = "";
    this.nameNode = el("span", { class: "tool-name", text: name });
    this.stateNode = el("span", { class: "tool-state", text: "running…" });
    this.argsNode = el("pre", { class: "tool-args" });
    this.resultHead = el("h4", { text: "Result", hidden: true });
    this.resultNode = el("pre", { class: "tool-result", hidden: true });
    this.node = el(
      "details",
      { class: "tool", "data-state": "running", "data-call-id": callId },
      el("summary", {}, this.nameNode, this.stateNode),
      el("div", { class: "tool-body" }, el("h4", { text: "Arguments" }), this.argsNode,
        this.resultHead, this.resultNode),
    );
    this.approval = null;
  }

  rename(name) {
    this.name = name;
    this.nameNode.textContent = name;
  }

  setState(state, label) {
    this.node.dataset.state = state;
    this.stateNode.textContent = label;
  }

  addArgs(delta) {
    this.args += delta;
    this.argsNode.textContent = pretty(this.args);
  }

  setArgs(args) {
    this.args = typeof args === "string" ? args : JSON.stringify(args);
    this.argsNode.textContent = pretty(this.args);
  }

  result(content, isError) {
    this.resultHead.hidden = false;
    this.resultNode.hidden = false;
    this.resultNode.textContent = typeof content === "string" ? content : pretty(content);
    if (this.node.dataset.state === "declined") return;
    this.setState(isError ? "error" : "done", isError ? "failed" : "done");
  }

  // A dangerous call waiting for a person: the preview, "Approve", "Deny" and a reason.
  ask(preview, answer) {
    if (this.approval) return;
    this.setState("waiting", "waiting for your approval");
    this.node.open = true;
    const reason = el("input", {
      type: "text",
      class: "reason",
      placeholder: "Reason (optional)",
      "aria-label": `Reason for denying ${this.name}`,
    });
    const approve = el("button", { type: "button", class: "approve", text: "Approve" });
    const deny = el("button", { type: "button", class: "deny", text: "Deny" });
    const said = el("span", { class: "answer", role: "status" });
    const box = el(
      "div",
      { class: "approval", role: "group", "aria-label": `approve ${this.name}?` },
      el("p", {}, el("strong", { text: this.name }), " wants to run. It changes things, so it waits for you."),
      preview ? el("pre", { class: "preview", text: preview }) : null,
      el("div", { class: "buttons" }, approve, deny, reason, said),
    );
    this.node.querySelector(".tool-body").prepend(box);
    this.approval = box;
    const decide = async (approved) => {
      approve.disabled = deny.disabled = reason.disabled = true;
      const why = reason.value.trim();
      said.textContent = approved ? "Approved" : why ? `Denied: ${why}` : "Denied";
      this.setState(approved ? "running" : "declined", approved ? "approved, running…" : "denied");
      try {
        await answer(this.callId, approved, why);
      } catch (err) {
        said.textContent = `could not send the answer: ${err.message}`;
        approve.disabled = deny.disabled = reason.disabled = false;
      }
    };
    approve.addEventListener("click", () => decide(true));
    deny.addEventListener("click", () => decide(false));
    approve.focus({ preventScroll: true });
    scrollDown();
  }
}

// -- the AG-UI stream ---------------------------------------------------------------------------

async function* sse(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, "");
      const data = block
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (data) yield JSON.parse(data);
    }
  }
}

// The agent path an event belongs to ([] for the agent the page talks to).
function pathOf(event) {
  const path = event.agentPath ?? event.agent_path ?? event.rawEvent?.agent_path;
  return Array.isArray(path) ? path.map(String) : [];
}

function handle(event, turn) {
  const path = pathOf(event);
  switch (event.type) {
    case "RUN_STARTED":
      if (event.threadId) page.threadId = event.threadId;
      break;
    case "TEXT_MESSAGE_START":
      turn.text(event.messageId, path);
      break;
    case "TEXT_MESSAGE_CONTENT":
    case "TEXT_MESSAGE_CHUNK":
      turn.append(event.messageId, path, event.delta || "");
      break;
    case "THINKING_TEXT_MESSAGE_CONTENT":
    case "REASONING_MESSAGE_CONTENT":
      turn.append("thinking:" + (event.messageId || path.join("/")), path, event.delta || "", "thinking");
      break;
    case "TOOL_CALL_START":
      turn.tool(event.toolCallId, event.toolCallName, path);
      break;
    case "TOOL_CALL_ARGS":
      turn.tool(event.toolCallId, null, path).addArgs(event.delta || "");
      break;
    case "TOOL_CALL_RESULT":
      turn.tool(event.toolCallId, null, path).result(event.content ?? "", false);
      break;
    case "STEP_FINISHED":
      if (path.length) turn.laneDone(path);
      break;
    case "CUSTOM":
      custom(event, turn, path);
      break;
    case "RUN_ERROR":
      turn.error(event.message || "the run failed", path);
      break;
    default:
      break;
  }
}

function custom(event, turn, path) {
  const value = event.value || {};
  const name = String(event.name || "");
  if (name.includes("approval") && (name.includes("request") || name.includes("pending"))) {
    const callId = value.toolCallId ?? value.call_id ?? value.id;
    const tool = turn.tool(callId, value.toolCallName ?? value.name, path);
    if (value.arguments && !tool.args) tool.setArgs(value.arguments);
    tool.ask(value.preview || "", answerApproval);
  } else if (name.includes("usage")) {
    showUsage(value);
  }
}

async function stream(body, turn) {
  const controller = new AbortController();
  page.abort = controller;
  busy(true);
  try {
    const response = await fetch("/ag-ui", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!response.ok) throw new Error(`${response.status} ${await response.text()}`);
    for await (const event of sse(response)) handle(event, turn);
  } catch (err) {
    if (err.name !== "AbortError") turn.error(`the connection failed: ${err.message}`);
    else status("stopped");
  } finally {
    if (page.abort === controller) page.abort = null;
    busy(false);
    refreshSession();
    loadSessions();
  }
}

function runInput(messages, forwardedProps) {
  return {
    threadId: page.threadId,
    runId: newId(),
    state: {},
    messages,
    tools: [],
    context: [],
    forwardedProps: forwardedProps || {},
  };
}

function send(prompt) {
  if (!page.threadId) page.threadId = newId();
  const turn = new Turn(prompt);
  page.turn = turn;
  status("");
  return stream(runInput([{ id: newId(), role: "user", content: prompt }]), turn);
}

async function answerApproval(callId, approved, reason) {
  const answer = approved ? true : reason || false;
  await stream(runInput([], { approvals: { [callId]: answer } }), page.turn);
}

function busy(on) {
  $("send").disabled = on;
  $("stop").hidden = !on;
  status(on ? "working…" : $("status").textContent === "working…" ? "" : $("status").textContent);
}

// -- usage, sessions -----------------------------------------------------------------------------

function showUsage(spend) {
  const usage = spend.usage || spend;
  const tokens = (usage.input_tokens || 0) + (usage.output_tokens || 0);
  $("usage-tokens").textContent =
    `${tokens.toLocaleString()} tokens (in ${(usage.input_tokens || 0).toLocaleString()}, ` +
    `out ${(usage.output_tokens || 0).toLocaleString()})`;
  const cost = spend.cost_usd;
  $("usage-cost").textContent = typeof cost === "number" ? `$${cost.toFixed(4)}` : "$–";
}

async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
}

async function loadSessions() {
  let sessions;
  try {
    sessions = await getJSON("/api/sessions");
  } catch (err) {
    status(`sessions: ${err.message}`);
    return;
  }
  const list = $("session-list");
  list.replaceChildren(
    ...sessions.map((s) =>
      el(
        "li",
        {},
        el(
          "button",
          {
            type: "button",
            "aria-current": s.id === page.threadId ? "true" : null,
            title: s.title || s.id,
            onclick: () => openSession(s.id),
          },
          s.title || s.id,
          el("small", { text: `${s.message_count} messages · ${new Date(s.updated_at * 1000).toLocaleString()}` }),
        ),
      ),
    ),
  );
}

async function refreshSession() {
  if (!page.threadId) return;
  try {
    showUsage((await getJSON(`/api/sessions/${encodeURIComponent(page.threadId)}`)).spend);
  } catch {
    // a session that was never written (the run failed before its first message)
  }
}

async function openSession(id) {
  if (page.abort) return;
  const session = await getJSON(`/api/sessions/${encodeURIComponent(id)}`);
  page.threadId = session.id;
  $("log").replaceChildren();
  let turn = null;
  const results = new Map();
  for (const message of session.messages)
    for (const part of message.parts) if (part.type === "tool_result") results.set(part.call_id, part);
  for (const message of session.messages) {
    for (const part of message.parts) {
      if (message.role === "user" && part.type === "text") {
        turn = new Turn(part.text);
      } else if (message.role === "assistant") {
        turn = turn || new Turn(null);
        if (part.type === "text") turn.text(null, []).textContent = part.text;
        else if (part.type === "thinking") turn.text(null, [], "thinking").textContent = part.text;
        else if (part.type === "tool_call") {
          const tool = turn.tool(part.id, part.name, []);
          tool.setArgs(part.arguments);
          const result = results.get(part.id);
          if (result) tool.result(result.content, result.is_error);
        }
      }
    }
  }
  page.turn = turn || new Turn(null);
  for (const pending of session.pending) {
    const tool = page.turn.tool(pending.call_id, pending.name, []);
    if (!tool.args) tool.setArgs(pending.arguments);
    tool.ask(pending.preview, answerApproval);
  }
  showUsage(session.spend);
  loadSessions();
  $("log").scrollTop = $("log").scrollHeight;
}

function newChat() {
  if (page.abort) page.abort.abort();
  page.threadId = null;
  page.turn = null;
  $("log").replaceChildren();
  showUsage({ usage: {}, cost_usd: 0 });
  loadSessions();
  $("prompt").focus();
}

// -- start -----------------------------------------------------------------------------------------

async function start() {
  const info = await getJSON("/api/info");
  page.model = info.model;
  $("model").textContent = info.model;
  $("demo").hidden = !info.demo;
  if (!info.endpoints.ag_ui) status("this server has no AG-UI endpoint (fanloop.ui is missing)");
  loadSessions();
}

document.addEventListener("DOMContentLoaded", () => {
  const form = $("composer");
  const box = $("prompt");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const prompt = box.value.trim();
    if (!prompt || page.abort) return;
    box.value = "";
    send(prompt);
  });
  box.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => page.abort?.abort());
  $("new-chat").addEventListener("click", newChat);
  start().catch((err) => status(`could not reach the server: ${err.message}`));
  box.focus();
});
