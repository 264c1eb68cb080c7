// The console's live parts, in plain JS: every user string goes in through textContent,
// never innerHTML (the one innerHTML takes rows the server rendered and escaped).
"use strict";
(function () {
  const KINDS = ["checkpoint", "writes", "delete", "pruned", "thread_deleted"];
  const base = document.body.dataset.base || "";

  function listen(url, onEvent) {
    const source = new EventSource(url, { withCredentials: true });
    KINDS.forEach((kind) => source.addEventListener(kind, (m) => onEvent(JSON.parse(m.data), m.lastEventId)));
    return source;
  }

  // as the server renders times: UTC to the millisecond
  const when = (iso) => (iso || "").replace("T", " ").slice(0, 23);

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function checkpointLink(e) {
    const a = document.createElement("a");
    a.href = base + "/checkpoint?thread_id=" + encodeURIComponent(e.thread_id) +
      "&checkpoint_ns=" + encodeURIComponent(e.checkpoint_ns) +
      "&checkpoint_id=" + encodeURIComponent(e.checkpoint_id);
    a.textContent = "checkpoint";
    return a;
  }

  // Threads: re-render the rows (with the page's filters) at most once a second.
  const threads = document.getElementById("threads");
  if (threads) {
    let pending = false;
    listen(threads.dataset.live, () => {
      if (pending) return;
      pending = true;
      setTimeout(async () => {
        pending = false;
        const q = new URLSearchParams(location.search);
        q.set("fragment", "rows");
        const r = await fetch(base + "/?" + q.toString(), { credentials: "same-origin" });
        if (r.ok) threads.tBodies[0].innerHTML = await r.text();
      }, 1000);
    });
  }

  // Thread: the audit badge, fetched after the page shows (verifying walks the whole chain).
  const badge = document.getElementById("verify");
  if (badge) {
    fetch(badge.dataset.src, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : Promise.reject(new Error("HTTP " + r.status))))
      .then((v) => {
        const refs = (v.references || []).join(", ");
        badge.classList.add(v.ok ? "ok" : "bad");
        badge.textContent = v.ok ? `audit chain ✓ ${v.events} events` : `audit chain ✗ ${v.problem || refs}`;
        badge.title = v.ok ? `${v.events} events, head ${v.head}` : `${v.problem || ""} ${refs}`;
        if (v.unchecked) {
          const note = document.createElement("span");
          note.className = "note";
          note.textContent = v.unchecked;
          badge.after(note);
        }
      })
      .catch((err) => {
        badge.classList.add("bad");
        badge.textContent = "audit chain: not verified (" + err.message + ")";
      });
  }

  // Thread: new events appended to the timeline.
  const timeline = document.getElementById("timeline");
  if (timeline && timeline.dataset.live) {
    listen(timeline.dataset.live, (e) => {
      if (timeline.querySelector(`tr[data-id="${CSS.escape(e.id)}"]`)) return;
      const row = document.createElement("tr");
      row.dataset.id = e.id;
      row.className = "kind-" + e.kind + (e.checkpoint_ns ? " subgraph" : "") + (e.interrupt ? " interrupt" : "") + " new";
      cell(row, when(e.time), "time");
      const kind = cell(row, e.kind === "checkpoint" ? "" : e.kind);
      if (e.kind === "checkpoint") kind.appendChild(checkpointLink(e));
      cell(row, "");
      cell(row, e.checkpoint_ns);
      cell(row, e.step);
      cell(row, e.task || e.node);
      cell(row, (e.channels || []).join(", "));
      timeline.tBodies[0].appendChild(row);
    });
  }

  // Live: every thread's events, newest first; pause closes the stream and resumes after
  // the last event shown, so nothing is missed or repeated.
  const live = document.getElementById("live");
  if (live) {
    const form = document.getElementById("live-filters");
    const button = document.getElementById("pause");
    const state = document.getElementById("live-state");
    let last = null;
    let source = null;
    const visible = (d) => {
      const f = new FormData(form);
      return (!f.get("thread") || d.thread === f.get("thread")) &&
        (!f.get("node") || d.node === f.get("node")) &&
        (!f.get("kind") || d.kind === f.get("kind"));
    };
    const refilter = () => live.querySelectorAll("tbody tr").forEach((r) => { r.hidden = !visible(r.dataset); });
    form.addEventListener("input", refilter);
    const start = () => {
      const url = live.dataset.live + (last ? "?after=" + encodeURIComponent(last) : "");
      source = listen(url, (e, id) => {
        last = id;
        const row = document.createElement("tr");
        row.dataset.thread = e.thread_id;
        row.dataset.node = e.node || "";
        row.dataset.kind = e.kind;
        cell(row, when(e.time), "time");
        const t = cell(row, "");
        const a = document.createElement("a");
        a.href = base + "/thread?thread_id=" + encodeURIComponent(e.thread_id);
        a.textContent = e.thread_id;
        t.appendChild(a);
        cell(row, e.kind);
        cell(row, e.checkpoint_ns);
        cell(row, e.step);
        cell(row, e.task || e.node);
        cell(row, (e.channels || []).join(", "));
        row.hidden = !visible(row.dataset);
        const body = live.tBodies[0];
        body.insertBefore(row, body.firstChild);
        while (body.rows.length > 500) body.deleteRow(-1);
      });
    };
    button.addEventListener("click", () => {
      if (source) {
        source.close();
        source = null;
        button.textContent = "resume";
        state.textContent = "paused";
      } else {
        start();
        button.textContent = "pause";
        state.textContent = "live";
      }
    });
    start();
  }
})();
