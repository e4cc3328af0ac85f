// rollgym trace viewer: a hash-routed page over the store's /api routes. No build, no CDN.
"use strict";

const app = document.getElementById("app");
const state = { sort: "start", desc: false, offset: 0, limit: 25, filters: {} };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) node.setAttribute(k, v);
  }
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

async function api(path) {
  const answer = await fetch(path);
  if (!answer.ok && answer.status !== 404) {
    // the server's reason when it gave one ({"error": ...}), else the status
    const said = await answer.json().then((body) => body && body.error, () => null);
    throw new Error(`${path}: ${said || answer.status}`);
  }
  return answer.json();
}

const fmt = (x, d = 3) => (x === null || x === undefined ? "-" : Number(x).toFixed(d));
const ms = (x) => `${Number(x).toFixed(1)} ms`;

// ---------------------------------------------------------------- overview
async function overview() {
  const data = await api("/api/overview");
  app.replaceChildren();
  const cards = el("div", { class: "cards" },
    card("spans", data.spans), card("dispatches", data.dispatches),
    ...Object.entries(data.outcomes).map(([k, v]) => card(`outcome ${k}`, v)));
  if (data.summary) {
    for (const key of ["requested", "completed", "failed"]) cards.append(card(key, data.summary[key]));
    const g = data.summary.groups;  // repeats > 1: how many groups teach a GRPO trainer nothing
    if (g && g.groups) {
      cards.append(el("a", { href: "#/groups", id: "groups-card", class: "card-link" },
        card("zero-variance groups ›", `${g.zero_variance} / ${g.groups}`)));
    }
  }
  app.append(el("section", {}, el("h2", {}, "Run ", data.run_ids.join(", ")), cards));
  const runs = await runsSection();
  if (runs) app.append(runs);
  app.append(await failuresSection());
  app.append(el("section", {}, el("h2", {}, "Reward per dispatch name"),
    el("table", {}, el("tr", {}, el("th", {}, "dispatch name"), el("th", {}, "dispatches"),
      el("th", {}, "mean reward"), el("th", {}, "mean duration")),
      data.per_dispatch_name.map((r) => el("tr", {}, el("td", {}, r.dispatch_name ?? "-"),
        el("td", {}, r.count), el("td", {}, fmt(r.mean_reward)), el("td", {}, ms(r.mean_duration_ms)))))));
  const bins = data.duration_histogram.map((b) => ({ from: b.from_ms, to: b.to_ms, count: b.count }));
  app.append(el("section", {}, el("h2", {}, "Duration histogram"),
    barHistogram("overview-duration", bins, "dispatch duration (ms)", "dispatches", (v) => fmt(v, 0)),
    el("div", {}, el("a", { href: "#/profile" }, "where the time went (profile) ›"))));
  const roots = el("section", { id: "roots" }, el("h2", {}, "Job and startup traces"));
  for (const [label, list] of [["job", data.job_traces], ["startup", data.startup_traces]]) {
    for (const t of list) {
      roots.append(el("div", {}, el("a", { href: `#/trace/${t.trace_id}`, class: "mono" }, `${label} trace ${t.trace_id}`),
        ` ${t.span_count} spans, ${ms(t.duration_ms)}`));
    }
    if (!list.length) roots.append(el("div", { class: "muted" }, `no ${label} trace in this store`));
  }
  app.append(roots);
  state.summary = data.summary;
  const tableSection = el("section", {}, el("h2", {}, "Rollouts"), filters(data), el("div", { id: "rollouts" }));
  app.append(tableSection);
  await rollouts();
}

function card(label, value) {
  return el("div", { class: "card" }, el("b", {}, value ?? "-"), el("span", { class: "muted" }, label));
}

