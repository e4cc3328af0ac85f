// The Runs page (#/runs): many runs at once. Pick runs; see what differs in their configs, mean
// reward and pass@k over policy version or step (plain SVG), and each run's figures and staleness.
// The numbers are /api/runs/series: the code of `rollgym compare RUN... [--over version|step]`.
// Loaded before app.js (like views.js): it uses app.js's el, api, fmt and svgEl at call time.
"use strict";

const RUN_COLORS = { reward: "#2a6fdb", pass1: "#12b76a", passK: "#d9822b" };
const LAG_COLORS = ["#12b76a", "#fdb022", "#f79009", "#f04438"];

function runLabel(run) {
  return `#${run.index}` + (run.step === null || run.step === undefined ? "" : ` step ${run.step}`);
}

function runsHash(picked, over) {
  return `#/runs?${new URLSearchParams({ runs: picked.join(","), over })}`;
}

// A config value as one line: text as it is, anything else as JSON.
function configValue(value, present) {
  if (!present) return el("span", { class: "muted" }, "(absent)");
  return typeof value === "string" ? value : JSON.stringify(value);
}

// The config keys whose values differ, one column per run (also the two-run compare page's).
function configDiffTable(differences, labels, id = "config-diff") {
  if (!differences.length) {
    return el("p", { id, class: "muted" }, "config.yaml: no differences (run id and output_dir aside)");
  }
  return el("table", { id, class: "config-diff" },
    el("tr", {}, el("th", {}, "key"), labels.map((label) => el("th", {}, label))),
    differences.map((d) => {
      const present = d.present || d.values.map(() => true);
      const first = JSON.stringify(d.values[0]);
      return el("tr", { class: "config-key", "data-key": d.key }, el("td", { class: "mono" }, d.key),
        d.values.map((v, i) => el("td", { class: `mono${i && JSON.stringify(v) !== first ? " changed" : ""}` },
          configValue(v, present[i]))));
    }));
}

// Results per policy lag as one stacked bar (lag 0 green, then warmer), with its words.
function lagBar(staleness) {
  const entries = Object.entries(staleness.results_by_lag || {});
  const total = entries.reduce((n, [, c]) => n + c, 0);
  const bar = el("div", { class: "lag-bar", title: entries.map(([lag, c]) => `lag ${lag}: ${c}`).join(", ") || "no results" });
  for (const [lag, count] of entries) {
    bar.append(el("span", { class: "lag-part", "data-lag": lag,
      style: `width:${(100 * count / Math.max(1, total)).toFixed(2)}%;background:${LAG_COLORS[Math.min(3, Number(lag))]}` }));
  }
  const words = staleness.max_lag === null ? "no versions"
    : `${staleness.behind} of ${total} behind, max lag ${staleness.max_lag}`;
  return el("div", { class: "lag-cell" }, bar, el("span", { class: "muted" }, words));
}

