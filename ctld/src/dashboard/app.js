// gsched dashboard: polls the REST API every 2 s with the user's token
// (from #token=... in the address, or pasted) and draws the queue, every
// GPU instance as a memory bar split by the jobs in it, and the last hour
// of use. Text from the API is only ever set as textContent.
"use strict";

const POLL_MS = 2000;
const state = { token: null, jobs: [], instances: [], nodes: [], selected: null, timer: null };

function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// `#token=T` signs in (kept for this tab only); `#job=N` opens job N.
function readHash() {
  const t = location.hash.match(/token=([^&]+)/);
  if (t) sessionStorage.setItem("gsched-token", decodeURIComponent(t[1]));
  const j = location.hash.match(/job=(\d+)/);
  if (location.hash) history.replaceState(null, "", location.pathname);
  return { token: sessionStorage.getItem("gsched-token"), job: j ? Number(j[1]) : null };
}

class AuthError extends Error {}

async function api(path) {
  const r = await fetch(path, { headers: state.token ? { Authorization: "Bearer " + state.token } : {} });
  const body = await r.json().catch(() => ({}));
  if (r.status === 401) throw new AuthError(body.error || "not signed in");
  if (!r.ok) throw new Error(body.error || "HTTP " + r.status);
  return body;
}

function showLogin(reason) {
  document.getElementById("main").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("login-reason").textContent = reason || "";
}

// A stable colour per job id.
function colour(id) {
  const hue = (id * 137.508) % 360;
  return `hsl(${hue.toFixed(0)}, 62%, 46%)`;
}

function mib(n) {
  return n >= 1024 ? (n / 1024).toFixed(1) + " GiB" : n + " MiB";
}

function duration(s) {
  if (s === null || s === undefined) return "";
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), mm = Math.floor((s % 3600) / 60), ss = s % 60;
  const two = (x) => String(x).padStart(2, "0");
  return (d ? d + "-" : "") + (d || hh ? two(hh) + ":" : "") + two(mm) + ":" + two(ss);
}

function jobName(id) {
  const j = state.jobs.find((x) => x.job_id === id);
  return j ? j.name : "";
}

function instanceRow(inst) {
  const bar = h("div", { class: "bar", "data-instance": inst.uuid, "data-reserved-mib": inst.memory_reserved_mib });
  const total = Math.max(inst.memory_mib, 1);
  for (const r of inst.reservations) {
    const iso = inst.isolated_owner === r.job_id;
    const pct = Math.min(100, (100 * r.memory_mib) / total);
    const label = `job ${r.job_id}${iso ? " (isolated)" : ""} ${jobName(r.job_id)}`;
    bar.append(h("div", {
      class: "seg" + (iso ? " isolated" : ""),
      "data-job": r.job_id,
      title: `${label}: ${mib(r.memory_mib)}`,
      style: `width:${pct}%;` + (iso ? "" : `background:${colour(r.job_id)}`),
      onclick: () => select(r.job_id),
    }, label));
  }
  if (inst.memory_used_mib !== null && inst.memory_used_mib !== undefined && inst.memory_used_mib > 0) {
    bar.append(h("div", { class: "used", title: "in use as the GPU reports it", style: `width:${Math.min(100, (100 * inst.memory_used_mib) / total)}%` }));
  }
  const what = inst.isolated_owner && inst.active_tasks > 0
    ? `isolated job ${inst.isolated_owner} waits for ${inst.active_tasks} shared task${inst.active_tasks === 1 ? "" : "s"} to leave`
    : inst.isolated_owner ? `isolated: job ${inst.isolated_owner}`
    : inst.draining_for ? `draining for job ${inst.draining_for}`
    : `${inst.active_tasks} task${inst.active_tasks === 1 ? "" : "s"}, ${inst.warps_in_use} warps`;
  return h("div", { class: "instance" },
    h("span", { class: "name", title: inst.uuid }, inst.profile || inst.model),
    bar,
    h("span", { class: "info" }, `${mib(inst.memory_reserved_mib)} / ${mib(inst.memory_mib)} held · ${what}`));
}

function renderGpus() {
  const root = document.getElementById("gpus");
  root.replaceChildren();
  for (const n of state.nodes) {
    const box = h("div", { class: "node", "data-node": n.name },
      h("h3", {}, n.name, h("span", { class: "state" }, `${n.state} · ${n.workers_used}/${n.worker_limit} job slots · ${n.cpus} CPUs`)));
    const gpus = new Map();
    for (const i of state.instances.filter((i) => i.node === n.name)) {
      if (!gpus.has(i.gpu_index)) gpus.set(i.gpu_index, []);
      gpus.get(i.gpu_index).push(i);
    }
    for (const [idx, list] of [...gpus.entries()].sort((a, b) => a[0] - b[0])) {
      box.append(h("div", { class: "gpu" },
        h("div", { class: "gpu-title" }, `GPU ${idx} · ${list[0].model} · ${list.length} instance${list.length === 1 ? "" : "s"}`),
        list.map(instanceRow)));
    }
    root.append(box);
  }
}

