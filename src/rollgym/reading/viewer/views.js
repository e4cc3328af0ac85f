// rollgym trace viewer: the run views (conversation, span kinds, failures, filters in the URL,
// comparison of two runs). Loaded before app.js; uses its el/api/fmt/ms at call time only.
"use strict";

// ---------------------------------------------------------------- span kinds and names
const SPAN_KINDS = [
  ["driver", "driver"], ["agent", "agent"], ["model", "model / engine"], ["tool", "tool"],
  ["sandbox", "sandbox"], ["verify", "verify"], ["env", "environment"], ["http", "HTTP client"],
  ["other", "other"],
];
const SERVER_KINDS = { agent: "agent", environment: "env", model: "model" };
// The GenAI conventions' operations that are not a model call (gym.rollout, gym.env.tool and
// an agent framework's own spans carry them); any other operation is a model's.
const GENAI_KINDS = { invoke_agent: "agent", create_agent: "agent", execute_tool: "tool" };

// What a span is, from its name first, then its OTel kind (3 = client) and its server's kind.
function spanKind(s) {
  const n = s.name || "", a = s.attributes || {};
  if (n === "gym.rollout.dispatch" || n.startsWith("gym.job") || n.startsWith("gym.startup")
    || n.startsWith("gym.server")) return "driver";
  if (n === "gym.model.chat" || n === "llm_request") return "model";
  const op = a["gen_ai.operation.name"];
  if (op) return GENAI_KINDS[op] || "model";
  if (n === "gym.env.tool") return "tool";
  if (n.startsWith("gym.sandbox.")) return "sandbox";
  if (n === "gym.verify") return "verify";
  if (n.startsWith("gym.env.")) return "env";
  if (n === "gym.rollout") return "agent";
  if (s.kind === 3 && a["http.request.method"]) return "http";
  const server = SERVER_KINDS[(s.resource || {})["gym.server.kind"]];
  if (server) return server;
  if (s.service_name === "rollgym-driver") return "driver";
  return "other";
}

// A bar's label: a tool span by its tool, an HTTP span of a templated tool route by its path.
function spanLabel(s) {
  const a = s.attributes || {};
  if (s.name === "gym.env.tool" && a["gym.env.tool.name"]) return `tool ${a["gym.env.tool.name"]}`;
  if (/\{name\}/.test(s.name || "")) {
    const path = a["url.path"] || (a["url.full"] ? new URL(a["url.full"]).pathname : null);
    if (path) return `${s.name.split(" ")[0]} ${path}`;
  }
  return s.name;
}

function kindLegend(spans) {
  const present = new Set(spans.map(spanKind));
  return el("div", { class: "kind-legend" }, SPAN_KINDS.filter(([k]) => present.has(k)).map(([k, label]) =>
    el("span", { class: "kind-key", "data-kind": k }, el("i", { class: `swatch kind-${k}` }), label)),
  el("span", { class: "kind-key" }, el("i", { class: "swatch error-swatch" }), "error (outline)"));
}

// ---------------------------------------------------------------- filters kept in the URL
const URL_KEYS = ["outcome", "dispatch_name", "min_reward", "max_reward", "min_duration_ms",
  "max_duration_ms", "failed"];

function readUrlState() {
  const query = new URLSearchParams(location.hash.split("?")[1] || "");
  state.filters = {};
  for (const key of URL_KEYS) if (query.get(key)) state.filters[key] = query.get(key);
  state.sort = query.get("sort") || "start";
  state.desc = query.get("desc") === "1";
  state.offset = Math.max(0, Number(query.get("offset") || 0) || 0);
}

function urlHash() {
  const query = new URLSearchParams();
  for (const key of URL_KEYS) if (state.filters[key]) query.set(key, state.filters[key]);
  if (state.sort !== "start") query.set("sort", state.sort);
  if (state.desc) query.set("desc", "1");
  if (state.offset) query.set("offset", state.offset);
  const text = query.toString();
  return text ? `#/?${text}` : "#/";
}

