// The timeline page around its data (timeline.h states what it draws and the
// data-* attributes of every mark). Self-contained: inline CSS and
// JavaScript, SVG built in the page; nothing is fetched. The JavaScript
// computes holds (bars), phase and step spans (the rules of phases.h) and
// leak/fault marks from the embedded log lines.
#include "orchestrator/report/timeline.h"

namespace tandem::report {

const char* const kTimelinePageHead = R"TANDEM(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tandem timeline</title>
<style>
body { font: 13px system-ui, sans-serif; margin: 12px 16px; color: #222; }
h1 { font-size: 17px; margin: 0 0 4px; }
#summary { color: #555; margin-bottom: 6px; }
#controls { margin: 6px 0; }
#controls input { width: 7em; }
.note { background: #fff4d6; border: 1px solid #e0c060; padding: 3px 8px; margin: 4px 0; }
.note[data-kind="warning"] { background: #fde; border-color: #d88; }
#legend { margin: 6px 0; }
#legend span { display: inline-block; margin: 0 12px 2px 0; white-space: nowrap; }
#legend i { display: inline-block; width: 12px; height: 10px; margin-right: 3px; vertical-align: middle; }
#chart { overflow-x: auto; border-top: 1px solid #ddd; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
svg text.lane { font-weight: 600; }
svg text.small { font-size: 10px; fill: #666; }
.bar[data-leak="1"] { stroke: #d00; stroke-width: 2; }
.bar[data-open="1"] { stroke: #333; stroke-width: 0.5; stroke-dasharray: 3 2; }
.leak, .fault { fill: #d00; }
.phase { cursor: zoom-in; stroke: #fff; }
.phase[data-failed="1"] { stroke: #d00; stroke-width: 2; }
.phase:not([data-merged="1"]) { stroke: none; fill: #b8b8b8; }
.step[data-failed="1"] { fill: #d00; }
.phase-line { stroke: #999; stroke-width: 0.5; stroke-dasharray: 2 3; }
.lane-bg { fill: #f7f7f7; }
.axis { stroke: #ccc; }
</style>
</head>
<body>
<h1>tandem timeline</h1>
<div id="summary"></div>
<div id="controls">
  window from <input id="from" type="number" step="any"> s to <input id="to" type="number" step="any"> s
  <button id="apply">show</button> <button id="all">whole run</button>
  width <select id="zoom"><option>1</option><option>2</option><option>4</option><option>8</option></select>&times;
  <span class="small">(seconds from the first line; click a phase to zoom to it; hover for bytes and durations)</span>
</div>
<div id="notes"></div>
<div id="legend"></div>
<div id="chart"></div>
<script id="tandem-data" type="application/json">)TANDEM";

const char* const kTimelinePageTail = R"TANDEM(</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("tandem-data").textContent);
const S = D.strings;
const str = (i) => (i === null || i === undefined ? "" : S[i]);
const TAGS = ["weights", "kv_cache", "cuda_graph", "params", "grads", "optimizer", "activations", "ipc_exports"];
const ROLE_HUES = { actor: 212, rollout: 135 };
const OTHER_HUES = [28, 285, 350, 175, 55, 320, 95, 250];

const R = D.residency.map((r) => ({ ts: r[0], group: str(r[1]), role: str(r[2]), rank: r[3], gpus: r[4],
  tag: str(r[5]), bytes: r[6], leak: r[7] === 1, note: str(r[8]), devices: r[9] }));
const H = D.handoff.map((h) => ({ start: h[0], duration: h[1], group: str(h[2]), phase: str(h[3]), step: h[4],
  stage: str(h[5]), role: str(h[6]), rank: h[7], gpus: h[8], command: str(h[9]), tag: str(h[10]), bytes: h[11],
  outcome: str(h[12]), message: str(h[13]), version: h[14] }));

// ---- units -----------------------------------------------------------------
function human(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  if (b < 1024) return b + " B";
  let v = b, i = 0;
  while (v >= 1024 && i < 5) { v /= 1024; i++; }
  return v.toFixed(1) + " " + u[i];
}
function dur(s) {
  if (s < 0.001) return (s * 1000).toFixed(1) + " ms";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 60) return s.toFixed(2) + " s";
  const t = Math.round(s);
  if (t < 3600) return Math.floor(t / 60) + "m" + String(t % 60).padStart(2, "0") + "s";
  return Math.floor(t / 3600) + "h" + String(Math.floor(t / 60) % 60).padStart(2, "0") + "m" + String(t % 60).padStart(2, "0") + "s";
}
function clock(ts) {
  const d = new Date(ts * 1000);
  const p = (n, w) => String(n).padStart(w || 2, "0");
  return p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds()) + "." + p(d.getMilliseconds(), 3);
}
function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

// ---- what the log says -----------------------------------------------------
// Holds: per (gpu, role/rank, tag), from the line that made the tag resident
// (or changed its size) to the line that released it (or changed its size).
function computeHolds(lines, tEnd) {
  const sorted = lines.slice().sort((a, b) => a.ts - b.ts);  // stable
  const open = new Map(), bars = [], leaks = [];
  for (const r of sorted) {
    for (const g of r.gpus) {
      if (r.leak) leaks.push({ gpu: g, ts: r.ts, role: r.role, rank: r.rank, tag: r.tag, note: r.note });
      const key = g + "|" + r.role + "|" + r.rank + "|" + r.tag;
      const cur = open.get(key);
      if (cur && cur.bytes === r.bytes) continue;
      if (cur) {
        cur.end = r.ts;
        cur.leak = r.leak;
        cur.note = r.note;
        bars.push(cur);
        open.delete(key);
      }
      if (r.bytes > 0) {
        open.set(key, { gpu: g, group: r.group, role: r.role, rank: r.rank, tag: r.tag, bytes: r.bytes,
          start: r.ts, end: tEnd, leak: false, open: false, merged: 1, note: "" });
      }
    }
  }
  for (const b of open.values()) { b.open = true; bars.push(b); }
  return { bars, leaks };
}
// Phase spans: consecutive lines of one group with the same phase; step
// spans: consecutive lines of a phase span with the same step (phases.h).
function computePhases(lines) {
  const spans = [], current = new Map();
  for (const l of lines) {
    const end = l.start + l.duration, failed = l.outcome !== "ok";
    let i = current.get(l.group);
    if (i === undefined || spans[i].phase !== l.phase) {
      spans.push({ group: l.group, phase: l.phase, start: l.start, end: end, commands: 0, failed: false, steps: [] });
      i = spans.length - 1;
      current.set(l.group, i);
    }
    const p = spans[i];
    p.start = Math.min(p.start, l.start); p.end = Math.max(p.end, end); p.commands++; p.failed = p.failed || failed;
    let s = p.steps[p.steps.length - 1];
    if (!s || s.step !== l.step) {
      s = { group: l.group, phase: l.phase, step: l.step, stage: l.stage, start: l.start, end: end, failed: false, lines: [] };
      p.steps.push(s);
    }
    s.start = Math.min(s.start, l.start); s.end = Math.max(s.end, end); s.failed = s.failed || failed;
    s.lines.push(l);
  }
  return spans;
}

let t0 = Infinity, tEnd = -Infinity;
for (const r of R) { t0 = Math.min(t0, r.ts); tEnd = Math.max(tEnd, r.ts); }
for (const h of H) { t0 = Math.min(t0, h.start); tEnd = Math.max(tEnd, h.start + h.duration); }
if (!isFinite(t0)) { t0 = 0; tEnd = 1; }
if (tEnd <= t0) tEnd = t0 + 1e-3;

const holds = computeHolds(R, tEnd);
const phases = computePhases(H);
const steps = phases.flatMap((p) => p.steps);
const faults = H.filter((h) => h.outcome !== "ok");
const groups = [...new Set(H.map((h) => h.group))];
const gpuIds = [...new Set(holds.bars.map((b) => b.gpu).concat(R.flatMap((r) => r.devices.map((d) => d[0]))))]
  .sort((a, b) => a - b);
const lastReading = new Map();
for (const r of R.slice().sort((a, b) => a.ts - b.ts)) for (const d of r.devices) lastReading.set(d[0], { used: d[1], total: d[2], ts: r.ts });

// Colours: a hue per role, a lightness per tag.
const roleOrder = [...new Set(R.map((r) => r.role).concat(H.map((h) => h.role)))];
const hueOf = new Map();
for (const role of roleOrder) hueOf.set(role, role in ROLE_HUES ? ROLE_HUES[role] : OTHER_HUES[hueOf.size % OTHER_HUES.length]);
function colour(role, tag) {
  const t = Math.max(0, TAGS.indexOf(tag));
  return "hsl(" + hueOf.get(role) + ",60%," + (32 + t * 7) + "%)";
}
// Rows of a GPU lane: one per (role/rank, tag), roles in order of appearance.
const rowsOf = new Map();
for (const g of gpuIds) {
  const keys = new Map();
  for (const b of holds.bars) if (b.gpu === g) keys.set(b.role + "|" + b.rank + "|" + b.tag, b);
  rowsOf.set(g, [...keys.values()].sort((a, b) => roleOrder.indexOf(a.role) - roleOrder.indexOf(b.role) ||
    a.rank - b.rank || TAGS.indexOf(a.tag) - TAGS.indexOf(b.tag)).map((b) => ({ role: b.role, rank: b.rank, tag: b.tag })));
}

// ---- drawing ---------------------------------------------------------------
const LIMIT_BARS = D.limits.bars, LIMIT_MARKS = D.limits.marks;
const LEFT = 170, ROW = 14, PHASE_ROW = 18, STEP_ROW = 9, AXIS = 22;

// Past the limits, items of one row (holds) or group (phases) that start in
// the same time bucket are drawn as one: from the earliest start to the
// latest end, `merged` counts them, `held` sums their durations.
function bucketMerge(items, rowKey, bucket, from) {
  const byKey = new Map();
  for (const it of items) {
    const k = rowKey(it) + "#" + Math.floor((it.start - from) / bucket);
    const cur = byKey.get(k);
    if (!cur) {
      byKey.set(k, Object.assign({}, it, { held: it.end - it.start }));
      continue;
    }
    cur.start = Math.min(cur.start, it.start); cur.end = Math.max(cur.end, it.end);
    cur.merged += it.merged; cur.held += it.end - it.start;
    cur.bytes = Math.max(cur.bytes || 0, it.bytes || 0);
    cur.leak = cur.leak || it.leak; cur.open = cur.open || it.open; cur.failed = cur.failed || it.failed;
    if (cur.phase !== it.phase) cur.phase = "";
    cur.commands = (cur.commands || 0) + (it.commands || 0);
  }
  return [...byKey.values()];
}
const holdRow = (b) => b.gpu + "|" + b.role + "|" + b.rank + "|" + b.tag;
function note(kind, text) {
  return '<p class="note" data-kind="' + kind + '">' + esc(text) + "</p>";
}
function within(list, from, to, a, b) { return list.filter((x) => x[b] >= from && x[a] <= to); }

function draw(from, to) {
  view = [from, to];
  const zoom = Number(document.getElementById("zoom").value);
  const W = Math.max(900, (document.body.clientWidth || 1200) - 40) * zoom;
  const PW = W - LEFT - 20;
  const span = to - from;
  const x = (t) => LEFT + ((Math.min(Math.max(t, from), to) - from) / span) * PW;
  const notes = [];

  const inView = within(holds.bars, from, to, "start", "end");
  let bars = inView, px = 0;
  for (px = 1; bars.length > LIMIT_BARS && px <= 4096; px *= 2) bars = bucketMerge(inView, holdRow, (span / PW) * px, from);
  if (bars.length < inView.length) {
    notes.push(note("aggregated", inView.length + " holds in view are drawn as " + bars.length + " bars: the holds of one " +
      "worker and tag that start within the same " + (px / 2) + "-pixel slice are one bar, shaded by the share of its span they were " +
      "held (hover shows how many, the share and the largest bytes). Zoom in to see each."));
  }
  let trunc = [];
  if (bars.length > LIMIT_BARS) { trunc.push((bars.length - LIMIT_BARS) + " bars"); bars = bars.slice(0, LIMIT_BARS); }
  const phInView = within(phases, from, to, "start", "end").map((p) => Object.assign({}, p, { merged: 1 }));
  let ph = phInView;
  for (px = 1; ph.length > LIMIT_MARKS && px <= 4096; px *= 2) ph = bucketMerge(phInView, (p) => p.group, (span / PW) * px, from);
  if (ph.length < phInView.length) {
    notes.push(note("aggregated", phInView.length + " phase transitions in view are drawn as " + ph.length +
      " marks: those of a group starting within the same " + (px / 2) + "-pixel slice are one mark. Zoom in to see each."));
  }
  let st = within(steps, from, to, "start", "end");
  let lk = holds.leaks.filter((l) => l.ts >= from && l.ts <= to);
  let ft = faults.filter((f) => f.start >= from && f.start <= to);
  if (st.length > LIMIT_MARKS) { trunc.push(st.length + " handoff steps (phases are drawn)"); st = []; }
  if (lk.length > LIMIT_MARKS) { trunc.push((lk.length - LIMIT_MARKS) + " leak marks"); lk = lk.slice(0, LIMIT_MARKS); }
  if (ft.length > LIMIT_MARKS) { trunc.push((ft.length - LIMIT_MARKS) + " failed-command marks"); ft = ft.slice(0, LIMIT_MARKS); }
  if (trunc.length) notes.push(note("truncated", "Not drawn at this zoom (too many to draw usefully): " + trunc.join(", ") + ". Zoom in with the window."));
  if (D.skipped > 0) notes.push(note("warning", D.skipped + " log lines were skipped: " + D.warnings.join("; ")));
  document.getElementById("notes").innerHTML = notes.join("");

  // Layout: axis, per group a phase row and a step row, then a lane per GPU.
  let y = AXIS;
  const groupY = new Map();
  for (const g of groups) { groupY.set(g, y); y += PHASE_ROW + STEP_ROW + 4; }
  const laneTop = y + 6;
  const rowY = new Map();
  let lanes = "";
  y = laneTop;
  for (const g of gpuIds) {
    const rows = rowsOf.get(g);
    const rd = lastReading.get(g);
    const h = Math.max(1, rows.length) * ROW + 18;
    lanes += '<rect class="lane-bg" x="0" y="' + y + '" width="' + W + '" height="' + (h - 4) + '"></rect>';
    lanes += '<text class="lane" x="4" y="' + (y + 12) + '">GPU ' + g + "</text>";
    if (rd) lanes += '<text class="small" x="60" y="' + (y + 12) + '">device ' + esc(human(rd.used) + " / " + human(rd.total)) + "</text>";
    rows.forEach((r, i) => {
      const ry = y + 16 + i * ROW;
      rowY.set(g + "|" + r.role + "|" + r.rank + "|" + r.tag, ry);
      lanes += '<text class="small" x="12" y="' + (ry + ROW - 4) + '">' + esc(r.role + "/" + r.rank + " " + r.tag) + "</text>";
    });
    y += h;
  }
  const H_ALL = y + 4;
  let svg = '<svg xmlns="http://www.w3.org/2000/svg" width="' + W + '" height="' + H_ALL + '">' + lanes;

  // Axis: seconds from the first line.
  const raw = span / 10, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const tick = [1, 2, 5, 10].map((m) => m * mag).find((v) => v >= raw);
  for (let t = Math.ceil((from - t0) / tick) * tick; t0 + t <= to + 1e-9; t += tick) {
    const tx = x(t0 + t);
    svg += '<line class="axis" x1="' + tx + '" y1="' + (AXIS - 6) + '" x2="' + tx + '" y2="' + H_ALL + '"></line>';
    svg += '<text class="small" x="' + (tx + 2) + '" y="' + (AXIS - 8) + '">' + esc(+t.toFixed(6) + " s") + "</text>";
  }
  for (const g of groups) svg += '<text class="lane" x="4" y="' + (groupY.get(g) + 13) + '">' + esc("group " + g) + "</text>";

  for (const p of ph) {
    const px = x(p.start), pw = Math.max(1, x(p.end) - px), py = groupY.get(p.group);
    const hue = p.phase.startsWith("TRAIN") ? 212 : p.phase.startsWith("ROLLOUT") ? 135 : p.phase.startsWith("SYNC") ? 0 : 28;
    const what = p.merged > 1 ? p.merged + " phase transitions" + (p.phase ? " (all " + p.phase + ")" : "") : "entering " + p.phase;
    svg += '<rect class="phase" data-group="' + esc(p.group) + '" data-phase="' + esc(p.phase) + '" data-start="' + p.start +
      '" data-end="' + p.end + '" data-commands="' + p.commands + '" data-failed="' + (p.failed ? 1 : 0) + '" data-merged="' + p.merged +
      '" x="' + px + '" y="' + py + '" width="' + pw + '" height="' + PHASE_ROW + '" fill="' + (p.phase ? 'hsl(' + hue + ',45%,85%)' : "#ddd") +
      '"><title>' + esc("group " + p.group + ": " + what + "\n" + clock(p.start) + " → " + clock(p.end) + " (" + dur(p.end - p.start) + ")\n" +
        (p.merged > 1 ? "" : p.steps.length + " steps, ") + p.commands + " commands" + (p.failed ? "\nFAILED" : "")) + "</title></rect>";
    if (pw > 8 * p.phase.length) svg += '<text x="' + (px + 3) + '" y="' + (py + 13) + '" pointer-events="none">' + esc(p.phase) + "</text>";
    if (p.merged === 1) svg += '<line class="phase-line" x1="' + px + '" y1="' + laneTop + '" x2="' + px + '" y2="' + H_ALL + '"></line>';
  }
  st.forEach((s, i) => {
    const sx = x(s.start), sw = Math.max(1, x(s.end) - sx), sy = groupY.get(s.group) + PHASE_ROW + 1;
    const cmds = s.lines.slice(0, 12).map((l) => l.role + "/" + l.rank + " " + l.command + (l.version !== null ? " v" + l.version : "") +
      (l.tag ? " " + l.tag + " " + human(l.bytes) : "") + " " + dur(l.duration) + " " + l.outcome + (l.message ? " (" + l.message + ")" : ""));
    if (s.lines.length > 12) cmds.push("... " + (s.lines.length - 12) + " more");
    svg += '<rect class="step" data-group="' + esc(s.group) + '" data-phase="' + esc(s.phase) + '" data-step="' + s.step + '" data-stage="' +
      esc(s.stage) + '" data-start="' + s.start + '" data-end="' + s.end + '" data-failed="' + (s.failed ? 1 : 0) + '" x="' + sx + '" y="' + sy +
      '" width="' + sw + '" height="' + STEP_ROW + '" fill="' + (i % 2 ? "#777" : "#aaa") + '"><title>' +
      esc(s.phase + " step " + s.step + ": " + s.stage + " (" + dur(s.end - s.start) + ")\n" + cmds.join("\n")) + "</title></rect>";
  });
  for (const b of bars) {
    const bx = x(b.start), bw = Math.max(1, x(b.end) - bx), by = rowY.get(b.gpu + "|" + b.role + "|" + b.rank + "|" + b.tag);
    const share = b.merged > 1 ? Math.min(1, b.held / Math.max(b.end - b.start, 1e-9)) : 1;
    const tip = b.role + "/" + b.rank + " " + b.tag + " on GPU " + b.gpu + " (group " + b.group + ")\n" + human(b.bytes) +
      (b.merged > 1 ? " (largest of " + b.merged + " holds, held " + Math.round(share * 100) + "% of this span)" : "") + "\n" + clock(b.start) + " → " +
      (b.open ? "end of log, still held" : clock(b.end)) + " (" + dur(b.end - b.start) + ")" +
      (b.leak ? "\nLEAK on release: " + b.note : "");
    svg += '<rect class="bar" data-gpu="' + b.gpu + '" data-group="' + esc(b.group) + '" data-role="' + esc(b.role) + '" data-rank="' + b.rank +
      '" data-tag="' + esc(b.tag) + '" data-bytes="' + b.bytes + '" data-start="' + b.start + '" data-end="' + b.end + '" data-leak="' +
      (b.leak ? 1 : 0) + '" data-open="' + (b.open ? 1 : 0) + '" data-merged="' + b.merged + '" x="' + bx + '" y="' + (by + 1) +
      '" width="' + bw + '" height="' + (ROW - 2) + '" fill="' + colour(b.role, b.tag) + '" fill-opacity="' + Math.max(0.2, share).toFixed(2) +
      '"><title>' + esc(tip) + "</title></rect>";
  }
  for (const l of lk) {
    const ly = rowY.get(l.gpu + "|" + l.role + "|" + l.rank + "|" + l.tag);
    svg += '<rect class="leak" data-gpu="' + l.gpu + '" data-ts="' + l.ts + '" data-role="' + esc(l.role) + '" data-rank="' + l.rank +
      '" data-tag="' + esc(l.tag) + '" x="' + (x(l.ts) - 3) + '" y="' + (ly === undefined ? laneTop : ly) + '" width="6" height="' + ROW +
      '"><title>' + esc("LEAK at " + clock(l.ts) + ": " + l.role + "/" + l.rank + " released " + l.tag + " but the device's used memory did not fall\n" + l.note) +
      "</title></rect>";
  }
  for (const f of ft) {
    svg += '<rect class="fault" data-group="' + esc(f.group) + '" data-ts="' + f.start + '" data-outcome="' + esc(f.outcome) + '" x="' + (x(f.start) - 2) +
      '" y="' + groupY.get(f.group) + '" width="4" height="' + (PHASE_ROW + STEP_ROW) + '"><title>' +
      esc(f.outcome.toUpperCase() + " " + f.role + "/" + f.rank + " " + f.command + " in " + f.phase + " at " + clock(f.start) + (f.message ? ": " + f.message : "")) +
      "</title></rect>";
  }
  document.getElementById("chart").innerHTML = svg + "</svg>";
  document.getElementById("from").value = +(from - t0).toFixed(6);
  document.getElementById("to").value = +(to - t0).toFixed(6);
  for (const el of document.querySelectorAll("rect.phase")) {
    el.addEventListener("click", () => {
      const a = Number(el.dataset.start), b = Number(el.dataset.end), pad = Math.max((b - a) * 0.05, 1e-3);
      draw(a - pad, b + pad);
    });
  }
}

// ---- page ------------------------------------------------------------------
document.title = "tandem timeline: " + D.run_dir;
document.querySelector("h1").textContent = "tandem timeline: " + D.run_dir;
document.getElementById("summary").textContent = R.length + " residency lines, " + H.length + " handoff lines, " +
  phases.length + " phase transitions, " + gpuIds.length + " GPUs, " + holds.leaks.length + " leaks; " + clock(t0) + " → " +
  clock(tEnd) + " (" + dur(tEnd - t0) + ")";
document.getElementById("legend").innerHTML = roleOrder.flatMap((role) => TAGS.filter((t) => R.some((r) => r.role === role && r.tag === t))
  .map((t) => '<span><i style="background:' + colour(role, t) + '"></i>' + esc(role + " " + t) + "</span>")).join("") +
  '<span><i style="background:#d00"></i>leak / failed command</span>';
let view = [t0, tEnd];
document.getElementById("apply").addEventListener("click", () => {
  const a = t0 + Number(document.getElementById("from").value), b = t0 + Number(document.getElementById("to").value);
  if (b > a) draw(a, b);
});
document.getElementById("all").addEventListener("click", () => draw(t0, tEnd));
document.getElementById("zoom").addEventListener("change", () => draw(view[0], view[1]));
draw(t0, tEnd);
</script>
</body>
</html>
)TANDEM";

}  // namespace tandem::report
