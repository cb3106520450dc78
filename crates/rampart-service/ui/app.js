// rampart's dashboard: reads /v1/events (Server-Sent Events, read with
// fetch so the bearer token can go in a header), draws each application's
// panel when the daemon runs it, and charts rates computed from the
// cumulative counters of successive snapshots. No framework, no CDN.
"use strict";

const KEEP = 300;        // chart points (5 min at one snapshot a second)
const ALERTS = 50;       // alert rows

const $ = (id) => document.getElementById(id);
const state = { prev: {}, charts: {}, series: {}, alertKeys: new Set(), reconnect: 1000 };

function si(x, unit = "") {
  if (x === null || x === undefined || !isFinite(x)) return "–";
  const a = Math.abs(x);
  for (const [d, s] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
    if (a >= d) return (x / d).toFixed(a >= 100 * d ? 0 : 1) + " " + s + unit;
  }
  return (a >= 100 || Number.isInteger(x) ? x.toFixed(0) : x.toFixed(1)) + (unit ? " " + unit : "");
}
const int = (n) => (n ?? 0).toLocaleString("en-US");
const time = (t) => (t ? new Date(typeof t === "number" ? t * 1000 : t).toLocaleTimeString() : "–");
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

function rows(table, items, render, attrs = () => ({})) {
  const body = $(table).tBodies[0];
  body.innerHTML = "";
  for (const it of items) {
    const tr = document.createElement("tr");
    for (const [k, v] of Object.entries(attrs(it))) {
      if (k === "class") tr.className = v; else tr.setAttribute(k, v);
    }
    tr.innerHTML = render(it).map((c) => (typeof c === "object" && c !== null ? `<td class="${c.cls}">${c.html}</td>` : `<td>${esc(c)}</td>`)).join("");
    body.appendChild(tr);
  }
}
const num = (v) => ({ cls: "num", html: esc(v) });

// Rate of a cumulative counter between two snapshots (packets/s).
function rate(app, key, value, ts) {
  const p = state.prev[app]?.[key];
  state.prev[app] = state.prev[app] || {};
  state.prev[app][key] = { value, ts };
  if (!p || ts <= p.ts || value < p.value) return null;
  return (value - p.value) / (ts - p.ts);
}

// A percentage with as many decimals as its axis step needs (0.25 %, 12 %).
function pct(v, step) {
  const d = step > 0 && step < 1 ? Math.min(3, Math.ceil(-Math.log10(step))) : 0;
  return v.toFixed(d) + " %";
}

function chart(id, names, colors, unit = "pps") {
  if (state.charts[id]) return state.charts[id];
  const el = $(id);
  // uPlot passes the axis' tick increment as the fifth argument.
  const axis = unit === "%" ? (u, vs, ax, space, incr) => vs.map((v) => pct(v, incr))
                            : (u, vs) => vs.map((v) => si(v));
  const legend = unit === "%" ? (u, v) => (v == null ? "–" : v.toFixed(2) + " %") : (u, v) => si(v, unit);
  const opts = {
    width: Math.max(el.clientWidth, 400), height: 220,
    series: [{}, ...names.map((n, i) => ({ label: n, stroke: colors[i], width: 2, value: legend }))],
    axes: [{ stroke: "#8a96a3", grid: { stroke: "#2a323c" } },
           { stroke: "#8a96a3", grid: { stroke: "#2a323c" }, size: 70, values: axis }],
    scales: { x: { time: true } },
  };
  state.series[id] = [[], ...names.map(() => [])];
  const u = new uPlot(opts, state.series[id], el);
  state.charts[id] = u;
  new ResizeObserver(() => u.setSize({ width: Math.max(el.clientWidth, 400), height: 220 })).observe(el);
  return u;
}

function push(id, ts, values) {
  const d = state.series[id];
  d[0].push(ts);
  values.forEach((v, i) => d[i + 1].push(v));
  if (d[0].length > KEEP) d.forEach((a) => a.shift());
  state.charts[id].setData(d);
}

// --- DDoS -----------------------------------------------------------------
const TRAFFIC = [["nic_dropped", "NIC dropped", "#ff6b6b"], ["xdp_dropped", "XDP dropped", "#fcc419"],
                 ["policed", "policed", "#b197fc"], ["cookies", "SYN cookies", "#4dabf7"], ["passed", "passed", "#51cf66"]];