// Keep the address bar in step with the table without re-rendering the page.
function writeUrlState() {
  const hash = urlHash();
  if (location.hash !== hash && !(hash === "#/" && location.hash === "")) history.replaceState(null, "", hash);
}

function failedSelect() {
  const select = el("select", { name: "failed", id: "failed-filter" },
    el("option", { value: "" }, "all attempts"),
    el("option", { value: "final" }, "rollouts finally failed"),
    el("option", { value: "attempt" }, "any failed attempt"));
  select.value = state.filters.failed ?? "";
  return select;
}

// The sentence above the table: what a row is and what the counts count.
function countsNote(page, summary) {
  const runs = summary ? ` The run requested ${summary.requested} rollouts: ${summary.completed} completed, `
    + `${summary.failed} finally failed.` : "";
  if (state.filters.failed === "final") {
    return `${page.total} rollouts finally failed: each row is the last attempt of a rollout that never `
      + `answered (what summary.json counts as failed).${runs}`;
  }
  if (state.filters.failed === "attempt") {
    return `${page.total} failed attempts: every attempt that failed, including those of rollouts a `
      + `later retry saved (ids X, X-a1, … are attempts of one rollout X).${runs}`;
  }
  return `One row per attempt (a retried rollout has a row per attempt: X, X-a1, …).${runs}`;
}

// ---------------------------------------------------------------- failures panel
function failureGroups(groups, level) {
  if (!groups.length) return el("div", { class: "muted" }, "none");
  return el("table", { class: `failure-groups ${level}` },
    el("tr", {}, el("th", {}, "failure kind"), el("th", {}, "count"), el("th", {}, "messages"), el("th", {}, "rollouts")),
    groups.map((g) => el("tr", { class: "failure-group", "data-kind": g.error_kind },
      el("td", { class: "mono" }, g.error_kind), el("td", {}, g.count),
      el("td", {}, g.messages.map((m) => el("div", { class: "failure-message" }, `${m.count}× `, m.message))),
      el("td", {}, g.rollout_ids.map((id) => id.startsWith("input line ") ? el("span", { class: "rollout-link mono input-line" }, id)
        : el("a", { href: `#/rollout/${encodeURIComponent(id)}`, class: "rollout-link mono" }, id)),
        g.count > g.rollout_ids.length ? el("span", { class: "muted" }, ` … ${g.count - g.rollout_ids.length} more`) : ""))));
}

async function failuresSection() {
  const section = el("section", { id: "failures" }, el("h2", {}, "Failures"));
  let data;
  try { data = await api("/api/failures"); } catch (error) { return section; }
  if (data.error || !data.attempts) return section;
  const a = data.attempts, r = data.rollouts;
  section.append(el("p", { id: "failure-counts" },
    `${r.failed} rollouts finally failed (their last attempt failed; from ${r.source}). `,
    `${a.failed} attempts failed, across ${a.rollouts} rollouts; ${a.recovered} of those rollouts `,
    "succeeded on a later attempt, so they count as failed attempts but not as failed rollouts."));
  section.append(el("h3", {}, "Rollouts finally failed, by kind ",
    el("a", { href: "#/?failed=final", id: "show-final" }, "(show in the table)")), failureGroups(r.groups, "final"));
  section.append(el("h3", {}, "Failed attempts, by kind ",
    el("a", { href: "#/?failed=attempt", id: "show-attempts" }, "(show in the table)")), failureGroups(a.groups, "attempt"));
  if (a.shown < a.failed) section.append(el("p", { class: "muted" }, `kinds read from the first ${a.shown} failed attempts`));
  return section;
}

