// The agentnet status page. Served by the node itself (no other origin, no CDN); it renders
// everything with textContent and DOM nodes, never HTML strings: card names are a stranger's
// text. The admin token lives in sessionStorage (this tab only) and goes out only as
// `Authorization: Bearer` to this origin's /admin/v1/status.
"use strict";

(function () {
  const KEY = "agentnet.adminToken";
  const API = "/admin/v1/status";
  const POLL_MS = 5000;
  const SVG = "http://www.w3.org/2000/svg";
  let timer = null;

  const $ = (id) => document.getElementById(id);

  // A token passed once as `#token=...` (the fragment never reaches the server): keep it for
  // this tab and take it out of the address bar and the history entry.
  function takeFragmentToken() {
    const m = /^#token=([^&]*)/.exec(window.location.hash);
    if (!m) return;
    let t = "";
    try { t = decodeURIComponent(m[1]); } catch (e) { t = ""; }
    if (t) sessionStorage.setItem(KEY, t);
    history.replaceState(null, "", window.location.pathname + window.location.search);
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function badge(text, kind, title) {
    const b = el("span", text, "badge " + kind);
    if (title) b.title = title;
    return b;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function row(cells) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      if (c instanceof Node) td.appendChild(c);
      else td.textContent = c === undefined || c === null ? "" : String(c);
      tr.appendChild(td);
    }
    return tr;
  }

  function fill(tbodyId, rows, columns, emptyText) {
    const tb = $(tbodyId);
    clear(tb);
    if (!rows.length) {
      const tr = document.createElement("tr");
      const td = el("td", emptyText, "empty");
      td.colSpan = columns;
      tr.appendChild(td);
      tb.appendChild(tr);
      return;
    }
    for (const r of rows) tb.appendChild(r);
  }

  function code(text) { return el("code", text); }

  function short(id) {
    const s = String(id || "");
    return s.length > 24 ? s.slice(0, 14) + "…" + s.slice(-8) : s;
  }

  // A task's owner as the store keys it (`c:<caller>`, `a:<source>`), as a person reads it.
  function owner(key) {
    const s = String(key || "");
    if (s.startsWith("c:")) return short(s.slice(2));
    if (s.startsWith("a:")) return "anonymous (" + s.slice(2) + ")";
    return short(s);
  }

  function duration(secs) {
    secs = Math.max(0, Math.floor(secs));
    const d = Math.floor(secs / 86400), h = Math.floor(secs / 3600) % 24;
    const m = Math.floor(secs / 60) % 60, s = secs % 60;
    if (d) return d + "d " + h + "h " + m + "m";
    if (h) return h + "h " + m + "m " + s + "s";
    if (m) return m + "m " + s + "s";
    return s + "s";
  }

  function stack() {
    const d = document.createElement("div");
    for (let i = 0; i < arguments.length; i++) d.appendChild(arguments[i]);
    return d;
  }

  function showLogin(message) {
    if (timer) { clearInterval(timer); timer = null; }
    $("dashboard").hidden = true;
    $("session").hidden = true;
    $("login").hidden = false;
    $("login-error").textContent = message || "";
    $("token").focus();
  }

  function showDashboard() {
    $("login").hidden = true;
    $("dashboard").hidden = false;
    $("session").hidden = false;
  }

  async function refresh() {
    const token = sessionStorage.getItem(KEY);
    if (!token) { showLogin(""); return; }
    let resp;
    try {
      resp = await fetch(API, {
        headers: { "Authorization": "Bearer " + token, "Accept": "application/json" },
        cache: "no-store", credentials: "omit", redirect: "error",
      });
    } catch (e) {
      $("updated").textContent = "node unreachable: " + e.message;
      if ($("dashboard").hidden) showLogin("The node did not answer: is it running?");
      return;
    }
    if (resp.status === 401) {
      sessionStorage.removeItem(KEY);
      showLogin("The node refused this token (401). Read it again from admin.token: it changes at every start.");
      return;
    }
    if (!resp.ok) {
      let why = "HTTP " + resp.status;
      try { const b = await resp.json(); if (b && b.error) why += ": " + b.error; } catch (e) { /* not JSON */ }
      $("updated").textContent = why;
      if ($("dashboard").hidden) showLogin("The node answered " + why);
      return;
    }
    const r = await resp.json();
    render(r);
    showDashboard();
    if (!timer) timer = setInterval(refresh, POLL_MS);
  }

  function render(r) {
    const n = r.node;
    $("node-did").textContent = n.did;
    $("node-peer").textContent = n.peer_id;
    $("node-uptime").textContent = duration(n.uptime_secs) + " (since " +
      new Date(n.started_at * 1000).toLocaleString() + ")";
    $("node-version").textContent = n.version;
    $("node-url").textContent = n.public_url;
    const listen = $("node-listen");
    clear(listen);
    if (!n.listen.length) listen.textContent = "no libp2p address";
    for (const a of n.listen) listen.appendChild(stack(code(a)));
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();

    $("hosted-count").textContent = r.hosted.length;
    fill("hosted", r.hosted.map((h) => row([
      el("span", h.name || h.id, "name"),
      code(h.id),
      code(h.did),
      code(h.url),
      h.published ? badge("published", "ok") : badge("not published", "tag"),
    ])), 5, "no hosted agents (agentnet up --config)");

    $("discovered-count").textContent = r.discovered.length < r.discovered_total
      ? r.discovered.length + " of " + r.discovered_total : String(r.discovered.length);
    const now = Date.now() / 1000;
    fill("discovered", r.discovered.map((d) => {
      const name = el("div", d.name || "(no name)", "name");
      name.title = d.name;
      const desc = el("div", d.description, "desc");
      desc.title = d.description;
      const v = document.createElement("div");
      v.appendChild(d.signature_verified
        ? badge("signature ✓", "ok", "the advertisement and its card verify against the DID's key")
        : badge("signature ✗", "bad"));
      v.appendChild(domainBadge(d));
      const tags = document.createElement("div");
      for (const t of d.tags) tags.appendChild(badge(t, "tag"));
      const pub = document.createElement("div");
      pub.appendChild(code(short(d.peer_id)));
      if (d.own) { pub.appendChild(document.createTextNode(" ")); pub.appendChild(badge("this node", "info")); }
      return row([stack(name, desc), code(d.did), trust(d), v, tags, pub,
        el("span", "in " + duration(d.expires_at - now), "nowrap")]);
    }), 7, "no live advertisements in the index");

    $("peers-count").textContent = r.connected;
    fill("peers", r.peers.map((p) => {
      const addrs = document.createElement("div");
      for (const a of p.addrs.slice(0, 4)) addrs.appendChild(stack(code(a)));
      return row([code(p.peer_id), addrs]);
    }), 2, "no connected peers");

    const t = r.tasks;
    $("tasks-count").textContent = t.total + " stored" + (t.quarantined ? ", " + t.quarantined + " quarantined" : "");
    fill("tasks", t.recent.map((x) => {
      const state = String(x.state).replace(/^TASK_STATE_/, "").toLowerCase().replace(/_/g, " ");
      const kind = /completed/.test(state) ? "ok" : /failed|rejected/.test(state) ? "bad"
        : x.running ? "info" : "warn";
      return row([
        el("span", new Date(x.updated_micros / 1000).toLocaleString(), "nowrap"),
        code(x.agent),
        badge(state, kind),
        code(owner(x.owner)),
        code(short(x.id)),
      ]);
    }), 5, "no tasks yet");

    drawCharts(r.history, r.sample_secs);
  }

  // What was checked of the DID's domain: none named (did:key), named and vouching for the
  // key (did:web, did:wba), or named and never asked (did:wba e1_).
  function domainBadge(d) {
    if (!d.domain) {
      return badge("no domain", "tag", "the DID names no domain (did:key): no domain vouches for the key");
    }
    if (d.domain_verified) {
      return badge("domain ✓ " + d.domain, "ok", "the key is in a document " + d.domain + " served");
    }
    return badge("domain not verified", "warn", d.domain + " never vouched for the key " +
      "(did:wba e1_: bound by its key fingerprint only; anyone can name any domain that way)");
  }

  const LEVEL_KIND = { "allow-listed": "ok", "endorsed": "ok", "domain-verified": "info", "self-asserted": "warn" };
  const PIN_KIND = { "pinned": "ok", "new": "info", "changed": "bad", "unpinned": "warn" };

  // Its level under the trust policy (or the policy's denial), its pin, its flags.
  function trust(d) {
    const box = document.createElement("div");
    if (d.denied) box.appendChild(badge("denied", "bad", d.denied));
    else if (d.level) box.appendChild(badge(d.level, LEVEL_KIND[d.level] || "tag", (d.reasons || []).join("; ")));
    const pin = d.pin;
    if (!pin) {
      box.appendChild(badge("not pinned", "tag", "nothing pinned yet: `agentnet discover` pins a card when it first shows it"));
    } else {
      const word = pin.state === "changed" ? "CHANGED" : pin.state;
      const why = pin.state === "changed" ? (pin.diff || []).join("; ")
        : pin.state === "unpinned" ? pin.why
        : pin.since ? "accepted " + new Date(pin.since * 1000).toLocaleString() : "";
      box.appendChild(badge(word, PIN_KIND[pin.state] || "tag", why));
    }
    for (const f of d.flags || []) {
      const flag = el("div", null, "flag");
      flag.appendChild(badge(f.rule, "bad", f.reason));
      // Whole (a flagged URL is the node's to show up to 256 characters), wrapped.
      const where = el("span", f.at + ": " + f.excerpt, "where");
      where.title = f.reason + " (" + f.at + "): " + f.excerpt;
      flag.appendChild(where);
      box.appendChild(flag);
    }
    return box;
  }

  // name, how a sample gives the value, cumulative (draw the growth per interval) or a level.
  const SERIES = [
    ["Gossip received", (s) => s.gossip_received, true],
    ["Gossip unique", (s) => s.gossip_unique, true],
    ["Validations", (s) => s.accepted + s.ignored + s.rejected, true],
    ["Accepted", (s) => s.accepted, true],
    ["Rejected", (s) => s.rejected, true],
    ["Ignored (duplicate, stale)", (s) => s.ignored, true],
    ["Throttled", (s) => s.throttled, true],
    ["Peers", (s) => s.peers, false],
  ];

  function drawCharts(history, sampleSecs) {
    const box = $("counters-chart");
    clear(box);
    const span = history.length > 1 ? history[history.length - 1].t - history[0].t : 0;
    $("charts-span").textContent = "(last " + duration(span) + ", a sample every " + sampleSecs + "s)";
    for (const [name, get, cumulative] of SERIES) {
      const values = history.map(get);
      const last = values.length ? values[values.length - 1] : 0;
      const prev = values.length > 1 ? values[values.length - 2] : last;
      const c = el("div", null, "chart");
      c.dataset.series = name;
      const label = el("div", null, "label");
      label.appendChild(el("span", name));
      c.appendChild(label);
      const v = el("div", last.toLocaleString(), "value");
      if (cumulative) {
        const d = el("span", "+" + (last - prev).toLocaleString(), "delta");
        d.title = "since the previous sample";
        v.appendChild(d);
      }
      c.appendChild(v);
      c.appendChild(sparkline(values));
      box.appendChild(c);
    }
  }

  function sparkline(values) {
    const W = 180, H = 44, P = 3;
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("role", "img");
    const min = Math.min.apply(null, values.concat([0]));
    // Headroom above the largest value: a steady counter draws as a line, not a filled box.
    const max = Math.max.apply(null, values.concat([1])) * 1.25;
    const n = Math.max(values.length, 2);
    const pts = (values.length ? values : [0]).map((v, i) => {
      const x = values.length > 1 ? P + (i * (W - 2 * P)) / (n - 1) : W - P;
      const y = H - P - ((v - min) * (H - 2 * P)) / (max - min || 1);
      return [x, y];
    });
    if (pts.length === 1) pts.unshift([P, pts[0][1]]);
    const line = pts.map((p) => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" ");
    const area = document.createElementNS(SVG, "polygon");
    area.setAttribute("points", P + "," + (H - P) + " " + line + " " + (W - P) + "," + (H - P));
    area.setAttribute("fill", "#2f6fde");
    area.setAttribute("fill-opacity", "0.12");
    const pl = document.createElementNS(SVG, "polyline");
    pl.setAttribute("points", line);
    pl.setAttribute("fill", "none");
    pl.setAttribute("stroke", "#2f6fde");
    pl.setAttribute("stroke-width", "1.5");
    pl.setAttribute("vector-effect", "non-scaling-stroke");
    const base = document.createElementNS(SVG, "line");
    base.setAttribute("x1", P); base.setAttribute("x2", W - P);
    base.setAttribute("y1", H - P); base.setAttribute("y2", H - P);
    base.setAttribute("stroke", "#e2e6ec");
    svg.appendChild(base);
    svg.appendChild(area);
    svg.appendChild(pl);
    return svg;
  }

  function start() {
    takeFragmentToken();
    $("login-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const t = $("token").value.trim();
      $("token").value = "";
      if (!t) return;
      sessionStorage.setItem(KEY, t);
      $("login-error").textContent = "";
      refresh();
    });
    $("logout").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      showLogin("Logged out.");
    });
    refresh();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
