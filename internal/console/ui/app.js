// The airlock web console: plain JavaScript, no library, no build step.
//
// Everything it shows comes from the API with the signed-in key, and much
// of it was written by sandboxed code or by tenants (output, file names,
// error names, session metadata): it is hostile. Text goes into the page
// with textContent only (never innerHTML: the page's Content-Security-Policy
// requires Trusted Types, so an innerHTML assignment would throw); images
// are data: URLs of the image types only; HTML and SVG are shown in an
// iframe sandboxed without scripts and without the console's origin. The
// API key lives in this tab's sessionStorage and travels in the
// Authorization header, never in a URL or a cookie.
"use strict";

const KEY = "airlock.key";
const $main = document.getElementById("main");
let timers = [];
let who = null; // GET /v1/whoami

// The one policy that may make HTML: the srcdoc of a sandboxed iframe.
const srcdocPolicy = window.trustedTypes
  ? window.trustedTypes.createPolicy("airlock-srcdoc", { createHTML: (s) => s })
  : { createHTML: (s) => s };

// h builds an element: attrs are set as attributes (never as HTML), and
// children are nodes or text.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); }

function stopTimers() { timers.forEach(clearInterval); timers = []; }

function every(ms, fn) { fn(); timers.push(setInterval(fn, ms)); }

function flash(text) {
  const box = document.getElementById("status");
  const m = h("div", { class: "msg" }, text);
  box.append(m);
  setTimeout(() => m.remove(), 8000);
}

// api calls the API with the key; it returns the response, whose status
// the caller checks (a 401 sends the tab back to sign in).
async function api(method, path, opts) {
  const headers = Object.assign({ Accept: "application/json" }, (opts && opts.headers) || {});
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = "Bearer " + key;
  const init = { method, headers, cache: "no-store", credentials: "omit", redirect: "error", referrerPolicy: "no-referrer" };
  if (opts && opts.body !== undefined) {
    init.body = JSON.stringify(opts.body);
    headers["Content-Type"] = "application/json";
  }
  const resp = await fetch(path, init);
  if (resp.status === 401) {
    signOut("The key was refused: sign in again.");
    throw new Error("unauthorized");
  }
  return resp;
}

async function apiJSON(method, path, opts) {
  const resp = await api(method, path, opts);
  if (!resp.ok) throw new Error(await errorText(resp));
  return resp.status === 204 ? null : resp.json();
}

async function errorText(resp) {
  try {
    const b = await resp.json();
    return (b.error && b.error.message) || resp.status + " " + resp.statusText;
  } catch (e) {
    return resp.status + " " + resp.statusText;
  }
}