// Mean reward and pass@k against version or step: lines broken where a value is missing, each
// point with its numbers on hover, the rollouts behind each x as grey bars along the bottom.
function seriesChart(series, runs) {
  const points = series.points;
  const ks = series.pass_at_k_shown;
  const w = 1200, h = 300, left = 56, right = 16, top = 14, bottom = 50;
  const svg = svgEl("svg", { id: "runs-chart", class: "chart", viewBox: `0 0 ${w} ${h}`, width: "100%", height: h });
  if (!points.length) return svg;
  const numeric = points.every((p) => typeof p.x === "number");
  const xs = points.map((p) => p.x);
  const xMin = numeric ? Math.min(...xs) : 0, xMax = numeric ? Math.max(...xs) : points.length - 1;
  const x0 = left + 20, x1 = w - right - 20, y0 = h - bottom, y1 = top;
  const sx = (p, i) => {
    const v = numeric ? p.x : i;
    return xMax === xMin ? (x0 + x1) / 2 : x0 + ((v - xMin) / (xMax - xMin)) * (x1 - x0);
  };
  // With rewards of 0 or 1 and every task's repeats alike, pass@1 is the mean reward at every
  // point: one line then, said so, instead of one hidden under the other.
  const same = points.every((p) => (p.mean_reward ?? null) === null
    ? (p.pass_at_k[ks[0]] ?? null) === null
    : Math.abs(p.mean_reward - (p.pass_at_k[ks[0]] ?? NaN)) < 1e-9);
  const lines = [...ks.map((k, j) => [j ? "passK" : "pass1", `pass@${k}`, (p) => p.pass_at_k[k]])
    .filter(([key]) => !(same && key === "pass1")).reverse(),
    ["reward", same ? `mean reward (= pass@${ks[0]} here)` : "mean reward", (p) => p.mean_reward]];
  const values = points.flatMap((p) => lines.map(([, , get]) => get(p))).filter((v) => v !== null && v !== undefined);
  const yLo = Math.min(0, ...values), yHi = Math.max(1, ...values);
  const sy = (v) => y0 - ((v - yLo) / ((yHi - yLo) || 1)) * (y0 - y1);
  for (let f = 0; f <= 4; f++) {
    const v = yLo + (f / 4) * (yHi - yLo);
    svg.append(svgEl("line", { x1: left, x2: w - right, y1: sy(v), y2: sy(v), class: f ? "grid" : "axis" }));
    svg.append(svgEl("text", { x: left - 6, y: sy(v) + 4, "text-anchor": "end", class: "tick" }, fmt(v, 2)));
  }
  svg.append(svgEl("line", { x1: left, y1: y0, x2: left, y2: y1, class: "axis" }));
  const most = Math.max(1, ...points.map((p) => p.rollouts));
  const slot = points.length > 1 ? Math.min(24, (x1 - x0) / (points.length - 1) * 0.6) : 24;
  const every = Math.ceil(points.length / 24);  // at most about 24 tick labels
  points.forEach((p, i) => {
    const height = 0.22 * (y0 - y1) * (p.rollouts / most);
    const bar = svgEl("rect", { x: sx(p, i) - slot / 2, y: y0 - height, width: slot, height, class: "rollouts-bar" });
    bar.append(svgEl("title", {}, `${series.over} ${p.x ?? "none"}: ${p.rollouts} rollouts, ${p.tasks} tasks`));
    svg.append(bar);
    if (i % every === 0 || i === points.length - 1) {
      svg.append(svgEl("text", { x: sx(p, i), y: y0 + 14, "text-anchor": "middle", class: "tick" }, p.x === null ? "none" : String(p.x)));
    }
  });
  for (const [key, label, get] of lines) {
    let d = "", pen = "M";
    points.forEach((p, i) => {
      const v = get(p);
      if (v === null || v === undefined) { pen = "M"; return; }
      d += `${pen}${sx(p, i).toFixed(1)},${sy(v).toFixed(1)} `;
      pen = "L";
    });
    svg.append(svgEl("path", { d, class: `series series-${key}`, stroke: RUN_COLORS[key] }));
    points.forEach((p, i) => {
      const v = get(p);
      if (v === null || v === undefined) return;
      const dot = svgEl("circle", { cx: sx(p, i), cy: sy(v), r: 3.5, fill: RUN_COLORS[key], class: `dot dot-${key}` });
      const names = p.runs.map((r) => runLabel(runs[r])).join(", ");
      dot.append(svgEl("title", {}, `${series.over} ${p.x ?? "none"}: ${label} ${fmt(v)} (${p.rollouts} rollouts, ${p.tasks} tasks; ${names})`));
      svg.append(dot);
    });
  }
  const xTitle = series.over === "version"
    ? "policy version (of each rollout's first model call; the picked runs pooled)"
    : "step (run.step, else the order picked)";
  svg.append(svgEl("text", { x: (x0 + x1) / 2, y: h - 8, "text-anchor": "middle", class: "axis-label" }, xTitle));
  svg.append(svgEl("text", { x: 14, y: (y0 + y1) / 2, "text-anchor": "middle", class: "axis-label",
    transform: `rotate(-90 14 ${(y0 + y1) / 2})` }, "reward · pass@k"));
  const legend = el("div", { class: "legend", id: "runs-legend" },
    [...lines].reverse().map(([key, label]) => el("span", { class: `key-${key}`, style: `color:${RUN_COLORS[key]}` }, `■ ${label} `)),
    el("span", { class: "muted" }, "▮ rollouts at that point (grey bars)"));
  return el("div", {}, svg, legend);
}

function runsFiguresTable(data, runs) {
  const ks = data.pass_at_k_shown;
  const confidence = Math.round(data.confidence * 100);
  return el("table", { id: "runs-table" },
    el("tr", {}, el("th", {}, "run"), el("th", {}, "run id"), el("th", {}, "completed"), el("th", {}, "failed"),
      el("th", {}, "mean reward"), el("th", {}, `vs ${runLabel(runs[0])} [${confidence}% interval]`),
      ks.map((k) => el("th", {}, `pass@${k}`)), el("th", {}, "staleness (results by policy lag)"),
      el("th", {}, "stale failures"), el("th", {}, "versions")),
    data.runs.map((r, i) => {
      const d = r.vs_first;
      const versions = r.versions.length ? `${r.versions[0]}–${r.versions[r.versions.length - 1]}` : "-";
      return el("tr", { class: "run-row", "data-run": runs[i].index },
        el("td", {}, runLabel(runs[i])), el("td", { class: "mono" }, r.run_id ?? r.path),
        el("td", {}, r.completed), el("td", { title: JSON.stringify(r.failed_by_kind) }, r.failed),
        el("td", {}, fmt(r.mean_reward)),
        d ? diffCell(d.reward_diff, d.reward_diff_ci, d.significant) : el("td", { class: "muted" }, "baseline"),
        ks.map((k) => el("td", {}, fmt(r.pass_at_k[k]))), el("td", {}, lagBar(r.staleness)),
        el("td", {}, r.staleness.stale_failures), el("td", {}, versions));
    }));
}

