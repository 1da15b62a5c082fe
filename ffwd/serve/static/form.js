// The request form: examples, tools and tool choice, the body it sends, the history.
import { $, el } from "./dom.js";
import { state } from "./state.js";

const EXAMPLES = {
  weather: {
    message: "What is the weather in Paris?",
    tools: [
      fn("get_weather", "Get the current weather for a city.", {
        city: { type: "string", description: "City name" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      }, ["city"]),
      fn("get_time", "Get the local time in a city.", { city: { type: "string" } }, ["city"]),
    ],
  },
  files: {
    message: "Read the file src/app/settings.toml from line 10.",
    tools: [
      fn("read_file", "Read a text file.", {
        path: { type: "string" }, start_line: { type: "integer" },
      }, ["path"]),
      fn("write_file", "Write text to a file.", {
        path: { type: "string" }, content: { type: "string" },
      }, ["path", "content"]),
    ],
  },
};

export const SCHEMA = {
  type: "object",
  properties: { city: { type: "string", maxLength: 24 }, country: { type: "string", maxLength: 24 } },
  required: ["city", "country"],
};

function fn(name, description, properties, required) {
  return { type: "function", function: { name, description, parameters: { type: "object", properties, required } } };
}

function parseJSON(id, what) {
  const text = $(id).value.trim();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`${what} is not valid JSON: ${e.message}`);
  }
}

function toolNames() {
  try {
    const tools = parseJSON("tools", "Tools");
    return Array.isArray(tools) ? tools.map((t) => t && t.function && t.function.name).filter(Boolean) : [];
  } catch (e) {
    return [];
  }
}

export function refreshToolChoice(preferred) {
  const select = $("tool-choice");
  const keep = preferred || select.value;
  const names = toolNames();
  select.textContent = "";
  const values = names.length ? ["auto", "required", "none", ...names.map((n) => "fn:" + n)] : ["none"];
  for (const v of values) {
    select.append(el("option", { value: v, textContent: v.startsWith("fn:") ? `function ${v.slice(3)}` : v }));
  }
  select.value = values.includes(keep) ? keep : values[0];
  select.disabled = !names.length;
}

export function useExample(name) {
  const ex = EXAMPLES[name];
  $("tools").value = ex ? JSON.stringify(ex.tools, null, 2) : "";
  if (ex) $("message").value = ex.message;
  refreshToolChoice(ex ? "required" : "none");
}

export function buildBody() {
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...state.history);
  const next = newMessage();
  if (next) messages.push(next);
  if (!messages.some((m) => m.role !== "system")) throw new Error("Write a message first.");
  const body = {
    model: "default", messages, stream: $("stream").checked,
    temperature: Number($("temperature").value || 0),
    max_tokens: Math.max(1, Math.round(Number($("max-tokens").value || 64))),
    ffwd: { tokens: true },
  };
  if ($("fill").value) body.ffwd.fill = $("fill").value;
  if (body.stream) body.stream_options = { include_usage: true };
  if ($("logprobs").checked) Object.assign(body, { logprobs: true, top_logprobs: 3 });
  const tools = parseJSON("tools", "Tools");
  if (tools && tools.length) {
    body.tools = tools;
    const choice = $("tool-choice").value;
    body.tool_choice = choice.startsWith("fn:")
      ? { type: "function", function: { name: choice.slice(3) } } : choice;
  }
  const format = $("response-format").value;
  if (format === "json_object") body.response_format = { type: "json_object" };
  if (format === "json_schema") {
    body.response_format = {
      type: "json_schema",
      json_schema: { name: "reply", schema: parseJSON("schema", "The schema") || {}, strict: true },
    };
  }
  return { body, next };
}

function newMessage() {
  const content = $("message").value.trim();
  if (!content) return null;
  if ($("role").value !== "tool") return { role: "user", content };
  const last = [...state.history].reverse().find((m) => m.tool_calls && m.tool_calls.length);
  const id = last ? last.tool_calls[last.tool_calls.length - 1].id : undefined;
  return id ? { role: "tool", content, tool_call_id: id } : { role: "tool", content };
}

export function renderHistory() {
  const list = $("history");
  list.textContent = "";
  for (const m of state.history) {
    const text = m.content || (m.tool_calls || [])
      .map((c) => `${c.function.name}(${c.function.arguments})`).join(", ");
    list.append(el("li", {}, el("span", { className: "who", textContent: m.role }), text));
  }
}
