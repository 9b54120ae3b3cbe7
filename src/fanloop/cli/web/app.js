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
  waiting: new Map(), // interrupt id -> the person's answer (undefined until given)
  spend: { input: 0, output: 0, cost: 0 }, // the conversation's tokens and dollars
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
    this.lanes = null; // the grid of sub-agent columns, made when the first one starts
    this.lane = new Map(); // subagentRunId -> {node, body}
    this.texts = new Map(); // messageId -> element
    this.tools = new Map(); // toolCallId -> Tool
  }

  // A sub-agent's own column, opened by SUBAGENT_STARTED.
  openLane(sub, label) {
    if (!this.lanes) {
      this.lanes = el("div", { class: "lanes", role: "group", "aria-label": "sub-agents" });
      this.root.append(this.lanes);
    }
    const body = el("div", { class: "lane-body" });
    const node = el(
      "section",
      { class: "lane", "data-state": "running", "aria-label": `sub-agent ${label}` },
      el("h3", { text: label }),
      body,
    );
    this.lanes.append(node);
    const lane = { node, body };
    this.lane.set(sub, lane);
    return lane;
  }

  // Where the events of an agent go: the main column, or a sub-agent's column.
  body(sub) {
    if (!sub) return this.root;
    return (this.lane.get(sub) || this.openLane(sub, sub)).body;
  }

  laneDone(sub) {
    const lane = this.lane.get(sub);
    if (lane) lane.node.dataset.state = "done";
  }

  text(messageId, sub, cls = "text") {
    let node = messageId ? this.texts.get(messageId) : null;
    if (!node) {
      node = el("div", { class: cls });
      this.body(sub).append(node);
      if (messageId) this.texts.set(messageId, node);
    }
    return node;
  }

  append(messageId, sub, delta, cls = "text") {
    const node = this.text(messageId, sub, cls);
    if (node.textContent.length < MAX_TEXT) node.textContent += delta;
    scrollDown();
  }

  tool(callId, name, sub) {
    let tool = this.tools.get(callId);
    if (!tool) {
      tool = new Tool(callId, name || "tool");
      this.body(sub).append(tool.node);
      this.tools.set(callId, tool);
    } else if (name && tool.name === "tool") {
      tool.rename(name);
    }
    return tool;
  }

  error(message, sub) {
    this.body(sub).append(el("p", { class: "error", role: "alert", text: message }));
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
    box.scrollIntoView({ block: "nearest" });
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

// One AG-UI event onto the page. Events of a sub-agent carry its subagentRunId.
function handle(event, turn) {
  const sub = event.subagentRunId;
  switch (event.type) {
    case "RUN_STARTED":
      if (event.threadId) page.threadId = event.threadId;
      break;
    case "TEXT_MESSAGE_START":
      turn.text(event.messageId, sub);
      break;
    case "TEXT_MESSAGE_CONTENT":
    case "TEXT_MESSAGE_CHUNK":
      turn.append(event.messageId, sub, event.delta || "");
      break;
    case "REASONING_MESSAGE_CONTENT":
    case "THINKING_TEXT_MESSAGE_CONTENT":
      turn.append(`thinking:${event.messageId}`, sub, event.delta || "", "thinking");
      break;
    case "TOOL_CALL_START":
      turn.tool(event.toolCallId, event.toolCallName, sub);
      break;
    case "TOOL_CALL_ARGS":
      turn.tool(event.toolCallId, null, sub).addArgs(event.delta || "");
      break;
    case "TOOL_CALL_RESULT":
      turn.tool(event.toolCallId, null, sub).result(event.content ?? "", false);
      break;
    case "SUBAGENT_STARTED": {
      const path = event.metadata?.fanloop?.agentPath;
      const label = Array.isArray(path) && path.length ? path.join(" › ") : event.name || sub;
      if (!turn.lane.has(sub)) turn.openLane(sub, label);
      break;
    }
    case "SUBAGENT_FINISHED":
      turn.laneDone(sub);
      break;
    case "CUSTOM":
      if (event.name === "fanloop.approval_requested") {
        const v = event.value || {};
        waitFor(turn, v.toolCallId, v.toolName, v.arguments, v.preview, sub);
      } else if (event.name === "fanloop.approval_resolved") {
        const v = event.value || {};
        const tool = turn.tools.get(v.toolCallId);
        if (tool && v.approved === false) tool.setState("declined", "denied");
      }
      break;
    case "RUN_FINISHED":
      finished(event, turn);
      break;
    case "RUN_ERROR":
      turn.error(event.message || "the run failed", sub);
      break;
    default:
      break;
  }
}

function finished(event, turn) {
  const outcome = event.outcome || {};
  if (outcome.type === "interrupt") {
    for (const interrupt of outcome.interrupts || []) {
      const meta = interrupt.metadata?.fanloop || {};
      const callId = interrupt.toolCallId || interrupt.id;
      waitFor(turn, callId, meta.toolName, meta.arguments, interrupt.message, null, interrupt.id);
    }
    status("waiting for your approval");
  } else if (outcome.type === "cancelled") {
    status("cancelled");
  }
  const usage = (event.usage || [])[0];
  if (usage) {
    page.spend.input += usage.inputTokens || 0;
    page.spend.output += usage.outputTokens || 0;
    page.spend.cost += event.metadata?.fanloop?.costUsd || 0;
    showSpend();
  }
}

// A dangerous call waits for a person: show its question; the answer goes back as AG-UI
// `resume` once every waiting call has one and no stream is in flight.
function waitFor(turn, callId, name, args, preview, sub, interruptId) {
  if (!callId) return;
  const tool = turn.tool(callId, name, sub);
  if (args !== undefined && !tool.args) tool.setArgs(args);
  const key = interruptId || tool.waitKey || callId;
  if (tool.waitKey && tool.waitKey !== key) page.waiting.delete(tool.waitKey);
  tool.waitKey = key;
  if (!page.waiting.has(key)) page.waiting.set(key, undefined);
  tool.ask(preview || "", (id, approved, reason) => {
    const answer = approved ? { approved: true } : { approved: false, reason };
    page.waiting.set(tool.waitKey, answer);
    return flushAnswers();
  });
}

async function flushAnswers() {
  if (page.abort || page.waiting.size === 0) return;
  if ([...page.waiting.values()].some((answer) => answer === undefined)) return;
  const resume = [...page.waiting].map(([interruptId, payload]) => ({
    interruptId,
    status: "resolved",
    payload,
  }));
  page.waiting.clear();
  await stream({ ...runInput([]), resume }, page.turn);
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
    if (!response.ok) {
      let message = `${response.status}`;
      try {
        message = (await response.json()).error || message;
      } catch {
        // not JSON: keep the status
      }
      throw new Error(message);
    }
    for await (const event of sse(response)) handle(event, turn);
  } catch (err) {
    if (err.name === "AbortError") status("stopped");
    else turn.error(`the connection failed: ${err.message}`);
  } finally {
    if (page.abort === controller) page.abort = null;
    busy(false);
    refreshSession();
    loadSessions();
  }
  await flushAnswers(); // answers given while the stream was still open
}

