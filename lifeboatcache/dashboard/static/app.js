// lifeboatcache dashboard: polls /api/stats, draws inline SVG charts, edits the running config.
// No framework, no CDN. Rendering is coalesced into one animation frame per poll so the page
// stays responsive at 10 updates/s (?interval=100); the config form is never re-rendered by polls.
"use strict";

const params = new URLSearchParams(location.search);
const INTERVAL_MS = Math.max(50, Number(params.get("interval")) || 1000);
const WINDOW_S = 10;
const KEEP = 600;
const $ = (sel) => document.querySelector(sel);

// ---------------------------------------------------------------- formatting
function fmtBytes(n) {
  if (n == null || !isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(Math.round(n))) + " " + units[i];
}
const fmtPct = (x) => (x == null || !isFinite(x) ? "–" : (100 * x).toFixed(1) + " %");
const fmtNum = (x) => (x == null ? "–" : Number(x).toLocaleString("en-US"));
function fmtSeconds(s) {
  if (s == null) return "–";
  if (!isFinite(s)) return "> 10 s";
  return s < 1e-3 ? (s * 1e6).toFixed(0) + " µs" : s < 1 ? (s * 1e3).toFixed(1) + " ms" : s.toFixed(2) + " s";
}

// ---------------------------------------------------------------- overview
const points = [];  // {t, lookups, hits, served, staged, used, wasted}
let latest = null;
let frameQueued = false;

function addPoint(t, cache) {
  points.push({ t, lookups: cache.lookup_blocks, hits: cache.lookup_hit_blocks, served: cache.bytes_served,
                staged: cache.staged_bytes, used: cache.staged_used_bytes, wasted: cache.staged_wasted_bytes });
  if (points.length > KEEP) points.splice(0, points.length - KEEP);
}

function windowAt(i) {
  // hit rate and served bytes/s over the WINDOW_S seconds that end at point i
  const end = points[i];
  let j = i;
  while (j > 0 && end.t - points[j - 1].t <= WINDOW_S) j--;
  const start = points[j];
  const dt = end.t - start.t;
  const dl = end.lookups - start.lookups;
  return {
    hitRate: dl > 0 ? (end.hits - start.hits) / dl : null,
    servedRate: dt > 0 ? (end.served - start.served) / dt : null,
  };
}

function drawLine(svg, values, max, which = "path") {
  const w = 600, h = 120;
  const n = values.length;
  let d = "";
  values.forEach((v, i) => {
    if (v == null) return;
    const x = n > 1 ? (i / (n - 1)) * w : w;
    const y = h - 4 - (max > 0 ? (v / max) * (h - 8) : 0);
    d += (d ? "L" : "M") + x.toFixed(1) + "," + y.toFixed(1);
  });
  svg.querySelector(which).setAttribute("d", d);
}

function tierRow(t) {
  const tr = document.createElement("tr");
  const health = t.tier_up ? '<span class="up">up</span>' : `<span class="down">down: ${escapeHtml(t.reason)}</span>`;
  const loading = t.index_loading
    ? ` <span class="muted">(rebuilding index: ${escapeHtml(t.recovery_phase)}, ${fmtNum(t.recovery_listed)} listed)</span>`
    : "";
  tr.innerHTML = `<td>${escapeHtml(t.name)}</td><td>${escapeHtml(t.backend)}</td><td>${health}${loading}</td>
    <td><span class="bar"><span style="width:${Math.min(100, 100 * t.occupancy).toFixed(1)}%"></span></span>
      ${fmtBytes(t.bytes_used)} / ${fmtBytes(t.capacity_bytes)}</td>
    <td>${fmtNum(t.blocks)}</td><td>${t.compression_ratio ? t.compression_ratio.toFixed(2) + "×" : "–"}</td>
    <td>${escapeHtml(t.codec)}${t.codec_layout ? `<br><span class="muted">${escapeHtml(t.codec_layout)}</span>` : ""}</td><td>${escapeHtml(t.policy)}</td><td>${fmtNum(t.hits)}</td>
    <td>${fmtNum(t.evictions)}</td><td>${fmtNum(t.corrupt_blocks)}</td><td>${fmtNum(t.errors)}</td>`;
  tr.dataset.tier = t.name;
  return tr;
}