function filters(data) {
  const input = (name, placeholder) => el("input", { name, placeholder, value: state.filters[name] ?? "" });
  const outcome = el("select", { name: "outcome" }, el("option", { value: "" }, "any outcome"),
    ...Object.keys(data.outcomes).map((o) => el("option", { value: o }, o)));
  outcome.value = state.filters.outcome ?? "";
  const dispatch = el("select", { name: "dispatch_name" }, el("option", { value: "" }, "any dispatch name"),
    ...data.per_dispatch_name.map((r) => el("option", { value: r.dispatch_name ?? "" }, r.dispatch_name ?? "-")));
  dispatch.value = state.filters.dispatch_name ?? "";
  const form = el("form", { class: "filters", id: "filters" }, outcome, dispatch,
    input("min_reward", "min reward"), input("max_reward", "max reward"),
    input("min_duration_ms", "min ms"), input("max_duration_ms", "max ms"), failedSelect(),
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    state.filters = Object.fromEntries([...new FormData(form).entries()].filter(([, v]) => v !== ""));
    state.offset = 0;
    rollouts();
  });
  return form;
}

async function rollouts() {
  const params = new URLSearchParams({ limit: state.limit, offset: state.offset, sort: state.sort,
    desc: state.desc ? "1" : "0", ...state.filters });
  writeUrlState();
  if (state.filters.failed) params.set("level", state.filters.failed);
  const page = await api(state.filters.failed ? `/api/failed?${params}` : `/api/rollouts?${params}`);
  const head = (label, key) => el("th", { class: key ? "sortable" : "", onclick: key ? () => {
    state.desc = state.sort === key ? !state.desc : false; state.sort = key; state.offset = 0; rollouts();
  } : undefined }, label, state.sort === key ? (state.desc ? " ▼" : " ▲") : "");
  const table = el("table", { id: "rollout-table" }, el("tr", {}, head("rollout", "rollout_id"),
    head("attempt"), head("dispatch name", "dispatch_name"), head("outcome", "outcome"),
    head("reward", "reward"), head("duration", "duration"), head("spans"), head("trace")),
    page.rows.map((r) => el("tr", { class: "row", "data-rollout": r.rollout_id,
      onclick: () => { location.hash = `#/rollout/${encodeURIComponent(r.rollout_id)}`; } },
      el("td", {}, r.rollout_id), el("td", {}, r.attempt ?? "-"), el("td", {}, r.dispatch_name ?? "-"),
      el("td", { class: `outcome-${r.outcome}` }, r.outcome ?? "-"), el("td", {}, fmt(r.reward)),
      el("td", {}, ms(r.duration_ms)), el("td", {}, r.span_count), el("td", { class: "mono" }, r.trace_id))));
  const last = Math.min(page.total, state.offset + page.rows.length);
  const pager = el("div", { class: "pager" },
    el("button", { disabled: state.offset === 0 ? "" : undefined,
      onclick: () => { state.offset = Math.max(0, state.offset - state.limit); rollouts(); } }, "‹ prev"),
    `${page.total ? state.offset + 1 : 0}–${last} of ${page.total}`,
    el("button", { disabled: last >= page.total ? "" : undefined,
      onclick: () => { state.offset += state.limit; rollouts(); } }, "next ›"));
  document.getElementById("rollouts").replaceChildren(el("p", { id: "counts-note", class: "muted" }, countsNote(page, state.summary)), table, pager);
}

// ---------------------------------------------------------------- waterfall
function waterfall(spans, details) {
  const byId = new Map(spans.map((s) => [s.span_id, s]));
  const children = new Map();
  for (const s of spans) {
    const parent = byId.has(s.parent_span_id) ? s.parent_span_id : null;
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(s);
  }
  const t0 = Math.min(...spans.map((s) => s.start_ns));
  const total = Math.max(1, Math.max(...spans.map((s) => s.end_ns)) - t0);
  const box = el("div", { class: "waterfall" });
  const walk = (parent, depth) => {
    for (const s of (children.get(parent) || []).sort((a, b) => a.start_ns - b.start_ns)) {
      const left = ((s.start_ns - t0) / total) * 100, width = ((s.end_ns - s.start_ns) / total) * 100;
      const kind = spanKind(s);
      const row = el("div", { class: "span-row", "data-span": s.span_id, "data-name": s.name, "data-kind": kind },
        el("div", { class: "label", style: `padding-left:${depth * 14}px` }, spanLabel(s),
          el("span", { class: "muted" }, s.service_name ? `  ${s.service_name}` : "")),
        el("div", { class: "dur" }, ms(s.duration_ms)),
        el("div", { class: "track" },
          el("div", { class: `bar kind-${kind}${s.status_code === 2 ? " error" : ""}`, style: `left:${left}%;width:${width}%` })));
      row.addEventListener("click", () => {
        box.querySelectorAll(".selected").forEach((n) => n.classList.remove("selected"));
        row.classList.add("selected");
        showDetails(details, s);
      });
      box.append(row);
      walk(s.span_id, depth + 1);
    }
  };
  walk(null, 0);
  return box;
}

