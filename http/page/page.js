"use strict";
// The capgate staff status page. It fetches the staff API next to it
// (policy/, status/, config/, config/history/), sending the staff token, if
// one was given, as "Authorization: <scheme> <t>" (the scheme the API's 401 asks for: the policy's). The token is kept in
// sessionStorage: this tab only. Data from the API is always written as
// text, never as markup.
//
// The page is laid out by the policy in force (policy/): a row for each
// shared lane (scope cluster, under its status key in status/), a row for
// each tier of a lane keyed by tier, the API tasks of a task lane, the
// busiest entries of a lane keyed by user or by a call field, the
// decisions of the policy's tiers, and a form field for each of its
// config keys.
(() => {
  const TOKEN_KEY = "capgate.staffToken";
  const POLL_MS = 2000;
  const HISTORY_LIMIT = 20;
  const TOP_USERS = 10;

  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let pollTimer = 0;
  let running = false;
  let pollGen = 0;
  let loaded = {}; // the form's values as last loaded: dotted key → string
  let policy = null; // GET policy/: its tiers, lanes and config keys

  // AuthError is a 401 or 403 from the staff API.
  class AuthError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  function detailText(data) {
    if (data && typeof data.detail === "string") return data.detail;
    if (data && Array.isArray(data.detail)) return data.detail.join(" ");
    return "";
  }

  // scheme is the credential scheme the staff API asks for: its 401's
  // WWW-Authenticate (the policy's identity.scheme), "Token" until one says.
  let scheme = "Token";

  // api calls the staff API; paths are relative to the page (/capacity/).
  // A 401 whose challenge names another scheme is retried once with it.
  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = scheme + " " + token;
    const init = { method, headers, cache: "no-store", credentials: "same-origin" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let resp = await fetch(path, init);
    const asked = resp.status === 401 ? (resp.headers.get("WWW-Authenticate") || "").split(" ")[0] : "";
    if (asked && asked !== scheme) {
      scheme = asked;
      if (token) {
        headers.Authorization = scheme + " " + token;
        resp = await fetch(path, init);
      }
    }
    let data = null;
    try {
      data = await resp.json();
    } catch (e) {
      data = null;
    }
    if (resp.status === 401 || resp.status === 403) throw new AuthError(resp.status, detailText(data));
    return { status: resp.status, ok: resp.ok, data };
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function setText(id, text) {
    const e = $(id);
    if (e.textContent !== text) e.textContent = text;
  }

  // flatten turns {"a": {"b": 1}} into {"a.b": 1}.
  function flatten(obj, prefix, out) {
    out = out || {};
    for (const [k, v] of Object.entries(obj || {})) {
      const key = prefix ? prefix + "." + k : k;
      if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
      else out[key] = v;
    }
    return out;
  }

  function setPath(obj, dotted, value) {
    const parts = dotted.split(".");
    let o = obj;
    for (const p of parts.slice(0, -1)) {
      if (!o[p] || typeof o[p] !== "object") o[p] = {};
      o = o[p];
    }
    o[parts[parts.length - 1]] = value;
  }

  function mergeInto(dst, src) {
    for (const [k, v] of Object.entries(src)) {
      if (v && typeof v === "object" && !Array.isArray(v) && dst[k] && typeof dst[k] === "object") mergeInto(dst[k], v);
      else dst[k] = v;
    }
    return dst;
  }

  // ---- sign in and out ----

  function showLogin(err) {
    stopPolling();
    $("app").hidden = true;
    $("signout").hidden = true;
    $("login").hidden = false;
    let msg = "";
    if (err && err.status === 403) msg = "That account is not staff: " + (err.message || "forbidden") + " (403)";
    else if (err && token) msg = "The token was not accepted: " + (err.message || "unauthorized") + " (401)";
    token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    setText("login-error", msg);
    $("token").value = "";
    $("token").focus();
  }

  async function start() {
    try {
      await refreshPolicy();
      await Promise.all([refreshStatus(), refreshConfig(), refreshHistory()]);
    } catch (err) {
      if (err instanceof AuthError) {
        showLogin(err);
        return;
      }
      setText("status-problem", "Could not reach the gateway: " + err.message);
    }
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    $("login").hidden = true;
    $("app").hidden = false;
    $("signout").hidden = !token;
    startPolling();
  }

  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token").value.trim();
    if (!token) {
      setText("login-error", "Give your staff API token.");
      return;
    }
    start();
  });

  $("signout").addEventListener("click", () => showLogin(null));

  // ---- live status ----

  // Each start of polling has its own generation, so a poll still waiting
  // for its answer when the user signs out and in again stops there.
  function startPolling() {
    if (running) return;
    running = true;
    const gen = ++pollGen;
    pollTimer = setTimeout(() => poll(gen), POLL_MS);
  }

  function stopPolling() {
    running = false;
    clearTimeout(pollTimer);
  }

  async function poll(gen) {
    if (!running || gen !== pollGen) return;
    try {
      await refreshStatus();
    } catch (err) {
      if (err instanceof AuthError) {
        showLogin(err);
        return;
      }
      setText("status-problem", "Could not reach the gateway (" + err.message + "); retrying every 2 s.");
    }
    if (running && gen === pollGen) pollTimer = setTimeout(() => poll(gen), POLL_MS);
  }

  // refreshPolicy reads the policy in force and lays the page out by it.
  async function refreshPolicy() {
    const res = await api("GET", "policy/");
    if (!res.ok) throw new Error("the policy: " + (detailText(res.data) || "HTTP " + res.status));
    setPolicy(res.data);
  }

  async function refreshStatus() {
    if (!policy) {
      // The policy failed to load at the start: the form waits for it too.
      await refreshPolicy();
      await refreshConfig();
    }
    const res = await api("GET", "status/");
    if (!res.ok) {
      setText("status-problem", "Status: " + (detailText(res.data) || "HTTP " + res.status));
      return;
    }
    setText("status-problem", "");
    renderStatus(res.data);
  }

  function badge(id, text, cls) {
    const e = $(id);
    setText(id, text);
    e.className = "badge" + (cls ? " " + cls : "");
  }

  // laneRow is one row of a lanes table: name, "n / limit" and a meter.
  // A lane with an adaptive limit also has src (its status's
  // limit_source: "adaptive" or "static") and advised.
  function laneRow(id, name, note, inFlight, limit, waiting, lane) {
    const r = { id, name, note, inFlight, limit, waiting: waiting || 0 };
    if (lane && lane.limit_source) {
      r.src = lane.limit_source;
      r.advised = lane.advised;
    }
    return r;
  }

  // adaptiveText says where an adaptive lane's limit comes from and what
  // the control loop advises, "" for a static lane.
  function adaptiveText(r) {
    if (!r.src) return "";
    const adv = r.advised ? "advised " + r.advised : "no advice yet";
    return r.src === "adaptive" ? " · limit adaptive (" + adv + ")" : " · limit static, " + adv;
  }

  // waitText says how many calls wait for a slot, "" when none.
  function waitText(waiting) {
    return waiting > 0 ? ", " + waiting + " waiting" : "";
  }

  function countText(inFlight, limit, waiting) {
    return inFlight + " / " + limit + (limit === 0 ? " (paused)" : "") + waitText(waiting);
  }

  function renderRows(tbody, rows, build, update) {
    const keep = new Set(rows.map((r) => r.id));
    for (const tr of Array.from(tbody.children)) if (!keep.has(tr.id)) tr.remove();
    rows.forEach((r, i) => {
      let tr = document.getElementById(r.id);
      if (!tr) tr = build(r);
      if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
      update(tr, r);
    });
  }

  function buildLane(r) {
    const tr = el("tr");
    tr.id = r.id;
    const th = el("th");
    th.scope = "row";
    th.append(el("span", r.name, "name"));
    if (r.note) th.append(" ", el("span", r.note, "quiet"));
    const meter = el("meter");
    meter.min = 0;
    tr.append(th, el("td", "", "count"), el("td"));
    tr.children[2].append(meter);
    return tr;
  }

  function updateLane(tr, r) {
    const max = Math.max(r.limit, 1);
    tr.querySelector(".count").textContent = countText(r.inFlight, r.limit, r.waiting) + adaptiveText(r);
    const m = tr.querySelector("meter");
    m.max = max;
    m.low = max / 2;
    m.high = max - 0.5;
    m.optimum = 0;
    m.value = Math.min(r.inFlight, max);
    m.setAttribute("aria-label", r.name + ": " + r.inFlight + " of " + r.limit + " in flight");
    m.textContent = r.inFlight + " / " + r.limit;
  }

  // STORE_NAMES says where each kind of lane store keeps the lanes.
  const STORE_NAMES = {
    memory: "memory (in-process: this gateway only)",
    redis: "Redis",
    "redis-sentinel": "Redis (Sentinel)",
    "redis-cluster": "Redis Cluster",
  };

  // bindingRowId is the id of the row of the lane calls wait on: a
  // shared lane's name, "task:<id>", or "<lane>:<key>" of a lane keyed by
  // tier or by a call field.
  function bindingRowId(binding) {
    if (!binding) return "";
    if (binding.startsWith("task:")) return "task-" + binding.slice(5);
    const i = binding.indexOf(":");
    if (i < 0) return "lane-" + binding;
    const lane = binding.slice(0, i);
    const l = policy && policy.lanes.find((x) => x.name === lane);
    if (l && l.key === "tier") return "lane-" + lane + "-" + binding.slice(i + 1);
    return entryRowId(lane, binding.slice(i + 1));
  }

  // ---- the layout of the policy in force ----

  // entryRowId is the id of the row of one key of a lane keyed by a call
  // field.
  function entryRowId(lane, key) {
    return "entry-" + lane + "-" + key;
  }

  // sortedEntries returns a keyed lane's entries in the status, the
  // busiest first (then by key).
  function sortedEntries(v) {
    return Object.entries(v || {}).sort((a, b) => b[1].in_flight - a[1].in_flight || (a[0] < b[0] ? -1 : 1));
  }

  // keyedBlocks are the lists of the lanes keyed by user or by a call
  // field: the first lane keyed by user in the page's own "Busiest users",
  // each other in a block made for it.
  let keyedBlocks = [];

  function userRow(id, name, u) {
    return { id, name, inFlight: u.in_flight, waiting: u.waiting || 0 };
  }

  function buildUser(r) {
    const tr = el("tr");
    tr.id = r.id;
    const th = el("th", r.name);
    th.scope = "row";
    tr.append(th, el("td", "", "count"));
    return tr;
  }

  function updateUser(tr, r) {
    tr.querySelector(".count").textContent = String(r.inFlight) + waitText(r.waiting);
  }

  // keyedBlock makes the list of lane l (keyed by user or by a call field)
  // in the page: its heading, its table (with each key's limit when the
  // lane has one limit for every key) and what it says when it is empty.
  function keyedBlock(l) {
    const base = "keyed-" + l.name;
    const limited = l.key !== "user" && !l.per_tier;
    const box = el("div");
    box.id = base + "-box";
    box.className = "keyed";
    const h = el("h3", "Lane " + l.name + ": busiest by " + l.key);
    h.id = base + "-h";
    const table = el("table");
    table.id = base;
    if (limited) table.className = "lanes";
    table.setAttribute("aria-labelledby", h.id);
    const head = el("tr");
    const cols = limited ? [l.key, "In flight / limit", "Use"] : [l.key, "In flight"];
    for (const c of cols) {
      const th = el("th", c);
      th.scope = "col";
      head.append(th);
    }
    table.createTHead().append(head);
    table.append(document.createElement("tbody"));
    const none = el("p", "No " + l.key + " has calls in flight.", "quiet");
    none.id = base + "-none";
    const more = el("p", "", "quiet");
    more.id = base + "-more";
    more.hidden = true;
    box.append(h, table, none, more);
    $("keyed").append(box);
    return { lane: l, table, none, more, limited, prefix: entryRowId(l.name, "") };
  }

  // setPolicy lays the page out by policy p: the lists of the keyed lanes
  // and the form's limit fields.
  function setPolicy(p) {
    policy = p;
    $("tasks-box").hidden = !p.lanes.some((l) => l.scope === "task");
    for (const b of keyedBlocks) if (b.table !== $("users")) b.table.parentElement.remove();
    keyedBlocks = [];
    let users = false;
    for (const l of p.lanes) {
      if (l.scope !== "key" || l.key === "tier") continue;
      if (l.key === "user" && !users) {
        users = true;
        keyedBlocks.push({ lane: l, table: $("users"), none: $("users-none"), more: $("users-more"), limited: false, prefix: "user-" });
        continue;
      }
      keyedBlocks.push(keyedBlock(l));
    }
    $("users-box").hidden = !users;
    buildLimitFields(p.config_keys || []);
  }

  // FAIRNESS_TEXT says how calls waiting for a full lane share it
  // (fairness.by; absent when no call can wait).
  const FAIRNESS_TEXT = {
    time: "· waiting calls share the lanes' time fairly across users",
    usage: "· waiting calls share what the upstream reports used (tokens) fairly across users",
    calls: "· waiting calls are admitted in turn across users, one call each",
  };

  // enforcingText says who the mode refuses, in words that can't
  // contradict it: enforce_for matters only in enforce.
  function enforcingText(mode, enforceFor) {
    if (mode === "off") return "· nothing is counted, nobody refused";
    const who = enforceFor === "all" ? "every caller" : "capacity-aware clients only";
    if (mode !== "enforce") return "· counts and refuses nobody (in enforce it would refuse " + who + ")";
    return enforceFor === "all" ? "· refuses every caller at a full lane"
      : "· refuses capacity-aware clients at a full lane; the others go ahead as in shadow";
  }

  // renderPaused lists the lanes the config pauses, whose calls each
  // refuses, and whether it does now (enforce) or would (shadow).
  function renderPaused(s) {
    const list = s.paused || [];
    const box = $("paused");
    box.hidden = list.length === 0;
    const when = s.mode !== "enforce" ? " — in " + s.mode + " they go ahead (shadow-refused); enforce would refuse them"
      : s.enforce_for === "all" ? " — refused at once" : " — refused at once for capacity-aware clients";
    const items = list.map((p) => {
      const li = el("li");
      li.append(el("strong", "Paused: " + p.lane + (p.tier ? " for tier " + p.tier : "") + (p.except ? " (bulk: all but " + p.except + ")" : "")),
        " refuses " + p.refuses + when + ".");
      return li;
    });
    const ul = box.querySelector("ul");
    const text = items.map((li) => li.textContent).join("\n");
    if (ul.dataset.text !== text) {
      ul.replaceChildren(...items);
      ul.dataset.text = text;
    }
  }

  function renderStatus(s) {
    badge("mode", s.mode, s.mode === "enforce" ? "enforce" : "");
    setText("enforcing", enforcingText(s.mode, s.enforce_for));
    setText("fairness", FAIRNESS_TEXT[s.fairness] || "");
    renderPaused(s);
    // lanes_health is the store's health under a name for every store;
    // an older gateway sends only "redis".
    const health = s.lanes_health !== undefined ? s.lanes_health : s.redis;
    const storeOK = health === "ok";
    badge("store", (STORE_NAMES[s.lanes] || s.lanes || "unknown") + " · " + (storeOK ? "ok" : "unavailable"), storeOK ? "" : "bad");
    if (!storeOK) setText("status-problem", "The lane store failed: " + health);
    // One time zone on the page: UTC, as the history.
    setText("updated", "updated " + new Date().toISOString().slice(11, 19) + " UTC");

    // The policy's lanes, in its order: a row for each shared lane
    // (with its limit for bulk calls when it keeps room for a class of
    // calls) and for each tier of a lane keyed by tier; the tasks of a
    // task lane.
    const lanes = [];
    let tasks = [];
    let taskLanes = 0;
    for (const l of policy ? policy.lanes : []) {
      const v = s[l.status];
      if (l.scope === "cluster") {
        if (!v) continue;
        const note = v.bulk_limit === undefined ? "" :
          "(bulk calls up to " + v.bulk_limit + (v.lend ? ", borrowing up to " + v.lend + " more while the reserve is idle" : "") + ")";
        lanes.push(laneRow("lane-" + l.name, l.name, note, v.in_flight, v.limit, v.waiting, v));
      } else if (l.scope === "key" && l.key === "tier") {
        for (const t of policy.tiers) {
          const e = (v || {})[t];
          if (e) lanes.push(laneRow("lane-" + l.name + "-" + t, l.name + " " + t, "", e.in_flight, e.limit, e.waiting));
        }
      } else if (l.scope === "task") {
        // A policy has one task lane as a rule; another's rows are told
        // apart by its name.
        const named = taskLanes++ > 0;
        tasks = tasks.concat(sortedEntries(v).map(([id, e]) => laneRow(named ? "task-" + l.name + "-" + id : "task-" + id,
          named ? l.name + " " + id : id, "", e.in_flight, e.limit, e.waiting, e)));
      }
    }
    renderRows($("lanes").tBodies[0], lanes, buildLane, updateLane);
    renderRows($("tasks").tBodies[0], tasks, buildLane, updateLane);
    $("tasks").hidden = tasks.length === 0;
    $("tasks-none").hidden = tasks.length > 0;

    // The busiest keys of each lane keyed by user or by a call field; a
    // key's row, when the lane has one limit for every key, with it.
    let entries = [];
    for (const b of keyedBlocks) {
      const all = sortedEntries(s[b.lane.status]).map(([id, e]) => b.limited
        ? Object.assign(laneRow(b.prefix + id, id, "", e.in_flight, e.limit, e.waiting), { label: b.lane.name + " " + id })
        : userRow(b.prefix + id, id, e));
      const shown = all.slice(0, TOP_USERS);
      if (b.limited) {
        renderRows(b.table.tBodies[0], shown, buildLane, updateLane);
        entries = entries.concat(all);
      } else {
        renderRows(b.table.tBodies[0], shown, buildUser, updateUser);
      }
      b.table.hidden = shown.length === 0;
      b.none.hidden = shown.length > 0;
      // The keys the gateway left out (the JSON lists the busiest 50; a
      // status read counts at most 1000 keys of a lane).
      const lo = (s.keys_left_out || {})[b.lane.status];
      const hidden = all.length - shown.length;
      let more = "";
      if (hidden > 0 || lo) {
        const keys = hidden + (lo ? lo.keys : 0);
        const calls = all.slice(TOP_USERS).reduce((n, r) => n + r.inFlight, 0) + (lo ? lo.in_flight : 0);
        more = "… and " + keys + " more " + b.lane.key + (keys === 1 ? "" : "s") + " with " + calls + " call" + (calls === 1 ? "" : "s") +
          " in flight" + (lo && lo.uncounted ? " (" + lo.uncounted + " not counted: too many to read at once)" : "") + ".";
      }
      setText(b.more.id, more);
      b.more.hidden = more === "";
    }

    // The lane calls wait on: its row marked, and said in words.
    const bindId = bindingRowId(s.binding);
    for (const tr of document.querySelectorAll("tr.binding")) {
      if (tr.id !== bindId) {
        tr.classList.remove("binding");
        const mark = tr.querySelector(".binding-mark");
        if (mark) mark.remove();
      }
    }
    // Only enforced calls wait; in shadow the full lane is where they
    // would.
    const waits = s.mode === "enforce";
    const bindRow = bindId && document.getElementById(bindId);
    if (bindRow) {
      bindRow.classList.add("binding");
      let mark = bindRow.querySelector(".binding-mark");
      if (!mark) {
        mark = el("span", "", "binding-mark");
        bindRow.querySelector("th").append(mark);
      }
      const want = waits ? "calls wait here" : "full: enforce would make calls wait here";
      if (mark.textContent !== want) mark.textContent = want;
    }
    const bound = lanes.concat(tasks, entries).find((r) => r.id === bindId);
    const where = bound ? (bound.label || bound.name) + (bound.note ? " " + bound.note : "") + ": " +
      countText(bound.inFlight, bound.limit, bound.waiting) : "";
    const paused = (s.paused || []).length > 0;
    setText("binding", !bound ? (paused ? "No other lane is full: the paused lanes above refuse their calls, no call waits."
      : "No lane is full: no call waits.")
      : waits ? "Calls wait on " + where + "."
        : "Full: " + where + ". In shadow nothing waits; in enforce calls would wait on this lane.");
    renderDecisions(s.decisions);

    // The live region: one short sentence, changed only when it changes.
    const parts = lanes.slice(0, 2).map((l) => l.name + " " + l.inFlight + " of " + l.limit);
    setText("live-summary", "Mode " + s.mode + ". " + parts.join(", ") + ".");
  }

  // DECISIONS are the columns of the decisions table.
  const DECISIONS = ["admitted", "shadow-refused", "refused", "unavailable"];

  // renderDecisions fills the decisions table: one row per tier, then per
  // lane, each cell the counts over the last 1, 5 and 15 minutes.
  function renderDecisions(d) {
    const box = $("decisions");
    if (!d) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    const rows = [];
    const add = (kind, by, names) => {
      for (const name of names) {
        const counts = by[name];
        if (!counts) continue;
        rows.push({ id: "dec-" + kind + "-" + name, name: kind + " " + name, counts });
      }
    };
    const tiers = policy ? policy.tiers : [];
    add("tier", d.by_tier || {}, tiers.concat(Object.keys(d.by_tier || {}).filter((t) => !tiers.includes(t)).sort()));
    add("lane", d.by_lane || {}, Object.keys(d.by_lane || {}).sort());
    renderRows($("decisions-table").tBodies[0], rows, (r) => {
      const tr = el("tr");
      tr.id = r.id;
      const th = el("th", r.name);
      th.scope = "row";
      tr.append(th, ...DECISIONS.map((dec) => el("td", "", "count dec-" + dec)));
      return tr;
    }, (tr, r) => {
      DECISIONS.forEach((dec, i) => {
        const c = r.counts[dec] || [0, 0, 0];
        tr.children[i + 1].textContent = c.join(" / ");
      });
    });
    $("decisions-none").hidden = rows.length > 0;
    $("decisions-table").hidden = rows.length === 0;
  }

  // ---- config and history ----

  function shown(v) {
    return v === null || v === undefined ? "–" : typeof v === "object" ? JSON.stringify(v) : String(v);
  }

  // utcTime shows an RFC 3339 UTC time to the second: "2026-01-02 15:04:05".
  function utcTime(s) {
    return s.replace("T", " ").replace(/(\.\d+)?(Z|[+-]00:00)$/, "");
  }

  async function refreshConfig() {
    const res = await api("GET", "config/");
    if (!res.ok) {
      setText("config-meta", "Could not read the config: " + (detailText(res.data) || "HTTP " + res.status));
      return;
    }
    const c = res.data;
    setText("config-meta", c.version === null
      ? "No saved version: the defaults are in force."
      : "Version " + c.version + ", by " + shown(c.created_by) + " at " + (c.created_at ? utcTime(c.created_at) + " UTC" : "–") +
        " (" + shown(c.source) + ")" + (c.note ? ": " + c.note : "."));
    const cfg = flatten(c.config);
    const defs = flatten(c.defaults);
    const tbody = $("config").tBodies[0];
    tbody.replaceChildren();
    for (const key of Object.keys(cfg)) {
      const tr = el("tr");
      tr.id = "config-" + key;
      const th = el("th", key);
      th.scope = "row";
      const changed = shown(cfg[key]) !== shown(defs[key]);
      tr.append(th, el("td", shown(cfg[key]), changed ? "changed" : ""), el("td", shown(defs[key]), "quiet"));
      tbody.append(tr);
    }
    fillForm(cfg);
  }

  async function refreshHistory() {
    const res = await api("GET", "config/history/?limit=" + HISTORY_LIMIT);
    const tbody = $("history").tBodies[0];
    if (!res.ok) {
      tbody.replaceChildren();
      return;
    }
    tbody.replaceChildren(...res.data.map((v, i) => {
      const tr = el("tr");
      tr.id = "history-" + v.version;
      const changes = el("td", "", "changes");
      for (const [k, [from, to]] of Object.entries(v.changes || {}).sort()) {
        changes.append(el("div", k + ": " + shown(from) + " → " + shown(to)));
      }
      if (v.rollback_of) changes.append(el("div", "rollback to version " + v.rollback_of, "quiet"));
      const when = v.created_at ? utcTime(v.created_at) : "–";
      // Every version but the one in force can be restored: a new version
      // equal to it, with the form's note as the why.
      const back = el("td");
      if (i > 0) {
        const b = el("button", "Roll back to " + v.version);
        b.type = "button";
        b.className = "rollback";
        b.addEventListener("click", () => rollback(v.version, b));
        back.append(b);
      }
      tr.append(el("td", v.version), el("td", when), el("td", shown(v.created_by)), el("td", shown(v.source)),
        el("td", v.note || ""), changes, back);
      return tr;
    }));
    $("history").hidden = res.data.length === 0;
    $("history-none").hidden = res.data.length > 0;
    $("undo-box").hidden = res.data.length === 0;
    if (res.data.length > 0) setText("undo", "Roll back the last change (version " + res.data[0].version + ")");
  }

  // rollback makes a new version equal to version, with the form's note;
  // with no version, it rolls back the last change. A rollback the
  // gateway refuses (409: it would change nothing, or roll back a
  // rollback) shows its detail.
  async function rollback(version, button) {
    clearErrors();
    const note = $("f-note").value.trim();
    if (!note) {
      showErrors(["Say in the note why you roll back " + (version ? "to version " + version : "the last change") + "."], [$("f-note")]);
      return;
    }
    button.disabled = true;
    try {
      const res = await api("POST", "config/rollback/", version ? { version, note } : { note });
      if (!res.ok) {
        const d = res.data && res.data.detail;
        showErrors(Array.isArray(d) ? d : [detailText(res.data) || "The gateway answered HTTP " + res.status + "."], []);
        return;
      }
      setText("change-result", "Saved version " + res.data.version + ": " + (version ? "back to version " + version
        : "version " + res.data.undid + " rolled back" + (res.data.rollback_of ? " (to version " + res.data.rollback_of + "'s config)" : " (to the defaults)")) + ".");
      $("f-note").value = "";
      await Promise.all([refreshConfig(), refreshHistory(), refreshStatus()]);
    } catch (err) {
      if (err instanceof AuthError) showLogin(err);
      else showErrors(["Could not reach the gateway: " + err.message], []);
    } finally {
      button.disabled = false;
    }
  }

  $("undo").addEventListener("click", () => rollback(0, $("undo")));

  // ---- the change form ----

  function fieldId(key) {
    return "f-" + key.replace(/\./g, "-");
  }

  // buildLimitFields makes a number field for each of the policy's config
  // keys (its lanes' limits and reserves), in the config's order.
  function buildLimitFields(keys) {
    const box = $("limit-fields");
    box.replaceChildren();
    for (const key of keys) {
      const label = el("label", key);
      label.htmlFor = fieldId(key);
      const input = el("input");
      input.id = fieldId(key);
      input.type = "text";
      input.inputMode = "numeric";
      input.autocomplete = "off";
      input.size = 6;
      input.dataset.key = key;
      box.append(label, input);
    }
  }

  function formFields() {
    return Array.from($("change-form").querySelectorAll("[data-key]"));
  }

  function fillForm(cfg) {
    loaded = {};
    for (const f of formFields()) {
      const v = cfg[f.dataset.key];
      f.value = v === undefined ? "" : String(v);
      loaded[f.dataset.key] = f.value;
    }
  }

  function clearErrors() {
    const box = $("change-errors");
    box.hidden = true;
    box.querySelector("ul").replaceChildren();
    for (const f of formFields().concat([$("f-raw"), $("f-note")])) {
      f.removeAttribute("aria-invalid");
      f.removeAttribute("aria-describedby");
    }
  }

  // showErrors lists messages above the form and marks the fields they
  // name ("api_heavy.cluster" must be ...), then moves focus to the list.
  function showErrors(messages, fields) {
    const box = $("change-errors");
    box.querySelector("ul").replaceChildren(...messages.map((m) => el("li", m)));
    const marked = new Set(fields || []);
    for (const m of messages) {
      const named = /^"([^"]+)"/.exec(m);
      const f = named && document.getElementById(fieldId(named[1]));
      if (f) marked.add(f);
    }
    for (const f of marked) {
      f.setAttribute("aria-invalid", "true");
      f.setAttribute("aria-describedby", "change-errors");
    }
    box.hidden = false;
    box.focus();
  }

  function numberOrText(raw) {
    return /^-?\d+$/.test(raw) && Number.isSafeInteger(Number(raw)) ? Number(raw) : raw;
  }

  $("change-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearErrors();
    setText("change-result", "");
    const change = {};
    for (const f of formFields()) {
      const raw = f.value.trim();
      if (raw === loaded[f.dataset.key]) continue;
      setPath(change, f.dataset.key, f.tagName === "SELECT" ? raw : numberOrText(raw));
    }
    const rawJSON = $("f-raw").value.trim();
    if (rawJSON) {
      let extra;
      try {
        extra = JSON.parse(rawJSON);
      } catch (e) {
        extra = undefined;
      }
      if (!extra || typeof extra !== "object" || Array.isArray(extra)) {
        showErrors(["Other settings must be a JSON object, such as {\"lease_seconds\": 60}."], [$("f-raw")]);
        return;
      }
      mergeInto(change, extra);
    }
    if (Object.keys(change).length === 0) {
      showErrors(["Change at least one setting."], []);
      return;
    }
    const note = $("f-note").value.trim();
    if (!note) {
      showErrors(["Say in the note why you change the config."], [$("f-note")]);
      return;
    }
    change.note = note;
    const save = $("save");
    save.disabled = true;
    try {
      const res = await api("PATCH", "config/", change);
      if (res.status === 400 && res.data) {
        const d = res.data.detail;
        showErrors(Array.isArray(d) ? d : [String(d)], []);
        return;
      }
      if (!res.ok) {
        showErrors([detailText(res.data) || "The gateway answered HTTP " + res.status + "."], []);
        return;
      }
      const changes = Object.entries(res.data.changes || {}).map(([k, [a, b]]) => k + " " + shown(a) + " → " + shown(b));
      setText("change-result", "Saved version " + res.data.version + ": " +
        (changes.length ? changes.join(", ") : "no setting changed") + ".");
      $("f-raw").value = "";
      $("f-note").value = "";
      await Promise.all([refreshConfig(), refreshHistory(), refreshStatus()]);
    } catch (err) {
      if (err instanceof AuthError) showLogin(err);
      else showErrors(["Could not reach the gateway: " + err.message], []);
    } finally {
      save.disabled = false;
    }
  });

  start();
})();
