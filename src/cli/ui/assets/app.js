// pallet's view: live pages. The server sends `refresh` on its event stream when what a page
// shows changed; the page fetches itself again and swaps its main content, keeping any
// confirmation the user has open and where the focus is. Everything else works without
// JavaScript (forms post, links navigate).
"use strict";
(function () {
  const main = document.getElementById("content");
  if (!main || !main.dataset.live || !window.EventSource) return;
  const status = document.getElementById("live-status");
  let busy = false, again = false, waiting = false;

  function busyWithForm() {
    // Someone typing a reason or looking at an open confirmation: do not pull it away.
    const open = main.querySelector("details.confirm[open]");
    const active = document.activeElement;
    return open !== null || (active && main.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName));
  }

  async function refresh() {
    if (busy) { again = true; return; }
    if (busyWithForm()) {
      if (!waiting) { waiting = true; setTimeout(() => { waiting = false; refresh(); }, 1000); }
      return;
    }
    busy = true;
    try {
      const response = await fetch(window.location.href, { headers: { "X-Pallet-Live": "1" }, credentials: "same-origin" });
      if (response.ok) {
        const next = new DOMParser().parseFromString(await response.text(), "text/html").getElementById("content");
        // Someone opened a form while the page was fetched: try again once they are done.
        if (next && busyWithForm()) again = true;
        else if (next) {
          const open = new Set(Array.from(main.querySelectorAll("details[id]")).filter(d => d.open).map(d => d.id));
          const closed = new Set(Array.from(main.querySelectorAll("details[id]")).filter(d => !d.open).map(d => d.id));
          main.innerHTML = next.innerHTML;
          main.querySelectorAll("details[id]").forEach(d => {
            if (open.has(d.id)) d.open = true;
            if (closed.has(d.id)) d.open = false;
          });
          main.dataset.refreshed = String(Date.now());
          if (status) status.textContent = "Updated " + new Date().toLocaleTimeString();
        }
      }
    } catch (e) {
      // The next event tries again.
    } finally {
      busy = false;
      if (again) { again = false; setTimeout(refresh, 100); }
    }
  }

  const source = new EventSource(main.dataset.live);
  source.addEventListener("refresh", refresh);
  source.addEventListener("open", () => { main.dataset.liveConnected = "true"; });
})();
