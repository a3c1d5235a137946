"use strict";
// The capgate staff status page. It fetches the staff API next to it
// (status/, config/, config/history/), sending the staff token, if one was
// given, as "Authorization: Token <t>". The token is kept in sessionStorage:
// this tab only. Data from the API is always written as text, never as markup.
(() => {
  const TOKEN_KEY = "capgate.staffToken";
  const POLL_MS = 2000;
  const HISTORY_LIMIT = 20;
  const TOP_USERS = 10;
  const TIERS = ["staff", "core", "early_access", "preview"];
  const LIMIT_KEYS = ["api_heavy.cluster", "api_heavy.per_task", "es2_knn", "reserve_single_row"]
    .concat(TIERS.map((t) => "tiers." + t), TIERS.map((t) => "per_user." + t));

  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let pollTimer = 0;
  let running = false;
  let pollGen = 0;
  let loaded = {}; // the form's values as last loaded: dotted key → string

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

  // api calls the staff API; paths are relative to the page (/capacity/).
  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (token) headers.Authorization = "Token " + token;
    const init = { method, headers, cache: "no-store", credentials: "same-origin" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
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

  async function refreshStatus() {
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

  // bindingRowId is the id of the row of the lane calls wait on.
  function bindingRowId(binding) {
    if (!binding) return "";
    if (binding.startsWith("task:")) return "task-" + binding.slice(5);
    if (binding.startsWith("tier:")) return "lane-tier-" + binding.slice(5);
    return "lane-" + binding;
  }

  function renderStatus(s) {
    badge("mode", s.mode, s.mode === "enforce" ? "enforce" : "");
    badge("enforce-for", s.enforce_for);
    // lanes_health is the store's health under a name for every store;
    // an older gateway sends only "redis".
    const health = s.lanes_health !== undefined ? s.lanes_health : s.redis;
    const storeOK = health === "ok";
    badge("store", (STORE_NAMES[s.lanes] || s.lanes || "unknown") + " · " + (storeOK ? "ok" : "unavailable"), storeOK ? "" : "bad");
    if (!storeOK) setText("status-problem", "The lane store failed: " + health);
    // One time zone on the page: UTC, as the history.
    setText("updated", "updated " + new Date().toISOString().slice(11, 19) + " UTC");

    const lanes = [];
    if (s.api_heavy) {
      lanes.push(laneRow("lane-api_heavy", "api_heavy", "(bulk calls up to " + s.api_heavy.bulk_limit + ")",
        s.api_heavy.in_flight, s.api_heavy.limit, s.api_heavy.waiting, s.api_heavy));
    }
    if (s.es2_knn) lanes.push(laneRow("lane-es2_knn", "es2_knn", "", s.es2_knn.in_flight, s.es2_knn.limit, s.es2_knn.waiting, s.es2_knn));
    for (const t of TIERS) {
      const l = (s.tiers || {})[t];
      if (l) lanes.push(laneRow("lane-tier-" + t, "tier " + t, "", l.in_flight, l.limit, l.waiting));
    }
    renderRows($("lanes").tBodies[0], lanes, buildLane, updateLane);

    const tasks = Object.entries(s.tasks || {}).sort((a, b) => b[1].in_flight - a[1].in_flight || (a[0] < b[0] ? -1 : 1))
      .map(([id, l]) => laneRow("task-" + id, id, "", l.in_flight, l.limit, l.waiting, l));
    renderRows($("tasks").tBodies[0], tasks, buildLane, updateLane);
    $("tasks").hidden = tasks.length === 0;
    $("tasks-none").hidden = tasks.length > 0;

    const users = Object.entries(s.users || {}).sort((a, b) => b[1].in_flight - a[1].in_flight || (a[0] < b[0] ? -1 : 1))
      .slice(0, TOP_USERS).map(([id, u]) => ({ id: "user-" + id, name: id, inFlight: u.in_flight, waiting: u.waiting || 0 }));
    renderRows($("users").tBodies[0], users, (r) => {
      const tr = el("tr");
      tr.id = r.id;
      const th = el("th", r.name);
      th.scope = "row";
      tr.append(th, el("td", "", "count"));
      return tr;
    }, (tr, r) => {
      tr.querySelector(".count").textContent = String(r.inFlight) + waitText(r.waiting);
    });
    $("users").hidden = users.length === 0;
    $("users-none").hidden = users.length > 0;

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
    const bound = lanes.concat(tasks).find((r) => r.id === bindId);
    const where = bound ? bound.name + (bound.note ? " " + bound.note : "") + ": " + countText(bound.inFlight, bound.limit, bound.waiting) : "";
    setText("binding", !bound ? "No lane is full: no call waits."
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
    add("tier", d.by_tier || {}, TIERS.concat(Object.keys(d.by_tier || {}).filter((t) => !TIERS.includes(t)).sort()));
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
  }

  // rollback makes a new version equal to version, with the form's note.
  async function rollback(version, button) {
    clearErrors();
    const note = $("f-note").value.trim();
    if (!note) {
      showErrors(["Say in the note why you roll back to version " + version + "."], [$("f-note")]);
      return;
    }
    button.disabled = true;
    try {
      const res = await api("POST", "config/rollback/", { version, note });
      if (!res.ok) {
        const d = res.data && res.data.detail;
        showErrors(Array.isArray(d) ? d : [detailText(res.data) || "The gateway answered HTTP " + res.status + "."], []);
        return;
      }
      setText("change-result", "Saved version " + res.data.version + ": back to version " + version + ".");
      $("f-note").value = "";
      await Promise.all([refreshConfig(), refreshHistory(), refreshStatus()]);
    } catch (err) {
      if (err instanceof AuthError) showLogin(err);
      else showErrors(["Could not reach the gateway: " + err.message], []);
    } finally {
      button.disabled = false;
    }
  }

  // ---- the change form ----

  function fieldId(key) {
    return "f-" + key.replace(/\./g, "-");
  }

  function buildLimitFields() {
    const box = $("limit-fields");
    for (const key of LIMIT_KEYS) {
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

  buildLimitFields();
  start();
})();