// ---------------------------------------------------------------- runs given
async function runsSection() {
  let data;
  try { data = await api("/api/runs"); } catch (error) { return null; }
  if (!data.runs || !data.runs.length) return null;
  return el("section", { id: "runs" }, el("h2", {}, data.can_compare ? "Runs (A is served; B is compared with it)" : "Run"),
    el("table", {}, el("tr", {}, el("th", {}, ""), el("th", {}, "run id"), el("th", {}, "folder"),
      el("th", {}, "requested"), el("th", {}, "completed"), el("th", {}, "finally failed")),
    data.runs.map((r) => el("tr", { class: "run", "data-role": r.role }, el("td", {}, r.role.toUpperCase()),
      el("td", { class: "mono" }, r.run_id ?? "-"), el("td", { class: "mono" }, r.path),
      el("td", {}, r.requested ?? "-"), el("td", {}, r.completed ?? "-"), el("td", {}, r.failed ?? "-")))),
    data.can_compare ? el("p", {}, el("a", { href: "#/compare", id: "compare-link" }, "compare A and B ›")) : "");
}

// ---------------------------------------------------------------- conversation
function cutMark(entry) {
  return entry.truncated_bytes ? el("div", { class: "cut" }, `cut at the recorder's cap: the whole text was ${entry.truncated_bytes} bytes`) : "";
}

function toolCalls(calls) {
  return el("div", { class: "tool-calls" }, (calls || []).map((c) => {
    const f = c.function || {};
    return el("div", { class: "tool-call mono" }, "→ calls ", el("b", {}, f.name ?? "?"), `(${f.arguments ?? ""})`);
  }));
}

function text(content) {
  return content === null || content === undefined ? el("div", { class: "muted" }, "(no text)") : el("pre", { class: "text" }, content);
}

function entryView(e) {
  if (e.kind === "message") {
    return el("div", { class: `entry message role-${e.role}` }, el("div", { class: "who" }, e.role), text(e.content),
      e.tool_calls ? toolCalls(e.tool_calls) : "", cutMark(e));
  }
  if (e.kind === "answer") {
    const figures = [`call ${e.call}`, `tokens in ${e.input_tokens ?? "-"}`, `out ${e.output_tokens ?? "-"}`,
      `latency ${e.latency_ms === null || e.latency_ms === undefined ? "-" : ms(e.latency_ms)}`];
    if (e.finish_reason) figures.push(`finish ${e.finish_reason}`);
    return el("div", { class: "entry answer" }, el("div", { class: "who" }, "assistant ",
      el("span", { class: "call-figures muted" }, figures.join(" · "))), e.content || !e.tool_calls ? text(e.content) : "",
      e.tool_calls ? toolCalls(e.tool_calls) : "", e.tokens ? tokensView(e.tokens) : "");
  }
  if (e.kind === "tool") {
    const args = typeof e.arguments === "string" ? e.arguments : JSON.stringify(e.arguments);
    return el("div", { class: "entry tool" }, el("div", { class: "who" }, "tool ", el("b", {}, e.name), el("span", { class: "mono" }, `(${args ?? ""})`)),
      text(e.output), cutMark(e));
  }
  if (e.kind === "verify") {
    return el("div", { class: "entry verify" }, el("div", { class: "who" }, "verify"),
      el("div", {}, "answer ", el("span", { class: "mono" }, e.answer ?? "-"), " · reward ", el("b", {}, fmt(e.reward))),
      verdictDetails(e.details));
  }
  return el("div", { class: "entry" }, JSON.stringify(e));
}

// A model call's generated tokens (run.capture_tokens): id, text where it could be aligned
// with the answer, probability on hover and below; those under the page's threshold marked.
function tokensView(t) {
  const how = t.text_source ? `text from the ${t.text_source}` : "ids only: no text aligned with them";
  const cells = t.tokens.map((k) => {
    const p = k.p === null || k.p === undefined ? null : k.p;
    return el("span", { class: "token", "data-p": p ?? "", title: `id ${k.id ?? "?"} · logprob ${k.logprob ?? "-"} · p ${p === null ? "-" : p.toFixed(3)}` },
      el("span", { class: "token-text" }, k.text ?? `#${k.id ?? "?"}`),
      el("span", { class: "token-p" }, p === null ? "-" : p.toFixed(2)));
  });
  const missing = t.missing && t.missing.length ? ` · the engine did not answer: ${t.missing.join(", ")}` : "";
  return el("details", { class: "tokens", open: "" }, el("summary", { class: "muted" },
    `${t.tokens.length} tokens · `, el("span", { class: "low-count" }, ""), ` · ${how}${missing}`),
    el("div", { class: "token-cells" }, cells));
}