async function runsPage() {
  const query = new URLSearchParams(location.hash.split("?")[1] || "");
  const offered = (await api("/api/runs/list")).runs || [];
  app.replaceChildren(el("p", {}, el("a", { href: "#/" }, "‹ overview")));
  if (!offered.length) {
    app.append(el("p", { id: "runs-none" }, "No runs to pick: serve them with rollgym traces serve --run-dir RUN --runs RUN_OR_FOLDER ..."));
    return;
  }
  const over = query.get("over") === "step" ? "step" : "version";
  const picked = query.has("runs") ? query.get("runs").split(",").filter((s) => s !== "").map(Number)
    : offered.map((r) => r.index);
  const boxes = offered.map((r) => el("input", { type: "checkbox", value: r.index, class: "pick",
    ...(picked.includes(r.index) ? { checked: "" } : {}) }));
  const show = (overNow) => {
    const chosen = boxes.filter((b) => b.checked).map((b) => Number(b.value));
    location.hash = runsHash(chosen, overNow);
  };
  app.append(el("section", { id: "runs-picker" }, el("h2", {}, `Runs (${offered.length} offered)`),
    el("table", {}, el("tr", {}, el("th", {}, "pick"), el("th", {}, "run"), el("th", {}, "run id"), el("th", {}, "folder"),
      el("th", {}, "status"), el("th", {}, "completed"), el("th", {}, "failed")),
      offered.map((r, i) => el("tr", { class: "offered-run", "data-run": r.index }, el("td", {}, boxes[i]),
        el("td", {}, runLabel(r)), el("td", { class: "mono" }, r.run_id ?? "-"), el("td", { class: "mono" }, r.path),
        el("td", {}, r.status ?? "-"), el("td", {}, r.completed ?? "-"), el("td", {}, r.failed ?? "-")))),
    el("div", { class: "pager" }, el("button", { id: "runs-show", onclick: () => show(over) }, "show the picked runs"),
      el("button", { onclick: () => { boxes.forEach((b) => { b.checked = true; }); } }, "all"),
      el("button", { onclick: () => { boxes.forEach((b) => { b.checked = false; }); } }, "none"),
      el("span", { class: "muted" }, "the first picked is the baseline of the differences"))));
  if (!picked.length) { app.append(el("p", { class: "muted", id: "runs-none-picked" }, "Pick at least one run.")); return; }
  const data = await api(`/api/runs/series?runs=${picked.join(",")}`);
  if (data.error) { app.append(el("p", { class: "outcome-error", id: "runs-error" }, data.error)); return; }
  const runs = data.picked.map((i) => offered[i]);
  const labels = runs.map(runLabel);
  app.append(el("section", { id: "runs-config" }, el("h2", {}, "What differs between them (config.yaml)"),
    el("p", { class: "muted" }, "The resolved configs flattened to dotted keys; a value unlike the first run's is marked."),
    configDiffTable(data.config_differences, labels)));
  const toggle = (value, label) => el("button", { class: `over${over === value ? " active" : ""}`, id: `over-${value}`,
    onclick: () => show(value) }, label);
  app.append(el("section", { id: "runs-series" }, el("h2", {}, "Mean reward and pass@k over ",
    toggle("version", "policy version"), " ", toggle("step", "step")),
    seriesChart(data[over], runs), seriesTable(data[over], runs)));
  app.append(el("section", { id: "runs-figures" }, el("h2", {}, "Per run"),
    el("p", { class: "muted" }, "Failures never enter a mean. Staleness: how many versions each result's oldest model call "
      + "was behind the current one when it came back; stale failures: results refused by run.max_staleness. "
      + "The same numbers as rollgym compare RUN... --json. Lag: ",
      ["0", "1", "2", "3+"].map((lag, i) => el("span", { class: "lag-key" },
        el("span", { class: "lag-swatch", style: `background:${LAG_COLORS[i]}` }), ` ${lag} `))),
    runsFiguresTable(data, runs)));
}

function seriesTable(series, runs) {
  const ks = series.pass_at_k_shown;
  return el("details", { id: "runs-series-details" }, el("summary", {}, `the numbers (${series.points.length} points)`),
    el("table", { id: "runs-series-table" }, el("tr", {}, el("th", {}, series.over), el("th", {}, "runs"),
      el("th", {}, "rollouts"), el("th", {}, "tasks"), el("th", {}, "mean reward"), ks.map((k) => el("th", {}, `pass@${k}`))),
    series.points.map((p) => el("tr", { class: "series-point", "data-x": String(p.x) },
      el("td", {}, p.x === null ? "none" : String(p.x)), el("td", {}, p.runs.map((r) => runLabel(runs[r])).join(", ")),
      el("td", {}, p.rollouts), el("td", {}, p.tasks), el("td", {}, fmt(p.mean_reward)),
      ks.map((k) => el("td", {}, fmt(p.pass_at_k[k])))))));
}