// download fetches path with the key and saves it as name. The blob is
// application/octet-stream, so that the browser saves it and never
// renders it in the console's origin.
async function download(path, name) {
  const resp = await api("GET", path, { headers: { Accept: "*/*" } });
  if (!resp.ok) { flash(await errorText(resp)); return; }
  const data = await resp.arrayBuffer();
  const url = URL.createObjectURL(new Blob([data], { type: "application/octet-stream" }));
  const a = h("a", { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function pathOf(id) { return "/v1/sessions/" + encodeURIComponent(id); }

// ---- formatting ----

function ago(t) {
  const s = Math.max(0, (Date.now() - Date.parse(t)) / 1000);
  if (s < 60) return Math.floor(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  return Math.floor(s / 86400) + "d";
}

function bytes(n) {
  if (n === undefined || n === null) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function msText(ms) {
  if (ms === undefined || ms === null) return "";
  return ms < 1000 ? ms.toFixed(1) + " ms" : (ms / 1000).toFixed(2) + " s";
}

// one line of text that sandboxed code chose: control characters shown,
// not obeyed by anything.
function oneLine(s, max) {
  s = String(s || "").replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0"));
  return max && s.length > max ? s.slice(0, max) + "…" : s;
}

function stateBadge(state) { return h("span", { class: "state state-" + state }, state); }

// ---- sign in ----

function signOut(why) {
  sessionStorage.removeItem(KEY);
  who = null;
  showSignIn(why);
}

function showSignIn(why) {
  stopTimers();
  document.getElementById("nav").hidden = true;
  document.getElementById("signout").hidden = true;
  document.getElementById("who").textContent = "";
  clear($main);
  const input = h("input", { type: "password", id: "key", autocomplete: "off", placeholder: "alk_…", spellcheck: "false" });
  const err = h("p", { class: "error", id: "signin-error" }, why || "");
  const form = h("form", { class: "signin", id: "signin", onsubmit: async (ev) => {
    ev.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY, key);
    input.value = "";
    try {
      await start();
    } catch (e) {
      err.textContent = e.message;
    }
  } },
  h("h1", {}, "Sign in"),
  h("p", { class: "muted" }, "Paste an API key (airlock keys create). It is kept in this tab only, and sent to this server in the Authorization header."),
  input, h("button", { type: "submit" }, "Sign in"), err);
  $main.append(form);
  input.focus();
}

// start asks who the key is (none: a server without authentication may
// answer anyway) and shows the page the location names.
async function start() {
  const hadKey = !!sessionStorage.getItem(KEY);
  const resp = await fetch("/v1/whoami", { headers: authHeaders(), cache: "no-store", credentials: "omit" });
  if (resp.status === 401) {
    sessionStorage.removeItem(KEY);
    showSignIn(hadKey ? "That key was refused." : "");
    return;
  }
  if (!resp.ok) throw new Error(await errorText(resp));
  who = await resp.json();
  document.getElementById("nav").hidden = false;
  document.getElementById("signout").hidden = !sessionStorage.getItem(KEY);
  document.getElementById("who").textContent = who.admin ? (who.tenant ? "admin (" + oneLine(who.tenant, 40) + ")" : "admin") : "tenant " + oneLine(who.tenant, 40);
  route();
}

function authHeaders() {
  const key = sessionStorage.getItem(KEY);
  return key ? { Authorization: "Bearer " + key } : {};
}

// ---- routing ----

function route() {
  stopTimers();
  if (!who) return;
  clear($main);
  const hash = location.hash || "#/sessions";
  const [, page, arg] = hash.match(/^#\/([a-z]+)\/?(.*)$/) || [null, "sessions", ""];
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === page || (page === "session" && a.dataset.page === "sessions"));
  switch (page) {
    case "session": return sessionPage(decodeURIComponent(arg));
    case "audit": return auditPage();
    case "metrics": return metricsPage();
    default: return sessionsPage();
  }
}

// ---- sessions ----

function sessionsPage() {
  const filter = { text: "", language: "", state: "" };
  const body = h("tbody", { id: "sessions-body" });
  const count = h("span", { class: "muted", id: "sessions-count" });
  const input = (k) => (ev) => { filter[k] = ev.target.value; draw(); };
  $main.append(
    h("h1", {}, "Sessions"),
    h("div", { class: "filters" },
      h("input", { type: "search", placeholder: "id, tenant or code", oninput: input("text"), id: "filter-text" }),
      h("select", { onchange: input("language"), id: "filter-language" }, h("option", { value: "" }, "any language"), ...["python", "bash", "javascript"].map((l) => h("option", { value: l }, l))),
      h("select", { onchange: input("state"), id: "filter-state" }, h("option", { value: "" }, "any state"), ...["idle", "busy"].map((l) => h("option", { value: l }, l))),
      count),
    h("table", { id: "sessions" },
      h("thead", {}, h("tr", {}, ...["Session", "Tenant", "Language", "State", "Age", "Idle", "Memory", "CPU", "Running now", "Egress", ""].map((t) => h("th", {}, t)))),
      body));
  let list = [];
  function draw() {
    clear(body);
    const t = filter.text.toLowerCase();
    const shown = list.filter((s) => (!filter.language || s.language === filter.language) && (!filter.state || s.state === filter.state) &&
      (!t || [s.id, s.tenant, s.current && s.current.code_head].some((x) => x && x.toLowerCase().includes(t))));
    count.textContent = shown.length + " of " + list.length;
    for (const s of shown) body.append(sessionRow(s, refresh));
    if (!shown.length) body.append(h("tr", {}, h("td", { colspan: 11, class: "muted" }, list.length ? "No session matches." : "No live sessions.")));
  }
  async function refresh() {
    try {
      list = (await apiJSON("GET", "/v1/sessions")).sessions;
      draw();
    } catch (e) { if (e.message !== "unauthorized") flash(e.message); }
  }
  every(2000, refresh);
}

function sessionRow(s, refresh) {
  const mem = s.usage ? bytes(s.usage.memory_bytes) + " / " + bytes(s.limits.memory) : "";
  const cpu = s.usage ? s.usage.cpu_percent.toFixed(0) + " %" : "";
  const cur = s.current ? h("span", {}, h("b", {}, s.current.id), " ", h("code", {}, oneLine(s.current.code_head, 60)), " ", h("span", { class: "muted" }, ago(s.current.started_at))) : "";
  const eg = s.network ? s.network.connections + " conn, " + s.network.denied + " denied" : "none";
  return h("tr", { "data-session": s.id },
    h("td", {}, h("a", { href: "#/session/" + encodeURIComponent(s.id), class: "mono" }, oneLine(s.id, 40)),
      s.pod ? h("div", { class: "muted pod", title: "the server it lives on" }, oneLine(s.pod, 40)) : ""),
    h("td", {}, oneLine(s.tenant || "—", 40)),
    h("td", {}, s.language + (s.template ? " · " + oneLine(s.template, 30) : "")),
    h("td", {}, stateBadge(s.state)),
    h("td", { class: "num" }, ago(s.created_at)),
    h("td", { class: "num" }, s.state === "busy" ? "—" : ago(s.last_used_at)),
    h("td", { class: "num" }, mem),
    h("td", { class: "num" }, cpu),
    h("td", {}, cur),
    h("td", {}, eg),
    h("td", {}, actions(s.id, refresh)));
}

function actions(id, after) {
  return h("span", { class: "actions" },
    h("button", { type: "button", class: "interrupt", onclick: async () => {
      try { const r = await apiJSON("POST", pathOf(id) + "/interrupt"); flash(r.interrupted ? "Interrupted." : "Nothing was running."); } catch (e) { flash(e.message); }
      after && after();
    } }, "Interrupt"),
    " ",
    h("button", { type: "button", class: "danger end", onclick: async () => {
      if (!confirm("End session " + oneLine(id, 40) + "? Its state is lost.")) return;
      try { await apiJSON("DELETE", pathOf(id)); flash("Session ended."); } catch (e) { flash(e.message); }
      after && after();
    } }, "End"));
}

// ---- one session ----

function sessionPage(id) {
  const facts = h("div", { class: "facts", id: "facts" });
  const cells = h("div", { id: "cells" });
  const files = h("div", { id: "files", hidden: true });
  const egress = h("div", { id: "egress", hidden: true });
  const panes = { Notebook: cells, Files: files, Egress: egress };
  const tabs = h("div", { class: "tabs" }, ...Object.keys(panes).map((name) => h("button", { type: "button", class: name === "Notebook" ? "active" : "", "data-tab": name, onclick: (ev) => {
    for (const b of tabs.children) b.classList.toggle("active", b === ev.target);
    for (const [n, p] of Object.entries(panes)) p.hidden = n !== name;
    if (name === "Files") showFiles(id, files, "");
    if (name === "Egress") showEgress(id, egress, state.entries);
  } }, name)));
  $main.append(
    h("h1", {}, "Session ", h("span", { class: "mono" }, oneLine(id, 64))),
    h("div", { class: "toolbar" }, actions(id, () => {}),
      h("button", { type: "button", id: "notebook", onclick: () => download(pathOf(id) + "/notebook", "airlock-" + id.replace(/[^A-Za-z0-9._-]/g, "_") + ".ipynb") }, "Download notebook")),
    facts, tabs, cells, files, egress);
  // state: the entries held (by seq), the ETag of the last answer.
  const state = { entries: new Map(), etag: "", after: 0, info: null };
  async function refresh() {
    try {
      const resp = await api("GET", pathOf(id) + "/history?after=" + state.after, { headers: state.etag ? { "If-None-Match": state.etag } : {} });
      if (resp.status === 304) return;
      if (!resp.ok) { facts.replaceChildren(h("span", { class: "error" }, await errorText(resp))); return; }
      state.etag = resp.headers.get("ETag") || "";
      const hist = await resp.json();
      for (const e of hist.entries) {
        state.entries.set(e.seq, e);
        drawCell(cells, e);
      }
      // The next poll asks from the first entry still running.
      let after = state.after;
      for (const e of [...state.entries.values()].sort((a, b) => a.seq - b.seq)) {
        if (e.running) break;
        after = e.seq;
      }
      if (after !== state.after) { state.after = after; state.etag = ""; }
      drawFacts(facts, hist, state.info);
      if (!egress.hidden) showEgress(id, egress, state.entries);
    } catch (e) { if (e.message !== "unauthorized") flash(e.message); }
  }
  async function refreshInfo() {
    try {
      const resp = await api("GET", pathOf(id));
      state.info = resp.ok ? await resp.json() : null;
    } catch (e) { state.info = null; }
  }
  every(3000, refreshInfo);
  every(1000, refresh);
}

function drawFacts(el, hist, info) {
  const f = (k, v) => h("span", {}, k + " ", h("b", {}, v));
  const items = [f("state", hist.state), f("language", hist.language)];
  if (hist.tenant) items.push(f("tenant", oneLine(hist.tenant, 40)));
  if (hist.end_reason) items.push(f("ended", oneLine(hist.end_reason, 120)));
  if (info && info.usage) {
    items.push(f("memory", bytes(info.usage.memory_bytes) + " / " + bytes(info.limits.memory)));
    items.push(f("CPU", info.usage.cpu_percent.toFixed(0) + " %"));
  }
  items.push(f("history", bytes(hist.bytes)));
  if (hist.forgotten) items.push(f("forgotten", hist.forgotten));
  el.replaceChildren(...items);
}

// drawCell draws (or redraws) one entry as a notebook cell.
function drawCell(container, e) {
  const cell = h("div", { class: "cell" + (e.running ? " running" : ""), id: "cell-" + e.seq, "data-id": e.id, "data-kind": e.kind });
  const body = h("div", { class: "body" });
  if (e.kind === "command") {
    const c = e.command || {};
    cell.append(h("div", { class: "prompt" }, "$ " + oneLine(e.id, 8)));
    body.append(h("pre", { class: "code" }, e.code));
    if (c.stdout) body.append(h("pre", { class: "out stdout" }, c.stdout));
    if (c.stderr) body.append(h("pre", { class: "out stderr" }, c.stderr));
    const meta = [c.state === "running" ? "running" : "exit " + c.exit_code, msText(c.duration_ms)];
    if (c.signal) meta.push(c.signal);
    body.append(h("div", { class: "meta" }, meta.join(" · "), c.killed ? h("span", { class: "kill" }, " killed: " + (c.kill_reason || "signal")) : ""));
  } else {
    const r = e.result || {};
    cell.append(h("div", { class: "prompt" }, e.running ? "[*]" : "[" + (r.execution_count || " ") + "]"));
    body.append(h("pre", { class: "code" }, e.code));
    if (r.stdout) body.append(h("pre", { class: "out stdout" }, r.stdout));
    if (r.stderr) body.append(h("pre", { class: "out stderr" }, r.stderr));
    for (const o of r.results || []) body.append(richOutput(o));
    if (r.error) body.append(h("pre", { class: "out err" }, h("b", {}, oneLine(r.error.name, 200) + ": "), r.error.value, (r.error.traceback || []).length ? "\n" + r.error.traceback.join("\n") : ""));
    const meta = [];
    if (e.running) meta.push("running " + ago(e.started_at));
    else meta.push(msText(r.duration_ms), "CPU " + msText(r.cpu_ms));
    if (r.files_changed && r.files_changed.length) meta.push(r.files_changed.length + " files changed");
    if (r.egress && r.egress.length) meta.push(r.egress.length + " egress decisions");
    if (r.stdout_truncated || r.stderr_truncated) meta.push("output truncated");
    if (e.trimmed) meta.push("output dropped from the history (too large)");
    body.append(h("div", { class: "meta" }, meta.join(" · "),
      r.killed ? h("span", { class: "kill" }, " killed: " + (r.kill_reason || "interrupted")) : "",
      r.session_ended ? h("span", { class: "kill" }, " session ended: " + oneLine(r.end_reason, 200)) : "",
      e.running ? h("span", { class: "badge" }, "live") : ""));
  }
  cell.append(body);
  const old = document.getElementById("cell-" + e.seq);
  if (old) old.replaceWith(cell);
  else container.append(cell);
}

const imageTypes = ["image/png", "image/jpeg", "image/gif", "image/webp"];
const base64 = /^[A-Za-z0-9+/=\s]*$/;

// richOutput shows the richest part of a MIME bundle that is safe: an
// image as a data: URL of its own type, HTML or SVG in a sandboxed iframe
// (no scripts, an opaque origin), JSON and text as text.
function richOutput(o) {
  const d = o.data || {};
  for (const t of imageTypes) {
    if (typeof d[t] === "string" && base64.test(d[t])) {
      return h("img", { class: "rich", alt: t, src: "data:" + t + ";base64," + d[t].replace(/\s/g, "") });
    }
  }
  for (const t of ["text/html", "image/svg+xml"]) {
    const v = d[t];
    if (typeof v === "string" || Array.isArray(v)) {
      const frame = h("iframe", { class: "rich", sandbox: "", referrerpolicy: "no-referrer", title: t + " output (sandboxed)", "data-mime": t });
      frame.srcdoc = srcdocPolicy.createHTML(Array.isArray(v) ? v.join("") : v);
      return h("div", {}, frame, h("div", { class: "richnote" }, t + ", shown sandboxed: no scripts run"));
    }
  }
  if (d["application/json"] !== undefined) return h("pre", { class: "out" }, JSON.stringify(d["application/json"], null, 2));
  for (const t of ["text/markdown", "text/latex", "text/plain"]) {
    if (typeof d[t] === "string") return h("pre", { class: "out" }, d[t]);
  }
  return h("pre", { class: "out muted" }, "(output of types " + Object.keys(d).map((k) => oneLine(k, 60)).join(", ") + ")");
}

async function showFiles(id, el, dir) {
  clear(el);
  let list;
  try {
    list = await apiJSON("GET", pathOf(id) + "/files?path=" + encodeURIComponent(dir));
  } catch (e) { el.append(h("p", { class: "error" }, e.message)); return; }
  const rows = list.entries.map((f) => {
    const name = f.path.split("/").pop();
    const link = f.type === "dir"
      ? h("a", { href: "#", class: "dir", onclick: (ev) => { ev.preventDefault(); showFiles(id, el, f.path); } }, oneLine(name, 200) + "/")
      : f.type === "file"
        ? h("a", { href: "#", class: "file", onclick: (ev) => { ev.preventDefault(); download(pathOf(id) + "/files/" + f.path.split("/").map(encodeURIComponent).join("/"), name); } }, oneLine(name, 200))
        : h("span", {}, oneLine(name, 200));
    return h("tr", {}, h("td", {}, link), h("td", {}, f.type), h("td", { class: "num" }, f.type === "file" ? bytes(f.size) : ""), h("td", { class: "mono" }, f.mode), h("td", {}, ago(f.mtime) + " ago"));
  });
  const up = dir ? h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); showFiles(id, el, dir.split("/").slice(0, -1).join("/")); } }, "↑ up") : "";
  el.append(h("p", {}, h("span", { class: "mono" }, "/workspace/" + oneLine(dir, 200)), " ", up, list.truncated ? h("span", { class: "muted" }, " (listing truncated)") : ""),
    h("table", { id: "files-table" }, h("thead", {}, h("tr", {}, ...["Name", "Type", "Size", "Mode", "Modified"].map((t) => h("th", {}, t)))), h("tbody", {}, rows)));
}

