// Drives a fanloop AG-UI endpoint with the official client, @ag-ui/client's HttpAgent.
//
// usage: node agui_client.cjs PLAN_JSON
// PLAN: {url, threadId, prompt, tools?, answers?: {toolName: true | "reason"},
//        clientResults?: {toolName: "result text"}, maxRuns?, reload?}
//
// HttpAgent checks the event order itself (RUN_STARTED first, messages and tool calls opened
// before use and closed before RUN_FINISHED, sub-agents, steps); every event is also parsed
// with @ag-ui/core's own zod schema. Interrupts are answered with `resume`, client tool calls
// with a `tool` message, until a run ends with nothing pending. With `reload`, a second
// HttpAgent with no messages then runs on the thread. Prints a JSON report.
"use strict";

const { HttpAgent } = require("@ag-ui/client");
const { EventSchema } = require("@ag-ui/core/schemas");

async function main() {
  const plan = JSON.parse(process.argv[2]);
  const agent = new HttpAgent({ url: plan.url, threadId: plan.threadId });
  agent.messages = [{ id: "user-1", role: "user", content: plan.prompt }];
  const runs = [];
  let resume;
  for (let i = 0; i < (plan.maxRuns || 6); i++) {
    const events = [];
    const invalid = [];
    let finished;
    await agent.runAgent(
      { tools: plan.tools || [], ...(resume ? { resume } : {}) },
      {
        onEvent({ event }) {
          const parsed = EventSchema.safeParse(event);
          if (!parsed.success) invalid.push({ event, error: parsed.error.message });
          events.push(event);
        },
        onRunFinishedEvent(params) {
          finished = {
            outcome: params.outcome,
            interrupts: params.interrupts,
            pendingToolCallIds: params.pendingToolCallIds,
          };
        },
      },
    );
    runs.push({ events, invalid, finished });
    resume = undefined;
    if (finished && finished.outcome === "interrupt") {
      resume = finished.interrupts.map((it) => {
        const name = it.metadata && it.metadata.fanloop && it.metadata.fanloop.toolName;
        const answer = (plan.answers || {})[name];
        return answer === true
          ? { interruptId: it.id, status: "resolved", payload: { approved: true } }
          : { interruptId: it.id, status: "resolved", payload: { approved: false, reason: String(answer) } };
      });
      continue;
    }
    const pending = (finished && finished.pendingToolCallIds) || [];
    if (pending.length === 0) break;
    for (const id of pending) {
      const call = agent.messages.flatMap((m) => m.toolCalls || []).find((c) => c.id === id);
      const name = call ? call.function.name : "";
      agent.messages.push({
        id: `tool-${id}`,
        role: "tool",
        toolCallId: id,
        content: String((plan.clientResults || {})[name] || "no result"),
      });
    }
  }
  let reload;
  if (plan.reload) {
    // a page opened again on the thread, holding nothing: it is sent the conversation
    const fresh = new HttpAgent({ url: plan.url, threadId: plan.threadId });
    const events = [];
    const invalid = [];
    await fresh.runAgent({}, {
      onEvent({ event }) {
        const parsed = EventSchema.safeParse(event);
        if (!parsed.success) invalid.push({ event, error: parsed.error.message });
        events.push(event);
      },
    });
    reload = { events, invalid, messages: fresh.messages };
  }
  process.stdout.write(JSON.stringify({ runs, messages: agent.messages, reload }));
}

main().catch((err) => {
  process.stderr.write(String((err && err.stack) || err) + "\n");
  process.exit(1);
});