function kvTable(obj) {
  return el("table", {}, Object.entries(obj).map(([k, v]) =>
    el("tr", {}, el("td", {}, k), el("td", { class: "mono" }, typeof v === "object" ? JSON.stringify(v) : String(v)))));
}

function showDetails(box, s) {
  box.replaceChildren(el("h2", {}, s.name),
    kvTable({ trace_id: s.trace_id, span_id: s.span_id, parent_span_id: s.parent_span_id ?? "-",
      duration: ms(s.duration_ms), status: s.status_code === 2 ? `ERROR ${s.status_message ?? ""}` : "unset/ok" }),
    el("h2", {}, "Attributes"), kvTable(s.attributes));
  if (s.links.length) {
    box.append(el("h2", {}, "Links"), ...s.links.map((l) => el("div", {},
      el("a", { href: `#/trace/${l.trace_id}`, class: "job-link mono" }, `${l.name ?? "span"} (trace ${l.trace_id})`))));
  }
  if (s.events.length) box.append(el("h2", {}, "Events"), kvTable(Object.fromEntries(s.events.map((e) => [e.name, e.attributes]))));
  box.append(el("h2", {}, "Resource"), kvTable(s.resource));
}

function traceSection(title, spans) {
  const details = el("section", { class: "details" }, el("p", { class: "muted" }, "Click a span to see its attributes."));
  return [el("section", {}, el("h2", {}, title), kindLegend(spans), waterfall(spans, details)), details];
}

async function rolloutPage(id) {
  const [data, talk] = await Promise.all([api(`/api/rollout/${encodeURIComponent(id)}`), conversationData(id)]);
  app.replaceChildren(el("p", {}, el("a", { href: "#/" }, "‹ overview")));
  if (talk) app.append(conversationSection(talk));
  if (!data.attempts || !data.attempts.length) { app.append(el("p", {}, `No rollout ${id} in the trace store.`)); return; }
  for (const a of data.attempts) {
    const dispatch = a.spans.find((s) => s.span_id === a.span_id);
    const link = dispatch && dispatch.links[0];
    app.append(el("section", { class: "attempt" },
      el("h2", {}, `${a.rollout_id} · attempt ${a.attempt} · `, el("span", { class: `outcome-${a.outcome}` }, a.outcome, attemptError(talk, a)),
        ` · reward ${fmt(a.reward)} · ${ms(a.duration_ms)} · ${a.span_count} spans`),
      el("div", { class: "mono" }, `trace ${a.trace_id}`),
      link ? el("div", {}, "linked to ", el("a", { href: `#/trace/${link.trace_id}`, class: "job-link" }, `job trace ${link.trace_id}`))
        : el("div", { class: "muted" }, "no link to a job span")));
    app.append(...traceSection(`Waterfall of ${a.rollout_id}`, a.spans));
  }
}

async function tracePage(id) {
  const data = await api(`/api/trace/${id}`);
  app.replaceChildren(el("p", {}, el("a", { href: "#/" }, "‹ overview")));
  if (!data.spans || !data.spans.length) { app.append(el("p", {}, `No trace ${id}.`)); return; }
  app.append(...traceSection(`Trace ${id} (${data.spans.length} spans)`, data.spans));
}