// Mark every token under `threshold` and say how many each call has (the page's one threshold).
function markLowTokens(section, threshold) {
  for (const box of section.querySelectorAll("details.tokens")) {
    let low = 0;
    for (const cell of box.querySelectorAll(".token")) {
      const p = cell.dataset.p === "" ? null : Number(cell.dataset.p);
      const isLow = p !== null && p < threshold;
      cell.classList.toggle("low", isLow);
      low += isLow;
    }
    box.querySelector(".low-count").textContent = `${low} with p < ${threshold} (marked red)`;
  }
}

function tokenThreshold(section, initial) {
  const input = el("input", { type: "number", id: "low-p", min: "0", max: "1", step: "0.05", value: String(initial) });
  input.addEventListener("change", () => {
    const value = Number(input.value);
    if (value >= 0 && value <= 1) markLowTokens(section, value);
  });
  return el("div", { class: "muted token-threshold" }, "tokens: mark those with probability p < ", input,
    " (default 0.1; hover a token for its id and logprob; click a list's title to fold it)");
}

// Why the reward is what it is: the verifier's own details ({"expected": "44", ...}).
function verdictDetails(details) {
  if (details === null || details === undefined) return el("div", { class: "muted verdict-details" }, "the verifier gave no details");
  const shown = typeof details === "object" && !Array.isArray(details) ? kvTable(details) : el("span", { class: "mono" }, JSON.stringify(details));
  return el("div", { class: "verdict-details", id: "verdict-details" }, el("div", { class: "muted" }, "why this reward (the verifier's details):"), shown);
}

async function conversationData(id) {
  try {
    const data = await api(`/api/conversation/${encodeURIComponent(id)}`);
    return data && data.rollout_id ? data : null;
  } catch (error) {
    return null;
  }
}

function conversationSection(c) {
  const section = el("section", { id: "conversation" });
  const source = c.source === "trajectory" ? "from the run's trajectory" : c.source === "trace" ? "from messages the spans recorded" : "no text kept";
  section.append(el("h2", {}, `Conversation of ${c.rollout_id} · ${c.dispatch_name ?? "-"} · `,
    el("span", { class: `outcome-${c.outcome === "ok" ? "ok" : "error"}` }, c.outcome ?? "-"), ` · reward ${fmt(c.reward)}`,
    el("span", { class: "muted" }, ` · ${source}`)));
  if (c.outcome === "failed") {
    section.append(el("div", { class: "error-box", id: "rollout-error" }, el("b", {}, c.error_kind ?? "error"), ": ", c.message ?? "(no message recorded)",
      ownFrames(c.frames, c.log)));
  }
  if (c.partial) {
    section.append(el("p", { class: "hint", id: "partial-note" },
      "Partial trajectory: the turns this rollout recorded before it failed (kept in failures.jsonl, never in trajectories.jsonl)."));
  }
  const earlier = (c.attempt_errors || []).filter((x) => x.rollout_id !== c.rollout_id);
  if (earlier.length) {
    section.append(el("div", { class: "muted" }, "earlier failed attempts: ",
      earlier.map((x) => el("div", { class: "mono" }, `attempt ${x.attempt}: ${x.error_kind}: ${x.message ?? ""}`))));
  }
  if (c.hint) section.append(el("p", { class: "hint", id: "conversation-hint" }, c.hint));
  const calls = c.conversation.filter((e) => e.kind === "answer");
  if (calls.length) {
    const sum = (k) => calls.reduce((t, e) => t + (e[k] || 0), 0);
    section.append(el("div", { class: "muted", id: "conversation-totals" },
      `${calls.length} model calls · tokens in ${sum("input_tokens")} · out ${sum("output_tokens")}`));
  }
  const hasTokens = c.conversation.some((e) => e.tokens);
  if (hasTokens) section.append(tokenThreshold(section, c.low_p ?? 0.1));
  section.append(el("div", { class: "entries" }, c.conversation.map(entryView)));
  if (hasTokens) markLowTokens(section, c.low_p ?? 0.1);
  return section;
}