function ddos(p, ts) {
  $("ddos-where").textContent = `mode ${p.mode ?? ""} · interval ${p.interval_s ?? "?"} s · ${int(p.intervals)} intervals`;
  const st = $("ddos-state");
  st.textContent = p.under_attack ? "under attack" : "no attack";
  st.className = "badge " + (p.under_attack ? "attack" : "calm");
  const total = p.dropped_packets_total ?? 0;
  const t = $("ddos-dropped-total");
  t.textContent = int(total);
  t.dataset.value = String(total);
  $("ddos-blocked-count").textContent = int(p.blocked_count ?? (p.blocked || []).length);
  const tr = p.traffic || {};
  const rates = TRAFFIC.map(([k]) => rate("ddos", k, tr[k]?.packets ?? 0, ts));
  $("ddos-drop-rate").textContent = si([0, 1, 2, 3].reduce((s, i) => s + (rates[i] ?? 0), 0), "pps");
  $("ddos-pass-rate").textContent = si(rates[4], "pps");
  chart("ddos-chart", TRAFFIC.map((x) => x[1]), TRAFFIC.map((x) => x[2]));
  push("ddos-chart", ts, rates);
  rows("ddos-blocked", (p.blocked || []).slice(0, 50),
    (b) => [b.prefix, num(si(b.pps)), b.tier, b.detector, time(b.since)],
    (b) => ({ "data-prefix": b.prefix, "data-tier": b.tier }));
  rows("ddos-tiers", p.tiers || [],
    (x) => [x.name + (x.emulated ? " (EMULATED)" : ""), x.location, num(int(x.rules)), num(x.capacity == null ? "–" : int(x.capacity)), num(int(x.dropped_packets))]);
  // Detection: each victim's vectors, the learned baseline and threshold vs the last interval.
  const lines = [];
  for (const v of p.victims || []) {
    for (const x of v.vectors || []) {
      lines.push({ what: `${v.victim} ${x.vector}`, base: x.baseline_pps, thr: x.threshold_pps, now: x.current_pps, hot: x.anomalous });
    }
  }
  lines.sort((a, b) => (b.now ?? 0) - (a.now ?? 0));
  rows("ddos-detection", lines.slice(0, 20), (l) => [l.what, num(si(l.base)), num(si(l.thr)), num(si(l.now))],
    (l) => ({ class: l.hot ? "hot" : "" }));
}

// --- attacks and alerts ------------------------------------------------------
function attacks(list) {
  $("attacks-section").hidden = list.length === 0 && !state.apps?.includes("ddos");
  rows("attacks", list,
    (a) => [a.end ? "ended" : "in progress", a.vector ?? a.signature ?? "–", a.victim ?? "–", time(a.start), a.end ? time(a.end) : "–",
            num(si(a.peak_pps)), num(int(a.sources)), a.tier ?? "–", a.action ?? "–",
            a.pcap ?? "–"],
    (a) => ({ class: a.end ? "ended" : "active", "data-victim": a.victim ?? "", "data-vector": a.vector ?? "", "data-active": String(!a.end) }));
}

function alertKey(a) { return `${a.timestamp}|${a.rampart?.event}|${a.src_ip ?? a.rampart?.prefix ?? ""}`; }

function addAlerts(list) {
  const body = $("alerts").tBodies[0];
  for (const a of list) {
    const k = alertKey(a);
    if (state.alertKeys.has(k)) continue;
    state.alertKeys.add(k);
    const tr = document.createElement("tr");
    tr.dataset.event = a.rampart?.event ?? "";
    const src = a.src_ip ? a.src_ip + (a.src_port ? ":" + a.src_port : "") : (a.rampart?.prefix ?? "");
    const dst = a.dest_ip ? a.dest_ip + (a.dest_port ? ":" + a.dest_port : "") : (a.rampart?.victim ?? "");
    tr.innerHTML = [time(a.timestamp), a.rampart?.app, a.rampart?.event, a.alert?.signature ?? a.event_type, src, dst]
      .map((c) => `<td>${esc(c)}</td>`).join("") + `<td class="why">${esc(a.rampart?.reason ?? "")}</td>`;
    body.insertBefore(tr, body.firstChild);
  }
  while (body.rows.length > ALERTS) body.deleteRow(body.rows.length - 1);
}