function showEgress(id, el, entries) {
  const rows = [];
  for (const e of [...entries.values()].sort((a, b) => a.seq - b.seq)) {
    for (const d of (e.result && e.result.egress) || []) {
      rows.push(h("tr", {}, h("td", {}, e.id), h("td", {}, d.kind || ""), h("td", { class: "mono" }, oneLine(d.host, 120) + (d.port ? ":" + d.port : "")),
        h("td", { class: d.allowed ? "allowed" : "denied" }, d.allowed ? "allowed" : "denied"), h("td", {}, oneLine(d.reason || "", 200)), h("td", { class: "num" }, d.count || 1),
        h("td", { class: "num" }, d.bytes_up || d.bytes_down ? bytes(d.bytes_up || 0) + " ↑ " + bytes(d.bytes_down || 0) + " ↓" : "")));
    }
  }
  el.replaceChildren(h("table", { id: "egress-table" }, h("thead", {}, h("tr", {}, ...["Execution", "Kind", "Destination", "Decision", "Why", "Count", "Bytes"].map((t) => h("th", {}, t)))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 7, class: "muted" }, "No egress decisions in the history.")))));
}

// ---- audit ----

function auditPage() {
  const q = { since: "1h", until: "", session: "", tenant: "", kind: "", limit: "100" };
  const body = h("tbody", { id: "audit-body" });
  const more = h("button", { type: "button", hidden: true, id: "audit-more" }, "More");
  let cursor = "";
  const field = (k, ph) => h("input", { placeholder: ph, value: q[k], oninput: (ev) => { q[k] = ev.target.value; }, "data-field": k, size: 12 });
  const form = h("form", { class: "filters", id: "audit-form", onsubmit: (ev) => { ev.preventDefault(); cursor = ""; clear(body); load(); } },
    field("since", "since (1h, RFC 3339)"), field("until", "until"), field("session", "session"), field("tenant", "tenant"), field("kind", "kind"),
    h("button", { type: "submit" }, "Search"));
  more.onclick = () => load();
  $main.append(h("h1", {}, "Audit log"), form,
    h("table", { id: "audit" }, h("thead", {}, h("tr", {}, ...["Time", "Kind", "Tenant", "Session", "Id", "Outcome", "Duration", "Detail"].map((t) => h("th", {}, t)))), body), more);
  async function load() {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(q)) if (v) p.set(k, v);
    if (cursor) p.set("cursor", cursor);
    try {
      const l = await apiJSON("GET", "/v1/audit?" + p);
      for (const r of l.records) {
        const detail = [r.error && "error " + oneLine(r.error, 80), r.kill_reason && "killed " + r.kill_reason, r.end_reason && "ended: " + oneLine(r.end_reason, 80),
          r.path && "path " + oneLine(r.path, 120), r.reason && "reason " + r.reason, r.count && "×" + r.count, r.code && "code " + oneLine(r.code, 80),
          r.code_sha256 && "sha256 " + r.code_sha256.slice(0, 12)].filter(Boolean).join(" · ");
        body.append(h("tr", {}, h("td", {}, new Date(r.time).toLocaleString()), h("td", {}, r.kind), h("td", {}, oneLine(r.tenant || "", 40)),
          h("td", { class: "mono" }, r.session ? h("a", { href: "#/session/" + encodeURIComponent(r.session) }, oneLine(r.session, 40)) : ""),
          h("td", {}, oneLine(r.id || "", 20)), h("td", {}, r.outcome || ""), h("td", { class: "num" }, r.duration_ms ? msText(r.duration_ms) : ""), h("td", {}, detail)));
      }
      cursor = l.next_cursor || "";
      more.hidden = !cursor;
      if (!body.children.length) body.append(h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No records.")));
    } catch (e) { if (e.message !== "unauthorized") flash(e.message); }
  }
  load();
}