// ---------------------------------------------------------------- routing
async function route() {
  const [, page, arg] = location.hash.split("/");
  try {
    if (page && page.startsWith("profile")) await profilePage();
    else if (page && page.startsWith("compare")) await comparePage();
    else if (page && page.startsWith("runs")) await runsPage();
    else if (page && page.startsWith("groups")) await groupsPage();
    else if (page && page.startsWith("search")) await searchPage();
    else if (page === "rollout") await rolloutPage(decodeURIComponent(arg));
    else if (page === "trace") await tracePage(arg);
    else { readUrlState(); await overview(); }
  } catch (error) {
    app.replaceChildren(el("p", { class: "outcome-error" }, String(error)));
  }
}

document.getElementById("search-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const q = document.getElementById("search").value.trim();
  const found = await api(`/api/search?q=${encodeURIComponent(q)}`);
  if (found.kind === "rollout") location.hash = `#/rollout/${encodeURIComponent(found.rollout_id)}`;
  else if (found.kind === "trace") location.hash = `#/trace/${found.trace_id}`;
  else if (q) location.hash = `#/search?${new URLSearchParams({ q })}`;  // text: messages, tools, errors
});
window.addEventListener("hashchange", route);
route();

// ---------------------------------------------------------------- profile (where the time went)
const SVG = "http://www.w3.org/2000/svg";
function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

// A chart frame with labelled axes: x and y titles, tick labels at both ends and the middle.
function frame(id, xLabel, yLabel, xRange, yRange, xFmt = (v) => fmt(v, 1), yFmt = (v) => fmt(v, 0)) {
  const w = 640, h = 220, left = 60, bottom = 44;
  const svg = svgEl("svg", { id, class: "chart", viewBox: `0 0 ${w} ${h}`, width: "100%", height: h });
  const plot = { x0: left, x1: w - 10, y0: h - bottom, y1: 10 };
  svg.append(svgEl("line", { x1: plot.x0, y1: plot.y0, x2: plot.x1, y2: plot.y0, class: "axis" }));
  svg.append(svgEl("line", { x1: plot.x0, y1: plot.y0, x2: plot.x0, y2: plot.y1, class: "axis" }));
  for (const f of [0, 0.5, 1]) {
    const xv = xRange[0] + f * (xRange[1] - xRange[0]), yv = yRange[0] + f * (yRange[1] - yRange[0]);
    svg.append(svgEl("text", { x: plot.x0 + f * (plot.x1 - plot.x0), y: plot.y0 + 14, "text-anchor": "middle", class: "tick" }, xFmt(xv)));
    svg.append(svgEl("text", { x: plot.x0 - 4, y: plot.y0 - f * (plot.y0 - plot.y1) + 4, "text-anchor": "end", class: "tick" }, yFmt(yv)));
  }
  svg.append(svgEl("text", { x: (plot.x0 + plot.x1) / 2, y: h - 6, "text-anchor": "middle", class: "axis-label" }, xLabel));
  svg.append(svgEl("text", { x: 12, y: (plot.y0 + plot.y1) / 2, "text-anchor": "middle", class: "axis-label",
    transform: `rotate(-90 12 ${(plot.y0 + plot.y1) / 2})` }, yLabel));
  const sx = (v) => plot.x0 + ((v - xRange[0]) / ((xRange[1] - xRange[0]) || 1)) * (plot.x1 - plot.x0);
  const sy = (v) => plot.y0 - ((v - yRange[0]) / ((yRange[1] - yRange[0]) || 1)) * (plot.y0 - plot.y1);
  return { svg, sx, sy };
}

function barHistogram(id, bins, xLabel, yLabel, xFmt) {
  const max = Math.max(1, ...bins.map((b) => b.count));
  const lo = bins.length ? bins[0].from : 0, hi = bins.length ? bins[bins.length - 1].to : 1;
  const { svg, sx, sy } = frame(id, xLabel, yLabel, [lo, hi], [0, max], xFmt);
  for (const b of bins) {
    const r = svgEl("rect", { x: sx(b.from) + 1, y: sy(b.count), width: Math.max(1, sx(b.to) - sx(b.from) - 2),
      height: sy(0) - sy(b.count), class: "hbar" });
    r.append(svgEl("title", {}, `${xFmt(b.from)}–${xFmt(b.to)}: ${b.count}`));
    svg.append(r);
  }
  return svg;
}

