// Login page: exchanges a pairing code for a session cookie.
"use strict";
document.getElementById("login").addEventListener("submit", async (e) => {
  e.preventDefault();
  const err = document.getElementById("login-error");
  err.hidden = true;
  const body = JSON.stringify({
    user: document.getElementById("user").value.trim(),
    code: document.getElementById("code").value.trim(),
  });
  try {
    const r = await fetch("/api/login", { method: "POST", headers: { "Content-Type": "application/json" }, body });
    if (r.ok) {
      location.href = "/";
      return;
    }
    const j = await r.json().catch(() => null);
    err.textContent = (j && j.error && j.error.message) || ("Login failed (HTTP " + r.status + ").");
  } catch (x) {
    err.textContent = "The console did not answer: " + x.message;
  }
  err.hidden = false;
});