// ---- metrics ----

// parseMetrics reads Prometheus' text format: name{labels} value lines.
function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[3] || "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

function sum(ms, name, pred) { return ms.filter((m) => m.name === name && (!pred || pred(m.labels))).reduce((a, m) => a + m.value, 0); }

// quantile of a histogram's bucket deltas (le -> count), linear within a bucket.
function quantile(buckets, q) {
  const les = [...buckets.keys()].sort((a, b) => a - b);
  const total = buckets.get(Infinity) || 0;
  if (!total) return null;
  let prevLe = 0, prevCount = 0;
  for (const le of les) {
    const c = buckets.get(le);
    if (c >= q * total) {
      if (le === Infinity) return prevLe;
      return prevLe + (le - prevLe) * ((q * total - prevCount) / Math.max(c - prevCount, 1e-9));
    }
    prevLe = le; prevCount = c;
  }
  return prevLe;
}

function metricsPage() {
  $main.append(h("h1", {}, "Metrics"));
  if (!who.admin) { $main.append(h("p", { class: "muted" }, "The server's metrics are for admin keys.")); return; }
  const note = h("p", { class: "muted", id: "metrics-note" }, "Sampling /metrics every 5 s while this page is open.");
  const charts = {
    rate: chart("Executions per minute", ["executions/min"]),
    latency: chart("Execution latency (ms)", ["p50", "p95", "p99"]),
    pool: chart("Warm pool fill (%)", ["ready / target"]),
    alive: chart("Sandboxes alive", ["sessions", "warm in pools"]),
  };
  $main.append(note, h("div", { class: "charts" }, ...Object.values(charts).map((c) => c.el)));
  let prev = null;
  const series = { rate: [[]], latency: [[], [], []], pool: [[]], alive: [[], []] };
  async function sample() {
    let text;
    try {
      const resp = await api("GET", "/metrics", { headers: { Accept: "text/plain" } });
      if (!resp.ok) { note.textContent = "No metrics here: " + (await errorText(resp)) + " (metrics.enabled, or metrics.listen serves them elsewhere)."; return; }
      text = await resp.text();
    } catch (e) { return; }
    const ms = parseMetrics(text);
    const now = Date.now();
    const execs = sum(ms, "airlock_executions_total");
    const buckets = new Map();
    for (const m of ms.filter((m) => m.name === "airlock_execution_duration_seconds_bucket")) {
      const le = m.labels.le === "+Inf" ? Infinity : Number(m.labels.le);
      buckets.set(le, (buckets.get(le) || 0) + m.value);
    }
    const cur = { t: now, execs, buckets };
    if (prev) {
      const dt = (now - prev.t) / 60000;
      push(series.rate[0], now, (execs - prev.execs) / dt);
      const delta = new Map([...buckets].map(([le, c]) => [le, c - (prev.buckets.get(le) || 0)]));
      [0.5, 0.95, 0.99].forEach((q, i) => { const v = quantile(delta, q); push(series.latency[i], now, v === null ? null : v * 1000); });
    }
    const target = sum(ms, "airlock_pool_target"), ready = sum(ms, "airlock_pool_ready");
    push(series.pool[0], now, target ? (100 * ready) / target : null);
    push(series.alive[0], now, sum(ms, "airlock_sessions_active"));
    push(series.alive[1], now, ready);
    prev = cur;
    for (const [k, c] of Object.entries(charts)) c.draw(series[k]);
  }
  every(5000, sample);
}