function phaseBars(phases) {
  const table = el("table", { id: "phase-table" }, el("tr", {}, el("th", {}, "phase"), el("th", {}, "share of rollout wall time"),
    el("th", {}, "p50 s"), el("th", {}, "p90 s"), el("th", {}, "p99 s")));
  for (const p of phases) {
    const bar = el("div", { class: "share" }, el("span", { class: "share-fill", style: `width:${(100 * p.share).toFixed(2)}%` }),
      el("span", { class: "share-label" }, `${(100 * p.share).toFixed(1)}%`));
    table.append(el("tr", { class: "phase" }, el("td", {}, p.name), el("td", {}, bar),
      el("td", {}, fmt(p.p50_s, 4)), el("td", {}, fmt(p.p90_s, 4)), el("td", {}, fmt(p.p99_s, 4))));
  }
  return table;
}

// What the http phase covers, split by where each instant lies against the server's own span.
function httpParts(data) {
  const parts = data.http_parts || [];
  const http = (data.phases || []).find((p) => p.name === "http");
  if (!parts.length || !http || !http.seconds) return "";
  const rows = [...parts].sort((a, b) => b.seconds - a.seconds).map((p) => el("tr", { class: "http-part", "data-part": p.name },
    el("td", { class: "mono" }, p.name), el("td", {}, `${(100 * p.share).toFixed(1)}%`), el("td", {}, `${fmt(p.seconds, 3)} s`),
    el("td", {}, p.covers), el("td", { class: "muted" }, p.change)));
  return el("div", { id: "http-parts" },
    el("h3", {}, `What http covers (${(100 * http.share).toFixed(1)}% of rollout time)`),
    el("p", { class: "muted" }, "Time an HTTP span is the innermost one: a call on the wire, or inside a server's framework outside any handler span. "
      + "Its parts, each with what to change when it is large (where a rollout's calls overlap, each call's own time counts):"),
    el("table", {}, el("tr", {}, el("th", {}, "part"), el("th", {}, "share"), el("th", {}, "seconds"), el("th", {}, "covers"),
      el("th", {}, "when it is large")), rows));
}

function timeline(points) {
  const tMax = points.length ? points[points.length - 1].t_s + points[points.length - 1].width_s : 1;
  const yMax = Math.max(1, ...points.map((p) => Math.max(p.completions_per_s, p.in_flight)));
  const { svg, sx, sy } = frame("timeline", "seconds since the first dispatch", "completions/s · in flight",
    [0, tMax], [0, yMax]);
  for (const [key, cls] of [["completions_per_s", "line-rate"], ["in_flight", "line-flight"]]) {
    const d = points.map((p, i) => `${i ? "L" : "M"}${sx(p.t_s + p.width_s / 2).toFixed(1)},${sy(p[key]).toFixed(1)}`).join(" ");
    svg.append(svgEl("path", { d, class: cls }));
  }
  return el("div", {}, svg, el("div", { class: "legend" }, el("span", { class: "key-rate" }, "■ completions per second"),
    " ", el("span", { class: "key-flight" }, "■ rollouts in flight")));
}

