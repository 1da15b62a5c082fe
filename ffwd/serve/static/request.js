// Running one request: the chat completion, streamed or whole, into a token view.
import { api, errorText } from "./server.js";

async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        if (line === "data: [DONE]") return;
        onEvent(JSON.parse(line.slice(6)));
      }
    }
  }
}

function onChunk(result, view, chunk) {
  if (chunk.error) throw new Error(chunk.error.message || "the stream failed");
  const choice = chunk.choices && chunk.choices[0];
  const tokens = chunk.ffwd && chunk.ffwd.tokens;
  if (tokens && tokens.length) {
    if (result.ttft === null) result.ttft = performance.now() - result.started;
    view.add(tokens, choice && choice.logprobs ? choice.logprobs.content : null);
  }
  if (choice) {
    const delta = choice.delta || {};
    if (delta.content) result.content += delta.content;
    for (const part of delta.tool_calls || []) {
      const call = result.calls[part.index] || (result.calls[part.index] = { id: "", name: "", arguments: "" });
      if (part.id) call.id = part.id;
      if (part.function && part.function.name) call.name = part.function.name;
      call.arguments += (part.function && part.function.arguments) || "";
      view.nameCall(part.index, call.name);
    }
    if (choice.finish_reason) result.finish = choice.finish_reason;
  }
  if (chunk.usage) Object.assign(result, { usage: chunk.usage, block: chunk.ffwd });
}

export async function run(body, view, signal) {
  const result = {
    started: performance.now(), ttft: null, wall: null, content: "", calls: [],
    finish: null, usage: null, block: null, stream: body.stream,
  };
  const res = await api("/v1/chat/completions", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body), signal,
  });
  if (!res.ok) throw new Error(await errorText(res));
  if (body.stream) {
    await readEvents(res, (chunk) => onChunk(result, view, chunk));
  } else {
    const whole = await res.json();
    const choice = whole.choices[0];
    Object.assign(result, {
      usage: whole.usage, block: whole.ffwd, finish: choice.finish_reason,
      content: choice.message.content || "",
      calls: (choice.message.tool_calls || []).map((c) => ({
        id: c.id, name: c.function.name, arguments: c.function.arguments })),
    });
    view.add(whole.ffwd.tokens || [], choice.logprobs ? choice.logprobs.content : null);
  }
  result.wall = performance.now() - result.started;
  view.finish(result.calls);
  return result;
}
