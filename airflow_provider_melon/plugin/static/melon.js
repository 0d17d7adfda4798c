// MeLoN pages: fetch the plugin's JSON (same origin, the Airflow session cookie) and draw it. No dependencies.
// Every value is the RM's or an AM's (any YARN user can run an AM that serves what it likes): every interpolation
// goes through esc() (text), num() (numbers) or href() (http(s) links only), also where the server already checked.
(function () {
  "use strict";
  const page = document.body.dataset.page;
  const root = document.getElementById("root");
  const params = new URLSearchParams(location.search);
  const conn = params.get("conn_id") ? "conn_id=" + encodeURIComponent(params.get("conn_id")) : "";
  const COLORS = ["#1976d2", "#388e3c", "#f57c00", "#7b1fa2", "#c2185b", "#0097a7", "#5d4037", "#455a64", "#afb42b"];
  const colorOf = {};
  const appColor = (id) => colorOf[id] || (colorOf[id] = COLORS[Object.keys(colorOf).length % COLORS.length]);
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  const isNum = (v) => typeof v === "number" && isFinite(v);
  const num = (v) => isNum(v) ? String(v) : "–";
  const pct = (v) => isNum(v) ? Math.max(0, Math.min(100, v)) : 0;
  const mib = (v) => !isNum(v) ? "–" : (v >= 1024 ? (v / 1024).toFixed(v % 1024 ? 1 : 0) + " GiB" : v + " MiB");
  const href = (u) => typeof u === "string" && /^https?:\/\//i.test(u) ? esc(u) : null;
  // or one of the plugin's own routes, relative to these pages (the AM logs the api-server serves)
  const own = (u) => typeof u === "string" && /^api\/jobs\/[A-Za-z0-9_]+\/logs(\/[A-Za-z0-9._-]+)?$/.test(u) ? esc(u) : null;
  const jobLink = (u) => href(u) || own(u);
  // pages live at <airflow>/melon/<page>; the UI at <airflow>/ (ti_url is the server's relative "dags/..." path)
  const ui = (rel) => typeof rel === "string" && /^dags\//.test(rel) ? esc("../" + rel) : null;
  const ANON = "#9aa5b1";

  // the login ended while the page was open (its JSON answers 401): reload the page (the UI's, when embedded), which
  // the api-server redirects to the login page and back; at most once a minute, never in a loop
  function loginAgain() {
    const last = Number(sessionStorage.getItem("melon-login-reload") || 0);
    if (Date.now() - last < 60000) return;
    sessionStorage.setItem("melon-login-reload", String(Date.now()));
    let where = window;
    try { if (window.top.location.origin === location.origin) where = window.top; } catch (e) { /* another origin */ }
    where.location.reload();
  }

  async function getJson(path) {
    const sep = path.includes("?") ? "&" : "?";
    const resp = await fetch("api/" + path + (conn ? sep + conn : ""), {credentials: "same-origin"});
    if (resp.status === 401) loginAgain();
    if (!resp.ok) throw new Error(resp.status + " " + (await resp.text()).slice(0, 300));
    return resp.json();
  }

  function gpuRow(node, gpu) {
    const segs = gpu.tasks.map((t, i) => {
      const mb = t.exclusive_gpus ? gpu.total_mb : (t.held_mb ?? t.expected_mb);  // what the ledger holds for it
      return {t, mb, color: t.anonymous ? ANON : appColor(t.app_id)};
    });
    let left = 0;
    const bars = segs.map((s) => {
      const w = isNum(gpu.total_mb) && gpu.total_mb && isNum(s.mb) ? pct(Math.min(100 - left, 100 * s.mb / gpu.total_mb)) : 0;
      const html = s.t.anonymous
        ? `<div class="seg anon" data-anonymous="1" title="${esc("another tenant: " + mib(s.mb) + " expected")}" style="left:${left}%;width:${w}%;background:${ANON}"></div>`
        : `<div class="seg" data-task="${esc(s.t.app_id + "/" + s.t.task)}" title="${esc(s.t.app_name + " " + s.t.task + ": " + mib(s.mb) + " expected")}"
        style="left:${left}%;width:${w}%;background:${s.color}">${esc(s.t.task)}</div>`;
      left += w;
      return html;
    }).join("");
    const used = isNum(gpu.used_mb) && isNum(gpu.total_mb) && gpu.total_mb ? `<div class="used" style="width:${pct(100 * gpu.used_mb / gpu.total_mb)}%" title="used ${mib(gpu.used_mb)}"></div>` : "";
    const tasks = gpu.tasks.map((t) => {
      if (t.anonymous) return `<div data-anonymous="1"><span style="color:${ANON}">■</span> <span class="muted">another tenant's task: ${mib(t.expected_mb)} expected</span></div>`;
      const link = ui(t.ti_url);
      const who = link ? `<a target="_top" href="${link}">${esc(t.dag_id + " / " + t.task_id + (isNum(t.map_index) && t.map_index !== -1 ? "[" + t.map_index + "]" : ""))}</a>` : esc(t.app_name);
      return `<div><span style="color:${appColor(t.app_id)}">■</span> ${esc(t.app_id)} ${esc(t.task)} — ${who}</div>`;
    }).join("");
    return `<div class="gpu" data-node="${esc(node.id)}" data-gpu="${num(gpu.index)}">
      <div><b>GPU ${num(gpu.index)}</b><br><span class="muted">${mib(gpu.total_mb)}</span></div>
      <div><div class="bar">${bars}${used}</div><div class="tasks">${tasks || '<span class="muted">idle</span>'}</div></div>
      <div class="muted">reserved ${mib(gpu.reserved_mb)} · free ${mib(gpu.free_mb)}<br>used (NVML) ${mib(gpu.used_mb)}</div></div>`;
  }

  async function renderGpus() {
    const d = await getJson("gpus");
    const t = d.totals;
    let html = `<h1>MeLoN GPUs</h1><div class="summary">
      <div><b data-total="nodes">${num(t.nodes)}</b>nodes</div><div><b data-total="gpus">${num(t.gpus)}</b>GPUs</div>
      <div><b>${mib(t.gpu_memory_mb)}</b>GPU memory</div><div><b>${mib(t.reserved_mb)}</b>reserved (expected)</div>
      <div><b data-total="tasks">${num(t.tasks_on_gpus)}</b>tasks on GPUs</div></div>`;
    for (const n of d.nodes) {
      html += `<div class="node" data-node-card="${esc(n.id)}"><h3>${esc(n.id)}<span class="badge">${num(n.gpu_count)} GPU(s), ${mib(n.gpu_memory_mb)}</span>
        <span class="badge ${n.mps ? "on" : ""}">MPS ${n.mps ? "on" : "off"}</span>
        <span class="badge">YARN: ${mib(n.yarn_gpu_memory_used_mb)} of GPU memory and ${num(n.yarn_gpus_used)} GPU(s) allocated</span></h3>
        ${n.gpus.map((g) => gpuRow(n, g)).join("")}
        ${n.waiting_for_a_gpu.length ? `<div class="muted">waiting for a GPU: ${n.waiting_for_a_gpu.map((x) => esc(x.app_id + " " + x.task)).join(", ")}</div>` : ""}</div>`;
    }
    html += `<h2>Queues</h2><table><tr><th>queue</th><th>state</th><th>GPU memory</th><th>used</th><th>headroom</th><th>GPUs used</th></tr>
      ${d.queues.map((q) => `<tr data-queue="${esc(q.name)}"><td>${esc(q.name)}</td><td>${esc(q.state)}</td><td class="num">${mib(q.gpu_memory_mb)}</td>
      <td class="num">${mib(q.gpu_memory_used_mb)}</td><td class="num">${mib(q.gpu_memory_headroom_mb)}</td><td class="num">${num(q.gpus_used)} / ${num(q.gpus)}</td></tr>`).join("")}</table>
      <p class="muted">Bars: each colour is one application's tasks, the width their expected GPU memory (what YARN and the ledger reserve);
      hatching: memory the tasks' processes use (NVML); grey: tasks of jobs you may not see. Refreshes every 10 s.</p>`;
    root.innerHTML = html;
  }

  function chart(series) {
    const pts = series.flatMap((s) => s.points.filter((p) => isNum(p.loss) && isNum(p.step)));
    if (!pts.length) return '<span class="muted">no step/loss reported yet</span>';
    const W = 360, H = 120, P = 24;
    const steps = pts.map((p) => p.step), losses = pts.map((p) => p.loss);
    const x0 = Math.min(...steps), x1 = Math.max(...steps), y0 = Math.min(...losses), y1 = Math.max(...losses);
    const sx = (v) => P + (x1 > x0 ? (v - x0) / (x1 - x0) : 0.5) * (W - 2 * P);
    const sy = (v) => H - P + 4 - (y1 > y0 ? (v - y0) / (y1 - y0) : 0.5) * (H - 2 * P);
    const lines = series.map((s, i) => {
      const p = s.points.filter((q) => isNum(q.loss) && isNum(q.step)).map((q) => `${sx(q.step).toFixed(1)},${sy(q.loss).toFixed(1)}`).join(" ");
      return p ? `<polyline data-series="${esc(s.task)}" fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="1.8" points="${p}"/>` : "";
    }).join("");
    return `<svg class="loss-chart" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">
      <line x1="${P}" y1="${H - P + 4}" x2="${W - P}" y2="${H - P + 4}" stroke="#9aa5b1"/><line x1="${P}" y1="8" x2="${P}" y2="${H - P + 4}" stroke="#9aa5b1"/>
      <text x="${P}" y="${H - 4}" font-size="10" fill="#6b7785">step ${num(x0)}</text><text x="${W - P}" y="${H - 4}" font-size="10" text-anchor="end" fill="#6b7785">${num(x1)}</text>
      <text x="2" y="14" font-size="10" fill="#6b7785">loss ${y1.toPrecision(3)}</text><text x="2" y="${H - P}" font-size="10" fill="#6b7785">${y0.toPrecision(3)}</text>${lines}</svg>`;
  }

  function jobRows(jobs) {
    if (!jobs.length) return '<p class="muted" data-empty="jobs">No MeLoN application.</p>';
    return `<table><tr><th>application</th><th>state</th><th>owner / queue</th><th>Airflow</th><th>tasks</th><th>step / loss</th><th>links</th></tr>
      ${jobs.map((j) => `<tr data-job="${esc(j.id)}"><td><b>${esc(j.name)}</b><br><span class="muted">${esc(j.id)}</span></td>
        <td><span class="badge ${esc(j.state)}">${esc(j.state)}</span><br><span class="muted">${esc(j.final_status)} · ${num(j.elapsed_s)} s · ${num(Math.round(pct(j.progress)))} %</span>${j.gang_waiting ? `<br><span class="muted" data-gang-waiting>${esc(j.gang_waiting)}</span>` : ""}${j.gpu_memory_note ? `<br><span class="muted" data-gpu-memory-note>${esc(j.gpu_memory_note)}</span>` : ""}</td>
        <td>${esc(j.user)}<br><span class="muted">${esc(j.queue)}</span></td>
        <td>${ui(j.ti_url) ? `<a target="_top" href="${ui(j.ti_url)}">${esc(j.dag_id)} / ${esc(j.task_id)}</a>` : esc(j.dag_id || "")}</td>
        <td class="tasks">${j.tasks.map((t) => `<div data-task-row="${esc(t.task)}">${esc(t.task)} <span class="badge ${esc(t.state)}">${esc(t.state)}</span> ${esc(t.host || "")} ${t.gpu != null ? "GPU " + esc(t.gpu) : ""}${isNum(t.step) ? " · step " + num(t.step) : ""}${isNum(t.expected_mb) ? " · " + mib(t.expected_mb) + " expected" : ""}${t.oom_growths ? ` <span class="muted" data-oom-growths>(grown ${num(t.oom_growths)}× after running out of GPU memory, from ${mib(t.initial_mb)})</span>` : ""}</div>`).join("") || '<span class="muted">(AM not serving)</span>'}</td>
        <td>${j.series.length ? chart(j.series) : `<span class="muted">${j.state === "RUNNING" ? "no step/loss reported yet" : "shown while the AM runs"}</span>`}</td>
        <td class="links">${Object.entries(j.links || {}).filter(([, u]) => jobLink(u)).map(([n, u]) => `<a target="_blank" rel="noopener noreferrer" href="${jobLink(u)}">${esc(n)}</a>`).join("<br>")}</td></tr>`).join("")}</table>
      ${jobs.some((j) => j.diagnostics) ? jobs.filter((j) => j.diagnostics).map((j) => `<p class="muted"><b>${esc(j.id)}</b>: ${esc(j.diagnostics)}</p>`).join("") : ""}`;
  }

  async function renderJobs() {
    const d = await getJson("jobs");
    root.innerHTML = `<h1>MeLoN jobs</h1>${jobRows(d.jobs)}<p class="muted">Running and recent MeLoN applications of the DAGs you may read. Refreshes every 10 s.</p>`;
  }

  async function renderTi() {
    const q = ["dag_id", "run_id", "task_id", "map_index"].map((k) => k + "=" + encodeURIComponent(params.get(k) ?? "")).join("&");
    const d = await getJson("ti?" + q);
    root.innerHTML = `<h1>YARN job of ${esc(d.task_id)}</h1>${d.jobs.length ? jobRows(d.jobs) : '<p class="muted" data-empty="jobs">This task instance submitted no YARN application (not a MeLoN task, or not run yet).</p>'}`;
  }

  function renderFit() {
    root.innerHTML = `<h1>Would it fit now?</h1>
      <form class="fit"><label>expected GPU memory per task<input name="gpu_memory" value="6GiB" size="8"></label>
      <label>or whole GPUs per task<input name="gpus" type="number" min="1" size="4"></label>
      <label>tasks<input name="instances" type="number" min="1" value="4" size="4"></label><button type="submit">Check</button></form>
      <div id="answer" class="muted">The pre-flight's answer on the cluster's capacity, and what fits on the GPUs' free memory now.</div>`;
    root.querySelector("form").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const f = new FormData(ev.target);
      const q = new URLSearchParams({instances: f.get("instances") || "1"});
      if (f.get("gpus")) q.set("gpus", f.get("gpus")); else q.set("gpu_memory", f.get("gpu_memory"));
      const out = document.getElementById("answer");
      out.className = "muted";
      out.textContent = "Checking…";
      try {
        const d = await getJson("fit?" + q.toString());
        out.className = "";
        out.innerHTML = `<div class="verdict" data-verdict="ever"><b class="${d.ever.fits ? "yes" : "no"}">${d.ever.fits ? "Fits the cluster" : "Never fits"}</b>: ${esc(d.ever.message)}</div>
          <div class="verdict" data-verdict="now"><b class="${d.now.fits ? "yes" : "no"}">${d.now.fits ? "Fits now" : "Not all now"}</b>: ${esc(d.now.message)}</div>
          <table><tr><th>node</th><th>GPU</th><th>free</th><th>tasks that fit</th></tr>${d.now.per_gpu.map((g) => `<tr><td>${esc(g.node)}</td><td>${num(g.gpu)}</td><td class="num">${mib(g.free_mb)}</td><td class="num">${num(g.tasks_fit)}</td></tr>`).join("")}</table>`;
      } catch (e) { out.className = "err"; out.textContent = e.message; }
    });
  }

  const renderers = {gpus: renderGpus, jobs: renderJobs, ti: renderTi, fit: renderFit};
  async function refresh() {
    try { await renderers[page](); document.body.dataset.loaded = String(Date.now()); }
    catch (e) { root.innerHTML = `<p class="err">Could not load: ${esc(e.message)}</p>`; document.body.dataset.loaded = "error"; }
  }
  refresh();
  if (page === "gpus" || page === "jobs") setInterval(refresh, 10000);
})();