// Where the agent author's own code raised (innermost last) and the log with the whole traceback.
function ownFrames(frames, log) {
  if (!(frames && frames.length) && !log) return "";
  return el("div", { id: "own-frames" },
    frames && frames.length ? el("div", {}, "raised in the agent's own code (innermost last):") : "",
    (frames || []).map((f) => el("div", { class: "mono frame" }, f)),
    log ? el("div", { id: "failure-log" }, "whole traceback: ", el("span", { class: "mono" }, log), " in the run directory") : "");
}

function attemptError(c, attempt) {
  const found = c && (c.attempt_errors || []).find((x) => x.rollout_id === attempt.rollout_id);
  return found ? ` ${found.error_kind}: ${found.message ?? "(no message)"}` : "";
}

// ---------------------------------------------------------------- comparison of two runs
const signed = (x) => (x === null || x === undefined ? "-" : `${x >= 0 ? "+" : ""}${Number(x).toFixed(3)}`);
function diffCell(value, ci, significant) {
  const textValue = signed(value) + (ci ? ` [${signed(ci[0])}, ${signed(ci[1])}]` : "");
  return el("td", { class: significant ? "flagged" : "" }, textValue, significant ? " *" : "");
}

async function comparePage() {
  const data = await api("/api/compare");
  app.replaceChildren(el("p", {}, el("a", { href: "#/" }, "‹ overview")));
  if (data.error) { app.append(el("p", { class: "outcome-error", id: "compare-error" }, data.error)); return; }
  const label = (r) => r.run_id ?? r.path;
  const confidence = Math.round(data.confidence * 100);
  app.append(el("section", { id: "compare-runs" }, el("h2", {}, "Comparison: B − A"),
    el("div", {}, "A = ", el("span", { class: "mono" }, label(data.run_a)), ` (${data.run_a.completed} completed, ${data.run_a.failed} failed)`),
    el("div", {}, "B = ", el("span", { class: "mono" }, label(data.run_b)), ` (${data.run_b.completed} completed, ${data.run_b.failed} failed)`),
    el("p", { class: "muted" }, `B − A with its ${confidence}% bootstrap interval (${data.resamples} resamples, seed ${data.seed}); `
      + "* = the interval excludes 0. The same numbers as rollgym compare A B --json.")));
  app.append(el("section", { id: "compare-config" }, el("h2", {}, "What differs between A and B (config.yaml)"),
    configDiffTable(data.config_differences || [], ["A", "B"], "compare-config-diff")));
  const ks = [...new Set(data.by_dispatch.flatMap((r) => Object.keys(r.pass_at_k)))].sort((x, y) => x - y);
  app.append(el("section", {}, el("h2", {}, "Per dispatch name"), el("table", { id: "compare-dispatch" },
    el("tr", {}, el("th", {}, "dispatch name"), el("th", {}, "n A/B"), el("th", {}, "failed A/B"), el("th", {}, "reward A"),
      el("th", {}, "reward B"), el("th", {}, "B − A [interval]"), ks.map((k) => el("th", {}, `pass@${k} A/B`))),
    data.by_dispatch.map((r) => el("tr", { class: "compare-row", "data-dispatch": r.dispatch_name }, el("td", {}, r.dispatch_name),
      el("td", {}, `${r.completed_a}/${r.completed_b}`), el("td", {}, `${r.failed_a}/${r.failed_b}`),
      el("td", {}, fmt(r.reward_a)), el("td", {}, fmt(r.reward_b)), diffCell(r.reward_diff, r.reward_diff_ci, r.significant),
      ks.map((k) => { const p = r.pass_at_k[k]; return el("td", {}, p ? `${fmt(p.a)}/${fmt(p.b)}` : "-"); }))))));
  const flagged = data.by_dispatch.filter((r) => r.significant).map((r) => r.dispatch_name);
  app.append(el("p", { id: "compare-verdict" }, "mean reward differs beyond the interval for: ", flagged.length ? flagged.join(", ") : "none"));
  const tasks = data.by_task.filter((r) => r.reward_diff !== null)
    .sort((x, y) => (y.significant - x.significant) || (Math.abs(y.reward_diff) - Math.abs(x.reward_diff))).slice(0, 20);
  app.append(el("section", {}, el("h2", {}, `Tasks that moved most (${tasks.length} of ${data.by_task.length})`),
    el("table", { id: "compare-tasks" }, el("tr", {}, el("th", {}, "dispatch name"), el("th", {}, "task"), el("th", {}, "n A/B"),
      el("th", {}, "reward A"), el("th", {}, "reward B"), el("th", {}, "B − A [interval]")),
    tasks.map((r) => el("tr", {}, el("td", {}, r.dispatch_name), el("td", {}, r.task_index), el("td", {}, `${r.n_a}/${r.n_b}`),
      el("td", {}, fmt(r.reward_a)), el("td", {}, fmt(r.reward_b)), diffCell(r.reward_diff, r.reward_diff_ci, r.significant))))));
}

