// Refreshes the overview from /api/overview. Text goes in through textContent only,
// so a queue name or worker name holding HTML stays text.
(function () {
  "use strict";
  var script = document.getElementById("dashboard-script");
  var page = script.dataset.page;
  var filter = script.dataset.filter || "";
  var every = Number(script.dataset.refreshMs) || 2000;

  function age(s) {
    if (s === null || s === undefined) return "-";
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 120) return s.toFixed(1) + " s";
    if (s < 7200) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function cell(tag, text, field) {
    var el = document.createElement(tag);
    el.textContent = text;
    if (field) el.dataset.field = field;
    return el;
  }

  function link(href, text) {
    var a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    return a;
  }

  function queueRow(q) {
    var tr = document.createElement("tr");
    tr.dataset.queue = q.name;
    var th = document.createElement("th");
    th.scope = "row";
    var base = "/queues/" + encodeURIComponent(q.name);
    th.appendChild(link(base, q.name));
    if (q.error) th.appendChild(cell("span", " " + q.error)).className = "error";
    tr.appendChild(th);
    tr.appendChild(cell("td", String(q.ready), "ready"));
    tr.appendChild(cell("td", String(q.delayed), "delayed"));
    tr.appendChild(cell("td", String(q.in_flight), "in_flight"));
    var dead = cell("td", "", "dead");
    dead.appendChild(link(base + "/dead", String(q.dead)));
    tr.appendChild(dead);
    tr.appendChild(cell("td", age(q.oldest_ready_age_seconds), "oldest"));
    tr.appendChild(cell("td", age(q.predicted_wait_seconds), "wait"));
    tr.appendChild(cell("td", q.workers === null ? "-" : q.workers + " (" + q.busy + ")", "workers"));
    return tr;
  }

  function workerRow(w) {
    var tr = document.createElement("tr");
    tr.appendChild(cell("td", w.queue));
    var th = cell("th", w.instance);
    th.scope = "row";
    tr.appendChild(th);
    tr.appendChild(cell("td", String(w.workers)));
    tr.appendChild(cell("td", String(w.busy)));
    tr.appendChild(cell("td", age(w.average_seconds)));
    tr.appendChild(cell("td", age(w.seen_seconds_ago) + " ago"));
    return tr;
  }

  function replaceRows(tableId, rows) {
    var body = document.querySelector("#" + tableId + " tbody");
    body.replaceChildren.apply(body, rows);
  }

  // The x axis spans the samples held (at least a minute, at most the 15 minutes kept),
  // so a dashboard opened a minute ago does not draw its line in the last few pixels.
  function line(points, key, max, span) {
    return points
      .filter(function (p) { return p[key] !== null; })
      .map(function (p) {
        var x = 600 - (p.seconds_ago / span) * 600;
        var y = 115 - (p[key] / max) * 110;
        return x.toFixed(1) + "," + y.toFixed(1);
      })
      .join(" ");
  }

  function chart(points) {
    var max = 1;
    var span = 60;
    points.forEach(function (p) {
      max = Math.max(max, p.completed_per_second || 0, p.failed_per_second || 0, p.dead_per_second);
      span = Math.max(span, p.seconds_ago);
    });
    span = Math.min(span, 900);
    document.getElementById("line-completed").setAttribute("points", line(points, "completed_per_second", max, span));
    document.getElementById("line-failed").setAttribute("points", line(points, "failed_per_second", max, span));
    document.getElementById("line-dead").setAttribute("points", line(points, "dead_per_second", max, span));
    document.getElementById("chart-span").textContent =
      "last " + Math.round(span) + " s, peak " + max.toFixed(1) + "/s";
    var last = points[points.length - 1];
    if (last) {
      document.getElementById("rate-completed").textContent =
        last.completed_per_second === null ? "unknown" : last.completed_per_second.toFixed(1);
      document.getElementById("rate-failed").textContent =
        last.failed_per_second === null ? "unknown" : last.failed_per_second.toFixed(1);
      document.getElementById("rate-dead").textContent = last.dead_per_second.toFixed(1);
    }
  }

  // The session ended (expired, signed out elsewhere): show the sign-in page, which
  // comes back here, instead of numbers that no longer refresh.
  function signInAgain(r) {
    if (r.status === 401) {
      window.location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
    }
  }

  function refresh() {
    var query = "?page=" + encodeURIComponent(page) + "&filter=" + encodeURIComponent(filter);
    fetch("/api/overview" + query, { headers: { Accept: "application/json" } })
      .then(function (r) {
        signInAgain(r);
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (data) {
        replaceRows("queues", data.queues.map(queueRow));
        replaceRows("workers", data.workers.map(workerRow));
        document.getElementById("latency").textContent = age(data.average_task_seconds);
        document.getElementById("worker-count").textContent =
          data.workers_total + " process(es) on this page's queues" +
          (data.workers_total > data.workers_shown_cap ? " (the first " + data.workers_shown_cap + " shown)." : ".");
        chart(data.throughput);
        document.getElementById("refresh-status").textContent =
          "Updated " + new Date().toLocaleTimeString() + "; refreshing every " + every / 1000 + " s.";
      })
      .catch(function (err) {
        document.getElementById("refresh-status").textContent = "Refresh failed: " + err.message;
      })
      .finally(function () { setTimeout(refresh, every); });
  }
  setTimeout(refresh, every);
})();