function renderUtil(u) {
  const root = document.getElementById("util");
  const s = u.samples;
  const W = 900, H = 140, P = 28;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", "100%");
  svg.setAttribute("height", H);
  svg.setAttribute("id", "util-chart");
  const now = s.length ? s[s.length - 1].time : 0;
  const x = (t) => P + ((t - (now - 3600)) / 3600) * (W - 2 * P);
  const y = (f) => H - P + 4 - f * (H - P - 8);
  const line = (f, colour) => {
    const p = document.createElementNS(svg.namespaceURI, "polyline");
    p.setAttribute("points", s.map((q) => `${x(q.time).toFixed(1)},${y(f(q)).toFixed(1)}`).join(" "));
    p.setAttribute("fill", "none");
    p.setAttribute("stroke", colour);
    p.setAttribute("stroke-width", "2");
    svg.append(p);
  };
  for (const f of [0, 0.5, 1]) {
    const t = document.createElementNS(svg.namespaceURI, "text");
    t.setAttribute("x", 0); t.setAttribute("y", y(f) + 4); t.setAttribute("font-size", "10"); t.setAttribute("fill", "#687385");
    t.textContent = `${f * 100}%`;
    svg.append(t);
  }
  for (const [min, label] of [[-60, "-60 min"], [-30, "-30 min"], [0, "now"]]) {
    const t = document.createElementNS(svg.namespaceURI, "text");
    t.setAttribute("x", x(now + min * 60)); t.setAttribute("y", H - 2); t.setAttribute("font-size", "10");
    t.setAttribute("fill", "#687385"); t.setAttribute("text-anchor", min === 0 ? "end" : min === -60 ? "start" : "middle");
    t.textContent = label;
    svg.append(t);
  }
  const frac = (a, q) => (q.memory_total_mib ? a / q.memory_total_mib : 0);
  line((q) => frac(q.memory_reserved_mib, q), "#2f6fde");
  line((q) => frac(q.memory_used_mib, q), "#d62d20");
  const last = s[s.length - 1] || {};
  root.replaceChildren(svg, h("div", { class: "legend" },
    h("span", {}, h("i", { style: "background:#2f6fde" }), `GPU memory held: ${mib(last.memory_reserved_mib || 0)} of ${mib(last.memory_total_mib || 0)}`),
    h("span", {}, h("i", { style: "background:#d62d20" }), `in use (as the GPUs report it): ${mib(last.memory_used_mib || 0)}`),
    h("span", {}, `${last.running_jobs || 0} running, ${last.pending_jobs || 0} pending, ${last.shared_tasks || 0} shared tasks, ${last.isolated_instances || 0} isolated instances`),
    h("span", {}, `one sample every ${u.interval_s} s`)));
}

function filters() {
  return {
    state: document.getElementById("f-state").value,
    queue: document.getElementById("f-queue").value,
    user: document.getElementById("f-user").value.trim(),
    name: document.getElementById("f-name").value.trim(),
  };
}

function renderQueue() {
  const f = filters();
  const rows = state.jobs.filter((j) =>
    (f.state === "all" || (f.state === "active" ? ["PENDING", "RUNNING"].includes(j.job_state) : j.job_state === f.state)) &&
    (!f.queue || (f.queue === "isolated") === j.isolated) &&
    (!f.user || j.user_name === f.user) &&
    (!f.name || j.name.includes(f.name)));
  const body = document.querySelector("#queue tbody");
  body.replaceChildren(...rows.map((j) => h("tr", {
    class: "job-row" + (state.selected === j.job_id ? " selected" : ""),
    "data-job-id": j.job_id,
    onclick: () => select(j.job_id),
  },
    h("td", {}, j.array ? `${j.array.array_job_id}_${j.array.task_id}` : j.job_id),
    h("td", {}, j.name), h("td", {}, j.user_name),
    h("td", { class: "st-" + j.job_state }, j.job_state),
    h("td", {}, j.isolated ? "isolated" : "shared"),
    h("td", {}, j.gpu_request.mig_profile || (j.gpu_request.mem_mib ? mib(j.gpu_request.mem_mib) : "")),
    h("td", {}, j.nodes), h("td", {}, duration(j.elapsed)),
    h("td", {}, j.state_reason || ""))));
}