// --- stream ---------------------------------------------------------------
const secs = (x) => (x == null ? "–" : x < 60 ? x.toFixed(0) + " s" : x < 3600 ? (x / 60).toFixed(0) + " min" : (x / 3600).toFixed(1) + " h");
const endpoint = (ip, port) => (String(ip).includes(":") ? `[${ip}]` : ip) + (port ? ":" + port : "");

function flowRows(table, list) {
  rows(table, list,
    (f) => [`${endpoint(f.src_ip, f.src_port)} → ${endpoint(f.dest_ip, f.dest_port)} ${f.proto}`, f.community_id ?? "–",
            num(int(f.pkts_toserver)), num(int(f.pkts_toclient)), num(si(f.bytes_toserver, "B")), num(si(f.bytes_toclient, "B")),
            num(secs(f.age_s))],
    (f) => ({ "data-src": f.src_ip, "data-dst": f.dest_ip, "data-community-id": f.community_id ?? "" }));
}

function stream(p, ts) {
  $("stream-where").textContent = `${(p.apps || []).join(", ")} on ${(p.interfaces || []).join(", ")} · feed ${p.feed ?? ""}`;
  const pk = p.packets || {};
  const an = $("stream-analysed");
  an.textContent = int(pk.analysed);
  an.dataset.value = String(pk.analysed ?? 0);
  $("stream-rate").textContent = si(rate("stream", "analysed", pk.analysed ?? 0, ts), "pps");
  $("stream-lost").textContent = int(pk.ring_full);
  $("stream-flows-total").textContent = int(p.flows_total);
  $("stream-flows-part").hidden = !p.flows;
  $("stream-open").textContent = p.flows ? int(p.flows.open) : "–";
  if (p.flows) {
    flowRows("stream-flows", (p.flows.by_bytes || []).slice(0, 10));
    flowRows("stream-flows-pkts", (p.flows.by_packets || []).slice(0, 10));
  }
  $("stream-scanners-part").hidden = !p.scanners;
  $("stream-scanner-count").textContent = p.scanners ? int(p.scanners.length) : "–";
  rows("stream-scanners", (p.scanners || []).slice(0, 20),
    (s) => [s.src_ip, num(int(s.first_contacts)), num(int(s.failures)), num(int(s.hosts)), num(int(s.ports)),
            (s.contacted || []).slice(0, 6).join(" ") + ((s.contacted || []).length > 6 ? " …" : ""), time(s.ts)],
    (s) => ({ "data-src": s.src_ip }));
  $("stream-floods-part").hidden = !p.synfloods;
  rows("stream-floods", (p.synfloods || []).slice(0, 20),
    (f) => [endpoint(f.dest_ip, f.dest_port), num(int(f.incomplete_handshakes)), num(int(f.syn)), num(int(f.synack)),
            num(int(f.threshold)), time(f.ts)],
    (f) => ({ "data-victim": f.dest_ip }));
}

// --- tenants ----------------------------------------------------------------
const VERDICTS = ["pass", "drop", "tx", "redirect", "aborted"];

function program(pr) {
  if (!pr) return "none";
  return `v${pr.version} ${pr.from === "c" ? "C" : pr.from}` + (pr.sha256 ? ` ${pr.sha256.slice(0, 8)}` : "") + ` · ${int(pr.insns)} insns · id ${pr.prog_id}`;
}