// ---------------------------------------------------------------- groups (a task's repeats)
// GRPO-style training compares the rewards of one task's repeats: a group whose rewards are all
// equal (zero variance) gives every member an advantage of 0, so the trainer learns nothing.
async function groupsPage() {
  const query = new URLSearchParams(location.hash.split("?")[1] || "");
  const zeroOnly = query.get("zero_variance") === "1";
  const offset = Math.max(0, Number(query.get("offset") || 0) || 0), limit = 50;
  const data = await api(`/api/groups?offset=${offset}&limit=${limit}${zeroOnly ? "&zero_variance=1" : ""}`);
  app.replaceChildren(el("p", {}, el("a", { href: "#/" }, "‹ overview")));
  if (data.error) { app.append(el("p", { class: "outcome-error", id: "groups-error" }, data.error)); return; }
  const share = data.zero_variance_share === null ? "-" : `${(100 * data.zero_variance_share).toFixed(1)}%`;
  app.append(el("section", { id: "groups-summary" }, el("h2", {}, `Groups: the ${data.size} repeats of each task`),
    el("div", { class: "cards" }, card("groups with a reward", data.groups), card("zero-variance groups", data.zero_variance),
      card("zero-variance share", share), card("mean reward std", fmt(data.mean_std)),
      card(`groups short of ${data.size} rewards`, data.short_groups)),
    el("p", { class: "muted" }, "A zero-variance group's rewards are all equal (or it has a single reward): "
      + "its group-relative advantages are all 0, so GRPO-style training learns nothing from it. "
      + "The same numbers as summary.json's groups and rollgym traces profile.")));
  const toggle = el("a", { id: "zero-toggle", href: zeroOnly ? "#/groups" : "#/groups?zero_variance=1" },
    zeroOnly ? "show every group" : "show only zero-variance groups");
  const member = (m) => el("a", { class: `member ${m.outcome === "ok" ? (m.reward > 0 ? "pass" : "fail") : "failed"}`,
    href: `#/rollout/${encodeURIComponent(m.rollout_id)}`, "data-rollout": m.rollout_id,
    title: m.outcome === "ok" ? `${m.rollout_id}: reward ${m.reward}` : `${m.rollout_id}: failed (${m.error_kind})` },
    el("span", { class: "mono" }, m.rollout_id), " ", m.outcome === "ok" ? el("b", {}, fmt(m.reward, 2)) : el("i", {}, m.error_kind ?? "failed"));
  const table = el("table", { id: "group-table" }, el("tr", {}, el("th", {}, "task"), el("th", {}, "dispatch name"),
    el("th", {}, "n"), el("th", {}, "min"), el("th", {}, "max"), el("th", {}, "std"), el("th", {}, ""),
    el("th", {}, "repeats side by side (click one to open it)")),
    data.rows.map((g) => el("tr", { class: `group${g.zero_variance ? " zero-variance" : ""}`, "data-task": g.task_index },
      el("td", {}, g.task_index), el("td", {}, g.dispatch_name ?? "-"), el("td", {}, g.n), el("td", {}, fmt(g.min)),
      el("td", {}, fmt(g.max)), el("td", {}, fmt(g.std)),
      el("td", {}, g.zero_variance ? el("span", { class: "zero-badge" }, "zero variance") : ""),
      el("td", {}, el("div", { class: "members" }, g.members.map(member),
        g.members_total > g.members.length ? el("span", { class: "muted members-more" },
          `+${g.members_total - g.members.length} more: search for one by its rollout id`) : "")))));
  const page = (to) => `#/groups?${new URLSearchParams({ ...(zeroOnly ? { zero_variance: "1" } : {}), offset: to })}`;
  const last = Math.min(data.total, offset + data.rows.length);
  const pager = el("div", { class: "pager" },
    offset > 0 ? el("a", { href: page(Math.max(0, offset - limit)) }, "‹ prev") : "",
    `${data.total ? offset + 1 : 0}–${last} of ${data.total}`,
    last < data.total ? el("a", { href: page(offset + limit) }, "next ›") : "");
  app.append(el("section", {}, el("h2", {}, zeroOnly ? "Zero-variance groups" : "Every group"), toggle, table, pager));
}

