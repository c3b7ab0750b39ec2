// chat.js: the chat page. Model text goes through renderMarkdown (md.js)
// only; everything else is set with textContent. No HTML is ever parsed.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const state = {
    me: null,
    conv: null,
    es: null,
    shown: new Map(),    // message id → element
    pending: new Map(),  // inbound id → agent bubble being streamed
    finished: new Set(), // inbound ids whose final was shown
    tools: new Map(),    // tool call id → element
    files: [],
  };

  function text(tag, cls, s) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (s !== undefined) e.textContent = s;
    return e;
  }

  function banner(msg) {
    const b = $("banner");
    b.textContent = msg || "";
    b.hidden = !msg;
  }

  async function api(path, opts) {
    opts = opts || {};
    opts.headers = Object.assign({}, opts.headers || {});
    if (opts.method && opts.method !== "GET") opts.headers["X-CSRF-Token"] = state.me ? state.me.csrf : "";
    const r = await fetch(path, opts);
    if (r.status === 401) {
      location.href = "/login";
      throw new Error("logged out");
    }
    const j = await r.json().catch(() => ({}));
    if (!r.ok) {
      const e = new Error((j.error && j.error.message) || ("HTTP " + r.status));
      e.code = j.error && j.error.code;
      e.status = r.status;
      throw e;
    }
    return j;
  }

  function newConvID() {
    const a = new Uint8Array(8);
    crypto.getRandomValues(a);
    return Array.from(a, (b) => (b % 36).toString(36)).join("");
  }

  function newMsgID() {
    const a = new Uint8Array(12);
    crypto.getRandomValues(a);
    return Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function scroll() {
    const m = $("messages");
    m.scrollTop = m.scrollHeight;
  }

  // bubble renders one stored or live message.
  function bubble(m) {
    const role = m.role === "user" ? "user" : "agent";
    const kind = m.kind || (role === "user" ? "text" : "reply");
    const e = text("div", "msg " + role + " kind-" + kind);
    e.dataset.id = m.id;
    const body = text("div", "body");
    if (role === "user") {
      body.textContent = m.text || "";
    } else {
      body.appendChild(window.renderMarkdown(m.text || ""));
    }
    e.appendChild(body);
    if (m.files && m.files.length) e.appendChild(text("div", "files", "Files: " + m.files.join(", ")));
    return e;
  }

  function show(m) {
    if (state.shown.has(m.id)) return;
    let e;
    if (m.role === "agent" && m.in_reply_to && state.pending.has(m.in_reply_to)) {
      // The final replaces the streamed text, keeping the live tool calls.
      e = state.pending.get(m.in_reply_to);
      state.pending.delete(m.in_reply_to);
      const fresh = bubble(m);
      e.className = fresh.className;
      e.dataset.id = m.id;
      e.querySelector(".body").replaceWith(fresh.querySelector(".body"));
      if (fresh.querySelector(".files")) e.appendChild(fresh.querySelector(".files"));
    } else {
      e = bubble(m);
      if (m.role === "agent" && m.in_reply_to) e.dataset.replyTo = m.in_reply_to;
      // A user's message goes before the answer to it, which may have come
      // first over the event stream.
      const answer = m.role === "user" ? [...$("messages").children].find((c) => c.dataset.replyTo === m.id) : null;
      $("messages").insertBefore(e, answer || null);
    }
    state.shown.set(m.id, e);
    if (m.role === "agent" && m.in_reply_to) {
      state.finished.add(m.in_reply_to);
      $("typing").hidden = true;
    }
    scroll();
  }

  // pendingFor returns the streaming bubble of an inbound id.
  function pendingFor(id) {
    let e = state.pending.get(id);
    if (!e) {
      e = text("div", "msg agent pending");
      e.dataset.replyTo = id;
      e.appendChild(text("div", "tools"));
      e.appendChild(text("div", "body"));
      $("messages").appendChild(e);
      state.pending.set(id, e);
    }
    return e;
  }

  function onOut(o) {
    if (o.final) {
      show({ id: o.id, role: "agent", kind: o.kind, text: o.text, in_reply_to: o.in_reply_to,
        files: (o.attachments || []).map((a) => a.name || a.kind) });
      return;
    }
    if (state.finished.has(o.in_reply_to)) return; // stale delta or typing after the final
    if (o.kind === "typing") {
      $("typing").hidden = false;
      return;
    }
    if (o.kind === "delta") {
      const e = pendingFor(o.in_reply_to);
      const body = text("div", "body");
      body.appendChild(window.renderMarkdown(o.text || ""));
      e.querySelector(".body").replaceWith(body);
      scroll();
    }
  }

  function onEvent(ev) {
    const d = ev.data || {};
    if (ev.type === "turn_start") {
      $("typing").hidden = false;
      return;
    }
    if (ev.type === "turn_end") {
      $("typing").hidden = true;
      return;
    }
    if (!ev.in_reply_to || state.finished.has(ev.in_reply_to)) return;
    const tools = pendingFor(ev.in_reply_to).querySelector(".tools");
    if (ev.type === "tool_call") {
      const t = text("details", "tool running");
      const sum = text("summary");
      sum.appendChild(text("span", "tool-name", "Tool " + (d.name || "tool")));
      sum.appendChild(text("span", "tool-status", " running…"));
      t.appendChild(sum);
      t.appendChild(text("pre", "tool-args", d.arguments || ""));
      tools.appendChild(t);
      state.tools.set(d.id || d.name, t);
    } else if (ev.type === "tool_result") {
      let t = state.tools.get(d.id || d.name);
      if (!t) {
        t = text("details", "tool");
        t.appendChild(text("summary"));
        tools.appendChild(t);
      }
      t.classList.remove("running");
      if (d.error) t.classList.add("failed");
      const sum = t.querySelector("summary");
      sum.textContent = "";
      sum.appendChild(text("span", "tool-name", "Tool " + (d.name || "tool")));
      sum.appendChild(text("span", "tool-status", (d.error ? " failed" : " done") + " in " + (d.duration_ms || 0) + " ms"));
      t.appendChild(text("pre", "tool-result", d.text || ""));
    }
    scroll();
  }

  async function openConv(id) {
    if (state.es) state.es.close();
    state.conv = id;
    if (location.hash !== "#" + id) history.replaceState(null, "", "#" + id);
    state.shown.clear();
    state.pending.clear();
    state.finished.clear();
    state.tools.clear();
    $("messages").textContent = "";
    $("typing").hidden = true;
    document.querySelectorAll("#conv-list li").forEach((li) => li.classList.toggle("active", li.dataset.id === id));
    const es = new EventSource("/api/conversations/" + id + "/events");
    state.es = es;
    es.addEventListener("out", (e) => onOut(JSON.parse(e.data)));
    es.addEventListener("msg", (e) => show(JSON.parse(e.data)));
    es.addEventListener("ev", (e) => onEvent(JSON.parse(e.data)));
    es.onopen = async () => {
      // (Re)connected: the history fills in what the stream missed.
      try {
        const h = await api("/api/conversations/" + id + "/messages");
        if (state.conv !== id) return;
        h.messages.forEach(show);
        document.body.dataset.ready = "1";
      } catch (x) {
        banner("The history could not be loaded: " + x.message);
      }
    };
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) banner("The connection to the console was lost; reload the page.");
    };
  }

  async function loadConvs() {
    const j = await api("/api/conversations");
    const ul = $("conv-list");
    ul.textContent = "";
    const list = j.conversations || [];
    if (state.conv && !list.some((c) => c.id === state.conv)) list.unshift({ id: state.conv, title: "New conversation" });
    list.forEach((c) => {
      const li = text("li", c.id === state.conv ? "active" : "", c.title || "(untitled)");
      li.dataset.id = c.id;
      li.tabIndex = 0;
      li.addEventListener("click", () => openConv(c.id));
      ul.appendChild(li);
    });
  }

  async function send(msg) {
    banner("");
    const files = state.files;
    if (!msg.trim() && files.length === 0) return;
    const total = files.reduce((n, f) => n + f.size, 0);
    if (total > state.me.max_upload_bytes) {
      banner("The files are too large: at most " + Math.floor(state.me.max_upload_bytes / 1024) + " KiB in all per message.");
      return;
    }
    const fd = new FormData();
    const id = newMsgID();
    fd.append("id", id);
    fd.append("text", msg);
    files.forEach((f) => fd.append("files", f, f.name));
    $("send").disabled = true;
    // The box empties at once (a key event arriving after Enter must not
    // land in the sent text) and gets the text back if the send fails.
    const input = $("input");
    const typed = input.value;
    if (typed === msg) input.value = "";
    try {
      await api("/api/conversations/" + state.conv + "/messages", { method: "POST", body: fd });
      state.files = [];
      $("file").value = "";
      $("files").textContent = "";
      loadConvs().catch(() => {});
    } catch (x) {
      if (typed === msg && input.value.trim() === "") input.value = typed;
      banner(x.message);
    } finally {
      $("send").disabled = false;
    }
  }

  async function init() {
    try {
      state.me = await api("/api/me");
    } catch (x) {
      banner(x.message);
      return;
    }
    $("me").textContent = state.me.user;
    $("dash-link").hidden = !state.me.dashboard;
    if (!state.me.model) banner("No language model is configured in this Switchboard: the agent cannot answer. The operator must set the llm section of config.yaml.");
    const input = $("input");
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        send(input.value);
      }
    });
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      send(input.value);
    });
    $("stop").addEventListener("click", () => send("/stop"));
    $("new").addEventListener("click", () => send("/new"));
    $("file").addEventListener("change", (e) => {
      state.files = Array.from(e.target.files);
      $("files").textContent = state.files.length ? "Files: " + state.files.map((f) => f.name + " (" + Math.ceil(f.size / 1024) + " KiB)").join(", ") : "";
    });
    $("new-conv").addEventListener("click", () => {
      openConv(newConvID());
      loadConvs().catch(() => {});
    });
    $("toggle-convs").addEventListener("click", () => document.body.classList.toggle("show-convs"));
    $("logout").addEventListener("click", async () => {
      await api("/api/logout", { method: "POST" }).catch(() => {});
      location.href = "/login";
    });
    const hash = location.hash.slice(1);
    let id = /^[a-z0-9]{1,32}$/.test(hash) ? hash : null;
    if (!id) {
      const j = await api("/api/conversations").catch(() => ({ conversations: [] }));
      id = (j.conversations && j.conversations[0] && j.conversations[0].id) || newConvID();
    }
    await openConv(id);
    await loadConvs().catch((x) => banner(x.message));
  }

  init();
})();