function renderStaging(st) {
  // what staging moved up, and where each staged byte ended: used, wasted, or still held for its session
  const share = (part) => (st.staged_bytes ? " (" + fmtPct(part / st.staged_bytes) + ")" : "");
  $("#staged-bytes").textContent = fmtBytes(st.staged_bytes);
  $("#staged-used").textContent = fmtBytes(st.used_bytes) + share(st.used_bytes);
  $("#staged-wasted").textContent = fmtBytes(st.wasted_bytes) + share(st.wasted_bytes);
  $("#staged-held").textContent = fmtBytes(st.held_bytes);
  $("#staged-late").textContent = fmtNum(st.late_arrivals);
  const svg = $("#chart-staging");
  const max = Math.max(0, ...points.map((p) => p.staged || 0));
  drawLine(svg, points.map((p) => p.staged ?? null), max, "path.staged");
  drawLine(svg, points.map((p) => p.used ?? null), max, "path.used");
  drawLine(svg, points.map((p) => p.wasted ?? null), max, "path.wasted");
  $("#chart-staging-max").textContent = "max " + fmtBytes(max);
}

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function render() {
  frameQueued = false;
  const s = latest;
  if (!s) return;
  const last = points.length - 1;
  const win = windowAt(last);
  $("#hit-rate-window").textContent = fmtPct(win.hitRate);
  $("#hit-rate").textContent = fmtPct(s.hit_rate_blocks);
  $("#hit-rate-tokens").textContent = s.cache.lookup_tokens ? fmtPct(s.hit_rate_tokens) : "–";
  $("#served-rate").textContent = win.servedRate == null ? "–" : fmtBytes(win.servedRate) + "/s";
  $("#bytes-served").textContent = fmtBytes(s.cache.bytes_served);
  $("#lookups").textContent = fmtNum(s.cache.lookup_blocks);
  $("#get-latency").textContent = fmtSeconds(s.get_p50_s) + " / " + fmtSeconds(s.get_p99_s);
  $("#processes").textContent = s.processes;
  const series = points.map((_, i) => windowAt(i));
  drawLine($("#chart-hit"), series.map((w) => w.hitRate), 1);
  const served = series.map((w) => w.servedRate);
  const maxServed = Math.max(0, ...served.filter((v) => v != null));
  drawLine($("#chart-served"), served, maxServed);
  $("#chart-served-max").textContent = "max " + fmtBytes(maxServed) + "/s";
  renderStaging(s.staging);
  const body = $("#tiers tbody");
  body.replaceChildren(...s.tiers.map(tierRow));
  const events = $("#events");
  events.replaceChildren(...s.events.slice().reverse().map((e) => {
    const li = document.createElement("li");
    li.className = e.level;
    li.textContent = new Date(e.t * 1000).toLocaleTimeString() + "  " + e.message;
    return li;
  }));
}

async function poll() {
  try {
    const r = await fetch("/api/stats", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    latest = await r.json();
    addPoint(latest.t, latest.cache);
    $("#status").textContent = `pid ${latest.pid} · every ${INTERVAL_MS} ms`;
    if (!frameQueued) { frameQueued = true; requestAnimationFrame(render); }
  } catch (err) {
    $("#status").textContent = "disconnected: " + err.message;
  }
  setTimeout(poll, INTERVAL_MS);
}

async function seedHistory() {
  try {
    const r = await fetch("/api/history", { cache: "no-store" });
    const h = await r.json();
    for (const p of h.points) {
      points.push({ t: p.t, lookups: p.lookup_blocks, hits: p.lookup_hit_blocks, served: p.bytes_served,
                    staged: p.staged_bytes, used: p.staged_used_bytes, wasted: p.staged_wasted_bytes });
    }
  } catch (err) { /* charts start empty */ }
}

// ---------------------------------------------------------------- tabs
for (const tab of document.querySelectorAll("button.tab")) {
  tab.addEventListener("click", () => {
    document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t === tab));
    document.querySelectorAll(".panel").forEach((p) => p.classList.toggle("active", p.id === tab.dataset.tab));
  });
}

// ---------------------------------------------------------------- configure
let configData = null;
const NEW_TIER = { name: "", backend: "dram", capacity_gb: 1 };
const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

function field(loc, key, value) {
  const div = document.createElement("div");
  div.className = "field";
  const id = "cfg-" + loc.replace(/[^a-zA-Z0-9]/g, "-");
  const label = document.createElement("label");
  label.htmlFor = id;
  label.textContent = key;
  let input;
  if (typeof value === "boolean") {
    input = document.createElement("input");
    input.type = "checkbox";
    input.checked = value;
    input.dataset.type = "bool";
  } else {
    input = document.createElement("input");
    input.type = "text";
    if (typeof value === "number") { input.dataset.type = "number"; input.inputMode = "decimal"; input.value = String(value); }
    else if (isObject(value) || Array.isArray(value)) { input.dataset.type = "json"; input.value = JSON.stringify(value); }
    else if (value === null) { input.dataset.type = "nullable"; input.value = ""; input.placeholder = "(not set)"; }
    else { input.dataset.type = "string"; input.value = value; }
  }
  input.id = id;
  input.dataset.loc = loc;
  const err = document.createElement("div");
  err.className = "field-error";
  err.dataset.for = loc;
  div.append(label, input, err);
  return div;
}

function group(loc, title, obj, onRemove) {
  const fs = document.createElement("fieldset");
  fs.dataset.loc = loc;
  const legend = document.createElement("legend");
  legend.textContent = title + " ";
  if (onRemove) {
    const rm = document.createElement("button");
    rm.type = "button";
    rm.textContent = "remove";
    rm.className = "remove-tier";
    rm.addEventListener("click", onRemove);
    legend.append(rm);
  }
  const err = document.createElement("div");
  err.className = "field-error";
  err.dataset.for = loc;
  fs.append(legend, err);
  for (const [key, value] of Object.entries(obj)) {
    const sub = loc ? loc + "." + key : key;
    if (key === "tiers" && Array.isArray(value)) {
      value.forEach((tier, i) => fs.append(group(`${sub}.${i}`, `tier ${tier.name || i}`, tier, () => removeTier(i))));
    } else if (isObject(value) && !key.endsWith("_options")) {
      fs.append(group(sub, key, value));
    } else {
      fs.append(field(sub, key, value));
    }
  }
  return fs;
}