// ---------------------------------------------------------------- text search
// What the search box does when the text is no rollout or trace id: the rollouts whose
// messages, tool calls or errors hold it (the server reads the run's files, bounded).
async function searchPage() {
  const q = new URLSearchParams(location.hash.split("?")[1] || "").get("q") || "";
  document.getElementById("search").value = q;
  const data = await api(`/api/find?${new URLSearchParams({ q, limit: 100 })}`);
  app.replaceChildren(el("p", {}, el("a", { href: "#/" }, "‹ overview")));
  const section = el("section", { id: "search-results" }, el("h2", {}, `Search: "${q}"`));
  if (data.error) { section.append(el("p", { class: "outcome-error" }, data.error)); app.append(section); return; }
  const bounds = [data.full ? `the first ${data.limit} places` : `${data.hits.length} places`,
    data.truncated ? "; stopped after reading the search's byte budget of the run's files" : ""].join("");
  section.append(el("p", { class: "muted", id: "search-note" },
    `Messages, tool calls and tool outputs (trajectories.jsonl), final errors (failures.jsonl), span errors and tool names (the trace store): ${bounds}.`));
  if (!data.hits.length) section.append(el("p", { class: "outcome-error", id: "search-none" }, `Nothing found for "${q}".`));
  else {
    const open = (id) => id.startsWith("input line ") ? el("span", { class: "mono" }, id)
      : el("a", { href: `#/rollout/${encodeURIComponent(id)}`, class: "mono" }, id);
    section.append(el("table", { id: "search-hits" }, el("tr", {}, el("th", {}, "rollout"), el("th", {}, "where"), el("th", {}, "text")),
      data.hits.map((h) => el("tr", { class: "hit", "data-rollout": h.rollout_id, "data-where": h.where },
        el("td", {}, open(h.rollout_id)), el("td", {}, h.where), el("td", {}, el("span", { class: "snippet" }, h.snippet))))));
  }
  app.append(section);
}