function tenant(p, ts) {
  const budget = p.budget_cores ?? 0;
  $("tenant-where").textContent = `instance ${p.instance ?? ""} on ${(p.interfaces || []).join(", ")} · fairness ${p.fairness ? "on" : "off"} · budget ${budget} cores`;
  const list = (p.tenants || []).filter((t) => t.name);
  // CPU seconds per second, as a share of the budget (cores).
  const cpu = list.map((t) => rate("tenant", "cpu:" + t.name, t.cpu_seconds ?? 0, ts));
  const share = cpu.map((x) => (budget > 0 && x !== null ? (100 * x) / budget : null));
  const names = list.map((t) => t.name).join();
  if (!state.charts["tenant-chart"] || state.tenantNames !== names) {
    if (state.charts["tenant-chart"]) { state.charts["tenant-chart"].destroy(); delete state.charts["tenant-chart"]; $("tenant-chart").innerHTML = ""; }
    state.tenantNames = names;
    const pal = ["#4dabf7", "#ff6b6b", "#51cf66", "#fcc419", "#b197fc", "#ffa94d", "#63e6be", "#f783ac"];
    chart("tenant-chart", list.map((t) => t.name), list.map((_, i) => pal[i % pal.length]), "%");
  }
  push("tenant-chart", ts, share);
  rows("tenant-table", list.map((t, i) => [t, share[i]]),
    ([t, s]) => {
      if (t.error) return [t.name, t.error, "", "", "", "", "", "", "", "", "", ""];
      const drops = Object.entries(t.drops || {}).filter(([, v]) => v > 0).map(([k, v]) => `${k} ${int(v)}`).join(", ");
      return [t.name, program(t.program), num(t.weight ?? ""), num(s === null ? "–" : s.toFixed(s < 10 ? 2 : 1) + " %"), num((t.cpu_seconds ?? 0).toFixed(3)),
              num(int(t.packets)), ...VERDICTS.map((k) => num(int(t.verdicts?.[k]))), drops || "–"];
    },
    ([t, s]) => ({ "data-tenant": t.name, "data-share": s === null ? "" : String(s), "data-pass": String(t.verdicts?.pass ?? 0),
                   "data-verdicts": String(VERDICTS.reduce((a, k) => a + (t.verdicts?.[k] ?? 0), 0)) }));
}

// --- the feed -----------------------------------------------------------------
function snapshot(s) {
  state.apps = s.apps;
  $("host").textContent = s.host;
  $("version").textContent = s.version;
  $("apps").innerHTML = s.apps.map((a) => `<span class="app-badge">${esc(a)}</span>`).join("");
  for (const a of ["ddos", "stream", "tenant"]) $(a).hidden = !s.apps.includes(a);
  if (s.panels.ddos) ddos(s.panels.ddos, s.ts);
  if (s.panels.stream) stream(s.panels.stream, s.ts);
  if (s.panels.tenant) tenant(s.panels.tenant, s.ts);
  attacks(s.attacks || []);
  addAlerts(s.alerts || []);
}

// A token in the address's fragment (`/ui/#token=SECRET`, for a link or a
// kiosk): kept for this tab and removed from the address bar. Browsers
// never send the fragment to the server, so it stays out of its logs.
function takeToken() {
  const m = location.hash.match(/(?:^#|&)token=([^&]*)/);
  if (!m) return;
  sessionStorage.setItem("rampart-token", decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search);
}

function headers() {
  const t = sessionStorage.getItem("rampart-token");
  return t ? { Authorization: "Bearer " + t } : {};
}

function connected(on, text) {
  const c = $("conn");
  c.className = "conn " + (on ? "on" : "off");
  c.textContent = text;
}

async function connect() {
  let res;
  try {
    res = await fetch("/v1/events", { headers: headers(), cache: "no-store" });
  } catch (e) {
    return retry("disconnected");
  }
  if (res.status === 401) {
    const body = await res.json().catch(() => ({}));
    $("login").hidden = false;
    $("login-error").textContent = sessionStorage.getItem("rampart-token") ? body.error?.message ?? "" : "";
    connected(false, "token needed");
    return;
  }
  if (!res.ok || !res.body) return retry(`HTTP ${res.status}`);
  $("login").hidden = true;
  connected(true, "live");
  state.reconnect = 1000;
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    let r;
    try { r = await reader.read(); } catch (e) { break; }
    if (r.done) break;
    buf += dec.decode(r.value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let ev = "message", data = "";
      for (const line of frame.split("\n")) {
        if (line.startsWith("event:")) ev = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).replace(/^ /, "");
      }
      if (!data) continue;
      try {
        if (ev === "snapshot") snapshot(JSON.parse(data));
        else if (ev === "alert") addAlerts([JSON.parse(data)]);
      } catch (e) { console.error(ev, e); }
    }
  }
  retry("disconnected");
}

function retry(why) {
  connected(false, why + ", reconnecting…");
  setTimeout(connect, state.reconnect);
  state.reconnect = Math.min(state.reconnect * 2, 10000);
}

$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("rampart-token", $("token").value.trim());
  connect();
});

takeToken();
connect();