function liveSection(live) {
  const section = el("section", { id: "live" }, el("h2", {}, "Progress"));
  const p = live.progress;
  if (!p) {
    section.append(el("div", { class: "muted" }, "no progress.json (serve with --run-dir RUN to see a run's progress)"));
    return section;
  }
  const done = p.completed + p.failed;
  section.append(el("div", { class: "cards" }, card("done", p.total ? `${done} / ${p.total}` : done),
    card("in flight", p.in_flight), card("rollouts/s", fmt(p.rate, 1)),
    card("ETA", p.eta_s === null || p.eta_s === undefined ? "-" : `${fmt(p.eta_s, 0)} s`),
    card("progress.json age", `${fmt(p.age_s, 0)} s`)));
  const rows = (list, extra) => el("table", {}, el("tr", {}, el("th", {}, "rollout"), el("th", {}, "dispatch name"),
    el("th", {}, "attempt"), el("th", {}, "in flight for"), ...extra.map((x) => el("th", {}, x[0]))),
    list.map((r) => el("tr", {}, el("td", {}, el("a", { href: `#/rollout/${encodeURIComponent(r.rollout_id)}` }, r.rollout_id)),
      el("td", {}, r.dispatch_name ?? "-"), el("td", {}, r.attempt ?? "-"), el("td", {}, `${fmt(r.elapsed_s, 1)} s`),
      ...extra.map((x) => el("td", {}, x[1](r))))));
  const windows = Object.entries(p.dispatch_windows || {});
  if (windows.length) {
    section.append(el("h3", {}, "Dispatch windows"), el("table", { id: "dispatch-windows" },
      el("tr", {}, el("th", {}, "server"), el("th", {}, "sent at once, at most"), el("th", {}, "sent, unanswered"),
        el("th", {}, "waiting unsent")),
      windows.map(([server, w]) => el("tr", {}, el("td", {}, server), el("td", {}, w.window),
        el("td", {}, w.sent), el("td", {}, w.waiting)))));
  }
  section.append(el("h3", {}, "Oldest in flight"), (p.oldest_in_flight || []).length
    ? rows(p.oldest_in_flight, []) : el("div", { class: "muted" }, "none in flight"));
  section.append(el("h3", {}, `Stalled (no span finished for ${fmt(live.stall_s, 0)} s)`), live.stalled.length
    ? rows(live.stalled, [["stage (last finished span)", (r) => r.stage ?? "none yet"], ["quiet for", (r) => `${fmt(r.quiet_s, 1)} s`]])
    : el("div", { class: "muted", id: "no-stalled" }, "none"));
  return section;
}

let refreshTimer = null;
async function profilePage() {
  const stall = new URLSearchParams(location.hash.split("?")[1] || "").get("stall_s") || "60";
  const [data, live] = await Promise.all([api("/api/profile"), api(`/api/progress?stall_s=${encodeURIComponent(stall)}`)]);
  app.replaceChildren();
  app.append(liveSection(live));
  app.append(el("section", {}, el("h2", {}, `Where the time went: ${data.dispatches} dispatches, ${fmt(data.wall_s, 1)} s of rollout time`),
    el("p", { class: "muted" }, "Each instant of a rollout belongs to the innermost span covering it; the shares add up to 100%."),
    phaseBars(data.phases), httpParts(data)));
  app.append(el("section", {}, el("h2", {}, "Timeline"), timeline(data.timeline)));
  app.append(el("section", {}, el("h2", {}, "Reward histogram"),
    barHistogram("reward-histogram", data.reward_histogram, "reward", "dispatches", (v) => fmt(v, 2))));
  const durations = data.duration_histogram.map((b) => ({ from: b.from_ms, to: b.to_ms, count: b.count }));
  app.append(el("section", {}, el("h2", {}, "Duration histogram"),
    barHistogram("duration-histogram", durations, "dispatch duration (ms)", "dispatches", (v) => fmt(v, 0))));
  app.append(el("section", {}, el("h2", {}, "Stragglers"), el("table", { id: "stragglers" },
    el("tr", {}, el("th", {}, "rollout"), el("th", {}, "duration"), el("th", {}, "dominant phase"),
      el("th", {}, "dispatch name"), el("th", {}, "outcome")),
    data.stragglers.map((s) => el("tr", {}, el("td", {}, el("a", { href: `#/rollout/${encodeURIComponent(s.rollout_id)}` }, s.rollout_id)),
      el("td", {}, `${fmt(s.duration_s, 3)} s`), el("td", {}, s.dominant_phase), el("td", {}, s.dispatch_name ?? "-"),
      el("td", { class: `outcome-${s.outcome}` }, s.outcome ?? "-"))))));
  const p = live.progress;
  const running = p && !p.finished && (p.total ? p.completed + p.failed < p.total : p.in_flight > 0);
  app.append(el("div", { id: "refresh", class: "muted" }, running ? "refreshing every 2 s while the run goes" : "run finished: not refreshing"));
  clearTimeout(refreshTimer);
  if (running) refreshTimer = setTimeout(() => { if (location.hash.startsWith("#/profile")) route(); }, 2000);
}