function push(s, t, v) { s.push([t, v]); if (s.length > 360) s.shift(); }

const palette = ["#1f4e79", "#d1495b", "#edae49", "#00798c"];
const svgNS = "http://www.w3.org/2000/svg";
function svg(tag, attrs) { const el = document.createElementNS(svgNS, tag); for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v)); return el; }

// chart is a line chart drawn as inline SVG.
function chart(title, names) {
  const plot = svg("svg", { viewBox: "0 0 400 180", preserveAspectRatio: "none", role: "img", "aria-label": title });
  const last = h("span", { class: "muted" });
  const swatches = names.map((n, i) => { const s = h("span", {}, "■ "); s.style.color = palette[i]; return h("span", {}, s, n); });
  const el = h("div", { class: "chart", "data-chart": title }, h("b", {}, title), " ", last, plot, h("div", { class: "legend" }, ...swatches));
  function draw(lines) {
    clear(plot);
    const pts = lines.flat().filter((p) => p[1] !== null && Number.isFinite(p[1]));
    plot.append(svg("line", { x1: 30, y1: 160, x2: 400, y2: 160, class: "axis" }));
    if (!pts.length) { last.textContent = "(no data yet)"; return; }
    const t0 = Math.min(...pts.map((p) => p[0])), t1 = Math.max(...pts.map((p) => p[0]), t0 + 1);
    const top = Math.max(...pts.map((p) => p[1]), 1e-9) * 1.1;
    const x = (t) => 30 + ((t - t0) / (t1 - t0)) * 365, y = (v) => 160 - (v / top) * 150;
    const lbl = svg("text", { x: 0, y: 14 }); lbl.textContent = top.toPrecision(3); plot.append(lbl);
    const zero = svg("text", { x: 0, y: 160 }); zero.textContent = "0"; plot.append(zero);
    lines.forEach((l, i) => {
      const d = l.filter((p) => p[1] !== null && Number.isFinite(p[1])).map((p, j) => (j ? "L" : "M") + x(p[0]).toFixed(1) + " " + y(p[1]).toFixed(1)).join(" ");
      if (d) plot.append(svg("path", { d, fill: "none", stroke: palette[i], "stroke-width": 1.5, class: "series" }));
    });
    last.textContent = lines.map((l, i) => { const p = l[l.length - 1]; return p && p[1] !== null ? names[i] + " " + p[1].toFixed(1) : ""; }).filter(Boolean).join(", ");
  }
  return { el, draw };
}

// ---- start ----

document.getElementById("signout").addEventListener("click", () => signOut(""));
window.addEventListener("hashchange", route);
start().catch((e) => showSignIn(e.message));