function renderForm() {
  const form = $("#config-form");
  form.replaceChildren(group("", "config", configData));
}

function readInput(input) {
  const v = input.value;
  switch (input.dataset.type) {
    case "bool": return input.checked;
    case "number": {
      if (v.trim() === "") return null;
      const n = Number(v);
      return isFinite(n) ? n : v;  // a non-number goes to the server, which names the problem
    }
    case "json": try { return JSON.parse(v); } catch (e) { return v; }
    case "nullable": return v === "" ? null : v;
    default: return v;
  }
}

function collect() {
  const out = structuredClone(configData);
  for (const input of document.querySelectorAll("#config-form input[data-loc]")) {
    const path = input.dataset.loc.split(".");
    let obj = out;
    for (const part of path.slice(0, -1)) obj = obj[part];
    obj[path[path.length - 1]] = readInput(input);
  }
  return out;
}

function removeTier(i) { configData = collect(); configData.tiers.splice(i, 1); renderForm(); }

function clearErrors() {
  document.querySelectorAll("#config-form .field-error").forEach((e) => { e.textContent = ""; });
  document.querySelectorAll("#config-form input.invalid").forEach((e) => e.classList.remove("invalid"));
}

function showErrors(errors) {
  clearErrors();
  const unplaced = [];
  for (const { loc, msg } of errors) {
    let parts = loc ? loc.split(".") : [];
    let placed = false;
    while (!placed) {
      const key = parts.join(".");
      const target = document.querySelector(`#config-form .field-error[data-for="${CSS.escape(key)}"]`);
      if (target) {
        target.textContent += (target.textContent ? "; " : "") + (key === loc ? msg : `${loc}: ${msg}`);
        const input = document.querySelector(`#config-form input[data-loc="${CSS.escape(key)}"]`);
        if (input) input.classList.add("invalid");
        placed = true;
      } else if (!parts.length) {
        break;
      } else {
        parts = parts.slice(0, -1);
      }
    }
    if (!placed) unplaced.push(`${loc}: ${msg}`);
  }
  return unplaced;
}

function result(text, ok) {
  const el = $("#config-result");
  el.textContent = text;
  el.className = "result " + (ok ? "ok" : "bad");
}

async function loadConfig() {
  const r = await fetch("/api/config", { cache: "no-store" });
  const body = await r.json();
  configData = body.config;
  $("#config-pid").textContent = body.pid;
  renderForm();
  if (body.restart_pending.length) {
    result("waiting for a restart (not running yet):\n" + body.restart_pending.map((l) => "  " + l).join("\n"), false);
  }
  return body;
}

async function send(url, withToken) {
  const headers = { "Content-Type": "application/json" };
  if (withToken) headers["X-Lifeboat-Token"] = $("#token").value.trim();
  const r = await fetch(url, { method: "POST", headers, body: JSON.stringify(collect()) });
  let body = {};
  try { body = await r.json(); } catch (e) { /* empty */ }
  return { status: r.status, body };
}

$("#validate").addEventListener("click", async () => {
  const { body } = await send("/api/config/validate", false);
  if (body.ok) { clearErrors(); result("valid", true); return; }
  const rest = showErrors(body.errors || []);
  result(`invalid: ${(body.errors || []).length} problem(s)` + (rest.length ? "\n" + rest.join("\n") : ""), false);
});

$("#apply").addEventListener("click", async () => {
  const { status, body } = await send("/api/config", true);
  if (status === 401 || status === 403) { result(`refused (${status}): ${body.error}`, false); return; }
  if (!body.ok) {
    const rest = showErrors(body.errors || []);
    result(`not applied: ${(body.errors || []).length} problem(s)` + (rest.length ? "\n" + rest.join("\n") : ""), false);
    return;
  }
  clearErrors();
  configData = body.config;
  renderForm();
  const lines = ["applied" + (body.applied.length ? ":" : " (nothing changed)"), ...body.applied.map((l) => "  " + l)];
  if (body.restart.length) lines.push("needs a restart (kept as running):", ...body.restart.map((l) => "  " + l));
  result(lines.join("\n"), true);
});

$("#reload").addEventListener("click", () => { clearErrors(); result("", true); loadConfig(); });
$("#add-tier").addEventListener("click", () => {
  configData = collect();
  configData.tiers.push({ ...NEW_TIER, name: "tier" + configData.tiers.length });
  renderForm();
});

// ---------------------------------------------------------------- start
(function takeToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem("lifeboat-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);  // keep it out of the address bar
  }
  $("#token").value = sessionStorage.getItem("lifeboat-token") || "";
})();
seedHistory().then(poll);
loadConfig();