function runInput(messages) {
  return { threadId: page.threadId, runId: newId(), state: {}, messages, tools: [], context: [] };
}

async function send(prompt) {
  const turn = new Turn(prompt);
  page.turn = turn;
  page.waiting.clear();
  status("");
  if (!page.threadId) {
    try {
      page.threadId = await newSession(prompt);
    } catch (err) {
      turn.error(`could not start a session: ${err.message}`);
      return;
    }
  }
  await stream(runInput([{ id: newId(), role: "user", content: prompt }]), turn);
}

// A session made by the page keeps an account of its spend and has the first prompt as title.
async function newSession(title) {
  const response = await fetch("/api/sessions", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ title }),
  });
  if (!response.ok) throw new Error(`${response.status}`);
  return (await response.json()).id;
}

function busy(on) {
  $("send").disabled = on;
  $("stop").hidden = !on;
  if (on) status("working…");
  else if ($("status").textContent === "working…") status("");
}

// -- usage, sessions -----------------------------------------------------------------------------

// The conversation's tokens and cost: the session's account when it keeps one, else what
// the runs seen on this page reported.
function showUsage(spend) {
  if (!spend || !spend.runs) return;
  const usage = spend.usage || {};
  page.spend = { input: usage.input_tokens || 0, output: usage.output_tokens || 0, cost: spend.cost_usd || 0 };
  showSpend();
}

function showSpend() {
  const { input, output, cost } = page.spend;
  $("usage-tokens").textContent =
    `${(input + output).toLocaleString()} tokens (in ${input.toLocaleString()}, out ${output.toLocaleString()})`;
  $("usage-cost").textContent = `$${cost.toFixed(4)}`;
}

function resetSpend() {
  page.spend = { input: 0, output: 0, cost: 0 };
  showSpend();
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
  const shown = JSON.stringify([page.threadId, sessions]);
  if (list.dataset.shown === shown) return; // unchanged: keep the buttons (and the focus)
  list.dataset.shown = shown;
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
  resetSpend();
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
        if (part.type === "text") turn.text(null, null).textContent = part.text;
        else if (part.type === "thinking") turn.text(null, null, "thinking").textContent = part.text;
        else if (part.type === "tool_call") {
          const tool = turn.tool(part.id, part.name, null);
          tool.setArgs(part.arguments);
          const result = results.get(part.id);
          if (result) tool.result(result.content, result.is_error);
        }
      }
    }
  }
  page.turn = turn || new Turn(null);
  page.waiting.clear();
  for (const p of session.pending) waitFor(page.turn, p.call_id, p.name, p.arguments, p.preview);
  showUsage(session.spend);
  loadSessions();
  $("log").scrollTop = $("log").scrollHeight;
}

function newChat() {
  if (page.abort) page.abort.abort();
  page.threadId = null;
  page.waiting.clear();
  page.turn = null;
  $("log").replaceChildren();
  resetSpend();
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
    if (!prompt) return;
    if (page.abort) {
      status("the agent is still answering: wait, or press Stop");
      return;
    }
    if ([...page.waiting.values()].some((answer) => answer === undefined)) {
      status("answer the call waiting for your approval first");
      return;
    }
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
