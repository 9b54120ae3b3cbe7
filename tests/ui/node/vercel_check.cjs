// Reads one live fanloop UI message stream with the `ai` package's own code.
//
// usage: node vercel_check.cjs PLAN_JSON
// PLAN: {pkg: "ai" | "ai-v5", url, body, message?}
//
// POSTs `body` (a useChat request) to `url`. Every chunk is parsed with
// `parseJsonEventStream({stream, schema: uiMessageChunkSchema})`: one the SDK's schema refuses
// lands in `invalid`. The chunks are folded into a UIMessage by `readUIMessageStream`
// (continuing `message`, as useChat continues the last assistant message): a stream that breaks
// the SDK's rules (a delta before its start, an output for an unknown tool call) lands in
// `errors`, as do `error` chunks. Prints one JSON report:
// {status, header, done, chunks, invalid, errors, message}.
"use strict";

async function main() {
  const plan = JSON.parse(process.argv[2]);
  const ai = require(plan.pkg || "ai");
  const response = await fetch(plan.url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(plan.body),
  });
  const header = response.headers.get("x-vercel-ai-ui-message-stream");
  if (!response.ok) {
    const body = await response.text();
    console.log(JSON.stringify({ status: response.status, header, body }));
    return;
  }
  const [raw, parsed] = response.body.tee();
  const rawText = new Response(raw).text();
  const chunks = [];
  const invalid = [];
  const events = ai.parseJsonEventStream({ stream: parsed, schema: ai.uiMessageChunkSchema });
  const chunkStream = events.pipeThrough(
    new TransformStream({
      transform(result, controller) {
        if (result.success) {
          chunks.push(result.value);
          controller.enqueue(result.value);
        } else {
          invalid.push({ text: result.rawValue ?? null, error: String(result.error) });
        }
      },
    }),
  );
  const errors = [];
  let message = null;
  for await (const snapshot of ai.readUIMessageStream({
    message: plan.message || undefined,
    stream: chunkStream,
    onError: (error) => errors.push(String((error && error.message) || error)),
  })) {
    message = snapshot;
  }
  const text = await rawText;
  const done = text.trimEnd().endsWith("data: [DONE]");
  console.log(
    JSON.stringify({ status: response.status, header, done, chunks, invalid, errors, message }),
  );
}

main().catch((error) => {
  console.error(error && error.stack ? error.stack : String(error));
  process.exit(1);
});
