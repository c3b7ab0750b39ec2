// dash.js: the operator's dashboard. Everything is set with textContent.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  let lastTrace = 0;
  let selected = null; // the session whose model requests are shown
  const samples = []; // {t, turns, errors, calls}
  const MAX_SAMPLES = 60;
  const MAX_TRACE_ROWS = 300;

  async function get(path) {
    const r = await fetch(path);
    if (r.status === 401) {
      location.href = "/login";
      throw new Error("logged out");
    }
    const j = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error((j.error && j.error.message) || ("HTTP " + r.status));
    return j;
  }

  function row(cells, cls) {
    const tr = document.createElement("tr");
    if (cls) tr.className = cls;
    cells.forEach((c) => {
      const td = document.createElement("td");
      td.textContent = c === undefined || c === null ? "" : String(c);
      tr.appendChild(td);
    });
    return tr;
  }

  function ago(iso) {
    const t = Date.parse(iso);
    if (!t || t < 0) return "—";
    const s = Math.max(0, Math.round((Date.now() - t) / 1000));
    return s < 60 ? s + " s ago" : s < 3600 ? Math.round(s / 60) + " min ago" : Math.round(s / 3600) + " h ago";
  }

  async function sessions() {
    const j = await get("/api/dash/sessions");
    const tb = $("sessions").querySelector("tbody");
    tb.textContent = "";
    $("sessions-note").textContent = j.available ? (j.sessions.length ? "" : "No sessions in memory.") : "The agent's sessions are not available.";
    j.sessions.forEach((s) => {
      const i = s.key.indexOf("/");
      const tr = row([s.key.slice(0, i), s.key.slice(i + 1), s.state, s.queued, ago(s.last_activity)], "state-" + s.state + (s.key === selected ? " selected" : ""));
      tr.dataset.key = s.key;
      tr.addEventListener("click", () => {
        selected = s.key;
        tick(requests);
      });
      tb.appendChild(tr);
    });
  }

  // requests shows the last model requests of the selected session.
  async function requests() {
    if (!selected) return;
    const j = await get("/api/dash/requests?session=" + encodeURIComponent(selected));
    $("requests-session").textContent = "of " + selected + " (newest first, secrets redacted)";
    const out = $("requests");
    if (!j.available) {
      out.textContent = "Model requests are not recorded.";
      return;
    }
    out.textContent = j.requests.length ? j.requests.map((r) =>
      new Date(r.time).toLocaleTimeString() + " — " + r.duration_ms + " ms, " + r.usage.prompt_tokens + " in / " + r.usage.completion_tokens + " out tokens" +
      (r.finish_reason ? ", " + r.finish_reason : "") + (r.error ? ", ERROR: " + r.error : "") + (r.truncated ? " (shortened)" : "") + "\n" +
      JSON.stringify(r.request, null, 2)).join("\n\n") : "No model request recorded for this session.";
  }

  function describe(ev) {
    const d = ev.data || {};
    switch (ev.type) {
      case "tool_call":
        return d.name + " " + (d.arguments || "");
      case "tool_result":
        return d.name + (d.error ? " FAILED" : " ok") + " in " + (d.duration_ms || 0) + " ms, " + (d.text || "").length + " chars: " + (d.text || "").slice(0, 120);
      case "usage":
        return "model call: " + (d.prompt_tokens || d.PromptTokens || 0) + " in / " + (d.completion_tokens || d.CompletionTokens || 0) + " out tokens";
      case "step_end":
        return "step " + (d.step || "") + ", " + (d.tool_calls || 0) + " tool calls" + (d.duration_ms ? ", " + d.duration_ms + " ms" : "");
      case "turn_end":
        return (d.stop_reason || "") + (d.duration_ms ? " in " + d.duration_ms + " ms" : "");
      default:
        return JSON.stringify(d).slice(0, 160);
    }
  }

  async function traces() {
    const j = await get("/api/dash/traces?after=" + lastTrace);
    const tb = $("traces").querySelector("tbody");
    j.events.forEach((ev) => {
      lastTrace = Math.max(lastTrace, ev.n);
      if (ev.type === "llm_delta" || ev.type === "reasoning_delta") return;
      const cls = "ev-" + ev.type + ((ev.data && ev.data.error) ? " failed" : "");
      tb.insertBefore(row([new Date(ev.time).toLocaleTimeString(), ev.channel + "/" + ev.chat_id, ev.type, describe(ev)], cls), tb.firstChild);
    });
    while (tb.children.length > MAX_TRACE_ROWS) tb.removeChild(tb.lastChild);
  }

  async function health() {
    const j = await get("/api/dash/health");
    const ul = $("health");
    ul.textContent = "";
    if (!j.available) {
      ul.appendChild(Object.assign(document.createElement("li"), { textContent: "Health is not available." }));
      return;
    }
    const li = document.createElement("li");
    li.className = j.ready ? "ok" : "bad";
    li.textContent = j.ready ? "Ready: every component is up." : "Not ready:";
    ul.appendChild(li);
    Object.keys(j.not_ready).sort().forEach((k) => {
      const e = document.createElement("li");
      e.className = "bad";
      e.textContent = k + ": " + j.not_ready[k];
      ul.appendChild(e);
    });
  }

  async function dlq() {
    const tb = $("dlq").querySelector("tbody");
    try {
      const j = await get("/api/dash/dlq");
      tb.textContent = "";
      if (!j.dead_letters.length) tb.appendChild(row(["", "", "No dead letters.", ""]));
      j.dead_letters.forEach((d) => tb.appendChild(row([new Date(d.time).toLocaleString(), d.subject, d.reason, d.excerpt])));
    } catch (x) {
      tb.textContent = "";
      tb.appendChild(row(["", "", x.message, ""]));
    }
  }

  function chart(title, values, fmt) {
    const box = document.createElement("div");
    box.className = "chart";
    const h = document.createElement("div");
    const last = values.length ? values[values.length - 1] : 0;
    h.textContent = title + ": " + fmt(last);
    const c = document.createElement("canvas");
    c.width = 240;
    c.height = 48;
    const g = c.getContext("2d");
    const max = Math.max(1e-9, ...values);
    g.strokeStyle = "#3b82f6";
    g.beginPath();
    values.forEach((v, i) => {
      const x = values.length > 1 ? (i / (values.length - 1)) * (c.width - 2) + 1 : 1;
      const y = c.height - 2 - (v / max) * (c.height - 4);
      if (i === 0) g.moveTo(x, y);
      else g.lineTo(x, y);
    });
    g.stroke();
    box.appendChild(h);
    box.appendChild(c);
    return box;
  }

  async function metrics() {
    const j = await get("/api/dash/metrics");
    const box = $("metrics");
    if (!j.available) {
      box.textContent = "Metrics are not available.";
      return;
    }
    const m = j.metrics;
    samples.push({ t: Date.now() / 1000, turns: m.turns_total, errors: m.model_errors_total, p50: (m.turn_latency_seconds || {}).p50 || 0, p95: (m.turn_latency_seconds || {}).p95 || 0 });
    if (samples.length > MAX_SAMPLES) samples.shift();
    const rate = (k) => samples.slice(1).map((s, i) => Math.max(0, (s[k] - samples[i][k]) / Math.max(0.001, s.t - samples[i].t)));
    box.textContent = "";
    box.appendChild(chart("Turns/s", rate("turns"), (v) => v.toFixed(2)));
    box.appendChild(chart("Turn latency p50 (s)", samples.map((s) => s.p50), (v) => (v < 0 ? "> 300" : v.toString())));
    box.appendChild(chart("Turn latency p95 (s)", samples.map((s) => s.p95), (v) => (v < 0 ? "> 300" : v.toString())));
    box.appendChild(chart("Model errors/s", rate("errors"), (v) => v.toFixed(2)));
    const tot = document.createElement("div");
    tot.className = "muted";
    tot.textContent = "Totals: " + m.turns_total + " turns, " + m.model_requests_total + " model requests (" + m.model_errors_total + " failed), " + m.tool_calls_total + " tool calls.";
    box.appendChild(tot);
  }

  async function config() {
    const j = await get("/api/dash/config");
    $("config").textContent = j.available ? JSON.stringify(j.config, null, 2) : "The configuration is not available.";
  }

  async function tick(f) {
    try {
      await f();
    } catch (x) {
      // shown on the next successful poll
    }
  }

  function poll() {
    tick(sessions);
    tick(traces);
    tick(health);
    tick(metrics);
    tick(requests);
  }
  poll();
  tick(dlq);
  tick(config);
  setInterval(poll, 2000);
  setInterval(() => tick(dlq), 10000);
})();
