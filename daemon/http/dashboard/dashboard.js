// The dtrain dashboard (docs/architecture/daemon.md, "Dashboard"): read-only pages over the
// controller's JSON (/api/...), refreshed every second while a job runs. Charts are Dygraphs
// (Debian's libjs-dygraphs, embedded in dtraind). Every chart and table says how much it holds in
// data-* attributes, which the browser test (tests/dashboard) reads.
"use strict";

// Script errors and files that fail to load (capture: those do not bubble) are counted.
window.addEventListener("error", () => {
  document.body.dataset.errors = String(Number(document.body.dataset.errors) + 1);
}, true);

const charts = {};  // id -> Dygraph, kept across refreshes so they grow in place
let timer = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

async function get(path) {
  const r = await fetch(path, {cache: "no-store"});
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function seconds(s) {
  if (!(s > 0)) return "";
  return s < 90 ? s.toFixed(0) + " s" : (s / 60).toFixed(1) + " min";
}

function table(headers, rows) {
  return el("table", {}, el("tr", {}, ...headers.map(h => el("th", {}, h))),
            ...rows.map(r => el("tr", {}, ...r.map(c => el("td", {}, c instanceof Node ? c : c ?? "")))));
}

// ---- the job list and the nodes ----
async function showJobs() {
  const [jobs, nodes] = await Promise.all([get("/api/jobs"), get("/api/nodes")]);
  document.getElementById("where").textContent = "jobs";
  const page = document.getElementById("page");
  page.replaceChildren(
    el("h2", {}, "Jobs"),
    table(["id", "name", "state", "nodes", "result", "duration"],
          jobs.map(j => [el("a", {href: "#/job/" + j.id}, j.id), j.name,
                         el("span", {class: "state-" + j.state}, j.state),
                         (j.nodes || []).length,
                         headline(j),
                         seconds((j.finished_at || Date.now() / 1000) - (j.started_at || 0))])),
    el("h2", {}, "Nodes"),
    table(["name", "state", "address", "cores", "GPUs", "jobs"],
          nodes.map(n => [n.name, n.state, n.address + ":" + n.data_port, n.cores,
                          (n.gpus || []).map(g => g.name + " (" + Math.round((g.memory_bytes || 0) / 1048576) + " MiB)").join(", "),
                          nodeJobs(n)])));
  schedule(showJobs, 2000);
}

// The jobs running on a node, a share with its cores and GPUs ("3f2a... (2 cores, GPU 0)").
function nodeJobs(n) {
  return (n.jobs || []).map(h => h.whole_node ? h.id :
      h.id + " (" + h.cores + (h.cores === 1 ? " core" : " cores") +
      ((h.gpus || []).length ? ", GPU " + h.gpus.join(",") : "") + ")").join(", ");
}

// ---- one job ----
// Series per node (or per node/worker) from the stats rows: {x -> {series -> y}} into Dygraph rows.
function series(rows, cols, key, x, y, filter) {
  const byX = new Map(), names = new Set();
  for (const r of rows) {
    if (filter && !filter(r)) continue;
    const name = key(r), xv = r[cols[x]], yv = r[cols[y]];
    if (xv == null || yv == null) continue;
    names.add(name);
    if (!byX.has(xv)) byX.set(xv, {});
    byX.get(xv)[name] = yv;
  }
  const labels = [...names].sort();
  const data = [...byX.keys()].sort((a, b) => a - b)
    .map(xv => [xv, ...labels.map(n => byX.get(xv)[n] ?? null)]);
  return {labels, data};
}

function chart(id, title, s, xlabel, opts) {
  let box = document.getElementById(id);
  if (!box) return;
  box.dataset.points = String(s.data.length);
  box.dataset.series = s.labels.join(",");
  box.dataset.last = String(s.data.length ? s.data[s.data.length - 1][0] : 0);
  if (!s.data.length) { box.textContent = "no data yet"; delete charts[id]; return; }
  const options = Object.assign({labels: [xlabel, ...s.labels], connectSeparatedPoints: true,
                                 legend: "always", labelsSeparateLines: false, xlabel,
                                 strokeWidth: 1.2, axes: {y: {axisLabelWidth: 64}}}, opts || {});
  if (charts[id]) charts[id].updateOptions(Object.assign({file: s.data}, options));
  else { box.textContent = ""; charts[id] = new Dygraph(box, s.data, options); }
}

function card(id, title, note) {
  return el("div", {class: "card"}, el("h3", {}, title),
            el("div", {id, class: "chart"}), note ? el("div", {class: "note"}, note) : "");
}

function matrixTable(m) {
  const max = Math.max(1, ...m.flat());
  const t = el("table", {class: "matrix", id: "confusion", "data-rows": m.length,
                         "data-cells": m.length * (m[0] || []).length});
  t.append(el("tr", {}, el("th", {}, "actual \\ predicted"), ...m.map((_, i) => el("th", {}, i))));
  m.forEach((row, i) => t.append(el("tr", {}, el("th", {}, i), ...row.map(v => {
    const td = el("td", {title: v}, v);
    td.style.background = "rgba(30, 90, 200," + (v / max).toFixed(3) + ")";
    if (v / max > 0.5) td.style.color = "#fff";
    return td;
  }))));
  return t;
}

// The job list's figure: accuracy, a regression's R² per target, or an inference's rows.
function headline(j) {
  const r = j.result || {};
  if (r.accuracy != null) return Number(r.accuracy).toFixed(4);
  if (r.regression) return "R² " + (r.regression.r2 || []).map(v => v == null ? "-" : Number(v).toFixed(4)).join(", ");
  if (r.rows != null) return r.rows + " predictions";
  return "";
}

// What an evaluation found: accuracy and the confusion matrix, each class's AUC, or a
// regression's figures per target column.
function evaluationView(j) {
  const result = j.result || {};
  const parts = [];
  if (result.confusion) {
    parts.push(el("div", {}, "accuracy " + Number(result.accuracy).toFixed(4) + ", top-" + result.top_n +
                             " " + Number(result.top_n_accuracy).toFixed(4) + ", test loss " +
                             Number(result.test_loss).toFixed(4) + " over " + result.evaluated_examples + " examples"),
               matrixTable(result.confusion));
  }
  if (result.auc) {
    parts.push(el("div", {}, "ROC, each class against the rest: macro AUC " +
                             (result.macro_auc == null ? "-" : Number(result.macro_auc).toFixed(4)) +
                             (result.roc_csv ? " (curves in " + result.roc_csv + ")" : "")),
               table(["class", "AUC"], result.auc.map((v, c) => [c, v == null ? "-" : Number(v).toFixed(4)])));
  }
  if (result.regression) {
    const m = result.regression, f = v => v == null ? "-" : Number(v).toPrecision(5);
    parts.push(el("div", {}, "test loss " + Number(result.test_loss).toPrecision(5) + " over " +
                             result.evaluated_examples + " examples"),
               table(["target", "MSE", "MAE", "RMSE", "R²"],
                     (m.mse || []).map((_, c) => [c, f(m.mse[c]), f(m.mae[c]), f(m.rmse[c]), f(m.r2[c])])));
  }
  if (parts.length) return parts;
  return [j.state === "running" || j.state === "queued" ? "after the job" : "none"];
}

// An evaluation or inference job (docs/architecture/daemon.md, "Evaluation and inference jobs"):
// what it reads, its parts, what it wrote; no training charts.
function showTask(j, page) {
  const req = j.task_request || {}, parts = j.task_parts || {done: 0, total: 0}, result = j.result || {};
  const rows = [["task", j.task], ["data", req.path + (req.labels ? " (labels " + req.labels + ")" : "")],
                ["nodes", (j.nodes || []).join(", ") + ((j.lost_nodes || []).length ? " (lost: " + j.lost_nodes.join(", ") + ")" : "")],
                ["parts", el("span", {}, el("progress", {id: "parts", max: Math.max(1, parts.total), value: parts.done,
                                                        "data-done": parts.done, "data-total": parts.total}),
                             " " + parts.done + " of " + parts.total + " done")]];
  if (j.task === "infer")
    rows.push(["output", result.output ? result.rows + " predictions in " + result.output
                         : result.files ? result.rows + " predictions in " + result.files.length + " part files under " + req.output_dir
                         : req.output_dir]);
  page.replaceChildren(el("h2", {id: "job-title"}),
                       el("table", {id: "task"}, ...rows.map(r => el("tr", {}, el("th", {}, r[0]), el("td", {}, r[1])))),
                       ...(j.task === "eval" ? [el("h3", {}, "Evaluation"), el("div", {id: "evaluation"}, ...evaluationView(j))] : []),
                       el("h3", {}, "Log"), el("pre", {class: "log", id: "log"}, (j.log || []).join("\n")));
}

async function showJob(id) {
  const j = await get("/api/job?id=" + encodeURIComponent(id));
  document.getElementById("where").textContent = "job " + id + " (" + (j.name || "") + ")";
  if (j.task) {
    const page = el("div", {id: "job-page", "data-id": id, "data-task": j.task});
    document.getElementById("page").replaceChildren(page);
    showTask(j, page);
    document.getElementById("job-title").replaceChildren(
      el("span", {class: "state-" + j.state}, j.state),
      " · " + (j.task === "eval" ? "evaluation" : "inference") + " on " + (j.nodes || []).length + " nodes",
      j.error ? " · " + j.error : "");
    document.getElementById("live").textContent =
      j.state === "running" || j.state === "queued" ? "live · every second" : "";
    if (j.state === "running" || j.state === "queued") schedule(() => showJob(id), 1000);
    return;
  }
  let page = document.getElementById("job-page");
  if (!page || page.dataset.id !== id) {
    for (const k of Object.keys(charts)) delete charts[k];
    page = el("div", {id: "job-page", "data-id": id},
      el("h2", {id: "job-title"}),
      el("div", {class: "grid"},
         card("loss", "Loss per node", "each worker's minibatch loss at its recorded steps"),
         card("accuracy", "Test accuracy per epoch"),
         card("speed", "Samples/s per worker"),
         card("tau", "Threshold τ per worker"),
         card("density", "Density per worker", "share of the parameters an update carries"),
         card("bytes", "Bytes on the wire per step vs dense", " "),
         card("times", "Step time split (ms), node-1 worker 0")),
      el("h3", {}, "The mesh (as built at the start) and its links"), el("div", {id: "links"}),
      el("h3", {}, "Evaluation"), el("div", {id: "evaluation"}),
      el("h3", {}, "Log"), el("pre", {class: "log", id: "log"}));
    document.getElementById("page").replaceChildren(page);
  }
  const result = j.result || {};
  document.getElementById("job-title").replaceChildren(
    el("span", {class: "state-" + j.state}, j.state), " · ", (j.nodes || []).join(", "),
    headline(j) ? " · " + (result.accuracy != null ? "accuracy " : "") + headline(j) : "",
    j.error ? " · " + j.error : "");
  const st = j.stats || {steps: [], step_columns: [], epochs: [], epoch_columns: [], links: [], link_columns: []};
  const c = Object.fromEntries(st.step_columns.map((n, i) => [n, i]));
  const ec = Object.fromEntries(st.epoch_columns.map((n, i) => [n, i]));
  const byNode = r => r[0];
  const byWorker = r => r[0] + "/w" + r[c.worker];
  // Per-step figures are noisy: a rolling mean over 10 recorded steps.
  const smooth = {rollPeriod: 10};
  chart("loss", "loss", series(st.steps, c, byNode, "iteration", "loss", r => r[c.worker] === 0), "iteration", smooth);
  chart("accuracy", "accuracy", series(st.epochs, ec, byNode, "epoch", "accuracy", r => r[ec.accuracy] >= 0), "epoch",
        {drawPoints: true, pointSize: 3});
  chart("speed", "samples/s", series(st.steps, c, byWorker, "iteration", "samples_per_sec"), "iteration", smooth);
  chart("tau", "tau", series(st.steps, c, byWorker, "iteration", "tau"), "iteration", {logscale: true});
  chart("density", "density", series(st.steps, c, byWorker, "iteration", "density"), "iteration",
        {logscale: true, rollPeriod: 10});
  chart("bytes", "bytes", series(st.steps, c, byWorker, "iteration", "message_bytes"), "iteration",
        {logscale: true, rollPeriod: 10});
  const params = j.params || 0;
  const sent = st.steps.map(r => r[c.message_bytes]).filter(v => v > 0);
  const mean = sent.reduce((a, b) => a + b, 0) / Math.max(1, sent.length);
  document.getElementById("bytes").nextSibling.textContent = params > 0
    ? "dense: " + (4 * params / 1e6).toFixed(2) + " MB a step; these messages average " +
      (mean / 1e3).toFixed(1) + " kB, " + (100 * mean / (4 * params)).toFixed(2) + "% of dense"
    : "message bytes per recorded step (dense size once a node has reported its result)";
  const first = st.steps.filter(r => r[0] === (st.steps[0] || [])[0] && r[c.worker] === 0);
  // Up to the 99th percentile of a step's total: the first steps (loading, warming up) would
  // squash the rest.
  const totals = first.map(r => r[c.data_ms] + r[c.compute_ms] + r[c.encode_ms] + r[c.apply_ms] + r[c.wait_ms]).sort((a, b) => a - b);
  const top = totals.length ? totals[Math.floor(0.99 * (totals.length - 1))] * 1.3 : 1;
  chart("times", "ms", {labels: ["data", "compute", "encode", "apply", "wait"],
                        data: first.map(r => [r[c.iteration], r[c.data_ms], r[c.compute_ms], r[c.encode_ms], r[c.apply_ms], r[c.wait_ms]])},
        "iteration", {stackedGraph: true, rollPeriod: 10, valueRange: [0, top]});
  // The links: each node's last sample per peer; the mesh as a tree of its edges.
  const lc = Object.fromEntries(st.link_columns.map((n, i) => [n, i]));
  const names = j.node_names || {};
  const last = new Map();  // "from>to" -> row
  for (const r of st.links) last.set(r[0] + ">" + (names[String(r[lc.peer])] || "node " + r[lc.peer]), r);
  const loss = r => r[lc.datagrams_out] > 0 ? (100 * r[lc.retransmits] / r[lc.datagrams_out]).toFixed(2) + "%" : "";
  const direction = (a, b) => {
    const r = last.get(a + ">" + b);
    return r ? a + " → " + b + ": " + (r[lc.bytes_out] / 1e6).toFixed(1) + " MB, RTT " +
               Math.round(r[lc.rtt_us] || 0) + " µs, " + r[lc.retransmits] + " retransmits (" + loss(r) + ")"
             : a + " → " + b + ": no sample yet";
  };
  const tree = j.mesh_tree || [];
  const kids = name => tree.filter(t => t.parent === name).map(t => t.node);
  const branch = name => el("li", {}, el("b", {}, name),
    ...kids(name).map(k => el("div", {class: "note"}, direction(name, k) + " · " + direction(k, name))),
    kids(name).length ? el("ul", {}, ...kids(name).map(branch)) : "");
  const root = tree.find(t => !t.parent);
  document.getElementById("links").replaceChildren(
    el("ul", {id: "mesh", "data-nodes": tree.length}, root ? branch(root.node) : el("li", {}, "no mesh yet")),
    table(["from", "to", "sent MB", "received MB", "datagrams", "retransmits", "loss", "RTT µs"],
          [...last.entries()].map(([k, r]) => [r[0], k.split(">")[1],
                                   (r[lc.bytes_out] / 1e6).toFixed(1), (r[lc.bytes_in] / 1e6).toFixed(1),
                                   r[lc.datagrams_out], r[lc.retransmits], loss(r),
                                   Math.round(r[lc.rtt_us] || 0)])));
  document.getElementById("evaluation").replaceChildren(...evaluationView(j));
  const log = document.getElementById("log");
  const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.textContent = (j.log || []).join("\n");
  if (atEnd) log.scrollTop = log.scrollHeight;
  document.getElementById("live").textContent =
    j.state === "running" || j.state === "queued" ? "live · every second" : "";
  if (j.state === "running" || j.state === "queued") schedule(() => showJob(id), 1000);
}

function schedule(f, ms) {
  clearTimeout(timer);
  timer = setTimeout(() => f().catch(fail), ms);
}

function fail(e) {
  document.getElementById("live").textContent = "cannot reach the controller: " + e.message;
  schedule(route, 3000);
}

function route() {
  clearTimeout(timer);
  const m = location.hash.match(/^#\/job\/([0-9a-f]{1,16})$/);
  return (m ? showJob(m[1]) : showJobs()).catch(fail);
}

window.addEventListener("hashchange", route);
route();