async function select(id) {
  state.selected = id;
  renderQueue();
  const box = document.getElementById("detail");
  box.hidden = false;
  box.replaceChildren(h("p", {}, `loading job ${id}...`));
  try {
    const [j, ev, tasks] = await Promise.all([
      api(`/api/v1/jobs/${id}`), api(`/api/v1/jobs/${id}/events`), api(`/api/v1/tasks?job=${id}`)]);
    let script;
    try {
      script = h("pre", { id: "job-script" }, (await api(`/api/v1/jobs/${id}/script`)).script);
    } catch (e) {
      script = h("p", { class: "error" }, e.message);
    }
    const field = (k, v) => [h("dt", {}, k), h("dd", {}, v === null || v === undefined ? "" : v)];
    box.replaceChildren(
      h("h2", {}, `Job ${id}: ${j.name}`),
      h("dl", {},
        field("State", j.job_state + (j.state_reason ? ` (${j.state_reason})` : "")),
        field("User", `${j.user_name} (${j.user_id})`),
        field("Queue", j.isolated ? "isolated" : "shared"),
        field("Node / instance", [j.nodes, j.gpu_instance].filter(Boolean).join(" / ")),
        field("GPU memory peak", j.gpu_mem_peak ? mib(j.gpu_mem_peak) : ""),
        field("Submitted", new Date(j.submit_time * 1000).toLocaleString()),
        field("Elapsed", duration(j.elapsed)),
        field("Exit", j.exit_code === null ? "" : j.exit_code + (j.exit_signal ? ` signal ${j.exit_signal}` : "")),
        field("Output", j.standard_output)),
      h("h3", {}, "State history"),
      h("table", {}, h("tbody", {}, ev.events.map((e) => h("tr", {},
        h("td", {}, new Date(e.time * 1000).toLocaleTimeString()), h("td", {}, e.kind),
        h("td", {}, e.node || ""), h("td", {}, e.detail || ""))))),
      h("h3", {}, "GPU reservations"),
      tasks.tasks.length
        ? h("table", {}, h("thead", {}, h("tr", {}, ["Task", "Instance", "Memory", "Warps", "Began", "Ended"].map((t) => h("th", {}, t)))),
            h("tbody", {}, tasks.tasks.map((t) => h("tr", {},
              h("td", {}, t.task), h("td", {}, t.instance), h("td", {}, mib(Math.ceil(t.bytes / 1048576))),
              h("td", {}, t.warps), h("td", {}, new Date(t.begin_ms).toLocaleTimeString()),
              h("td", {}, t.end_ms ? new Date(t.end_ms).toLocaleTimeString() : "held")))))
        : h("p", {}, j.isolated ? "The job holds its instance for its lifetime." : "No reservations recorded."),
      h("h3", {}, "Script"),
      script);
  } catch (e) {
    if (e instanceof AuthError) return showLogin(e.message);
    box.replaceChildren(h("p", { class: "error" }, e.message));
  }
}

// Only the jobs the state filter shows are fetched: on a busy cluster the
// finished ones are most of them.
function jobsQuery() {
  const s = filters().state;
  if (s === "active") return "/api/v1/jobs";
  return "/api/v1/jobs?state=" + encodeURIComponent(s === "all" ? "all" : s + ",PENDING,RUNNING");
}

async function refresh() {
  try {
    const [health, who, jobs, nodes, inst, util] = await Promise.all([
      api("/healthz"), api("/api/v1/whoami"), api(jobsQuery()),
      api("/api/v1/nodes"), api("/api/v1/instances"), api("/api/v1/utilization")]);
    state.jobs = jobs.jobs.sort((a, b) => b.job_id - a.job_id);
    state.nodes = nodes.nodes;
    state.instances = inst.instances;
    document.getElementById("login").hidden = true;
    document.getElementById("main").hidden = false;
    document.getElementById("cluster").textContent = `${health.cluster_name} · partition ${health.partition} · ${health.launch_policy}`;
    document.getElementById("summary").textContent = `${health.running} running · ${health.pending} pending · ${health.nodes_up} node${health.nodes_up === 1 ? "" : "s"} up`;
    document.getElementById("whoami").textContent = `${who.user}${who.admin ? " (admin)" : ""}`;
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    renderGpus();
    renderUtil(util);
    renderQueue();
    document.body.dataset.loaded = "1";
  } catch (e) {
    if (e instanceof AuthError) return showLogin(e.message);
    document.getElementById("updated").textContent = "update failed: " + e.message;
  }
}

document.getElementById("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.token = document.getElementById("login-token").value.trim();
  sessionStorage.setItem("gsched-token", state.token);
  refresh();
});
for (const id of ["f-queue", "f-user", "f-name"]) {
  document.getElementById(id).addEventListener("input", renderQueue);
}
document.getElementById("f-state").addEventListener("input", refresh);
const opened = readHash();
state.token = opened.token;
refresh().then(() => { if (opened.job !== null) select(opened.job); });
state.timer = setInterval(refresh, POLL_MS);
