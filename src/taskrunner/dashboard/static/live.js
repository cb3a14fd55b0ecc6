// Refreshes the queue page (counts, the shown page of waiting and in-flight messages,
// consumers) and the dead-letter list from the JSON API. Text goes in through
// textContent only, so a task name, payload or reason holding HTML stays text. A table
// is left alone while the keyboard focus is inside it (rebuilding it would move the
// focus away from the link being reached), and when its data did not change.
(function () {
  "use strict";
  var script = document.getElementById("live-script");
  var name = script.dataset.queue;
  var every = Number(script.dataset.refreshMs) || 2000;
  var base = "/api/queues/" + encodeURIComponent(name);
  var last = {};

  function age(s) {
    if (s === null || s === undefined) return "-";
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 120) return s.toFixed(1) + " s";
    if (s < 7200) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function leaseLeft(s) {
    if (s === null || s === undefined) return "-";
    return s < 0 ? "lapsed " + age(-s) + " ago" : age(s);
  }

  function when(t) {
    if (t === null || t === undefined) return "-";
    return new Date(t * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  function cell(tag, text) {
    var el = document.createElement(tag);
    el.textContent = text;
    return el;
  }

  function link(href, text, cls) {
    var a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    if (cls) a.className = cls;
    return a;
  }

  function setText(id, text) {
    var el = document.getElementById(id);
    if (el) el.textContent = text;
  }

  // The session ended (expired, signed out elsewhere): show the sign-in page, which
  // comes back here, instead of numbers that no longer refresh.
  function signInAgain(r) {
    if (r.status === 401) {
      window.location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
    }
  }

  function getJson(url) {
    return fetch(url, { headers: { Accept: "application/json" } }).then(function (r) {
      signInAgain(r);
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    });
  }

  // Replace the rows of `table` unless they are unchanged or the focus is inside it.
  function replaceRows(table, key, rows, signature) {
    var body = table.querySelector("tbody");
    if (last[key] === signature) return;
    if (body.contains(document.activeElement)) return;
    last[key] = signature;
    body.replaceChildren.apply(body, rows);
  }

  function payloadText(m) {
    if (m.payload === null) return "(" + m.body_bytes + " bytes)";
    return m.payload.length > 80 ? m.payload.slice(0, 77) + "..." : m.payload;
  }

  function messageRow(m, inFlight) {
    var tr = document.createElement("tr");
    var th = cell("th", m.id);
    th.scope = "row";
    tr.appendChild(th);
    tr.appendChild(cell("td", m.task === null ? "(not a taskrunner message)" : m.task));
    tr.appendChild(cell("td", String(m.delivery_count)));
    tr.appendChild(cell("td", age(m.age_seconds)));
    if (inFlight) {
      tr.appendChild(cell("td", m.owner || "-"));
      tr.appendChild(cell("td", age(m.idle_seconds)));
      tr.appendChild(cell("td", leaseLeft(m.lease_remaining_seconds)));
    }
    var payload = cell("td", payloadText(m));
    payload.className = "payload";
    tr.appendChild(payload);
    return tr;
  }

  function refreshList(section) {
    var state = section.dataset.state;
    var table = document.getElementById(section.dataset.table);
    if (!table) return Promise.resolve();
    var query = "?state=" + encodeURIComponent(state) +
      "&after=" + encodeURIComponent(section.dataset.after) +
      "&limit=" + encodeURIComponent(section.dataset.limit);
    return getJson(base + "/messages" + query).then(function (data) {
      var inFlight = state === "in_flight";
      var rows = data.messages.map(function (m) { return messageRow(m, inFlight); });
      replaceRows(table, state, rows, JSON.stringify(data.messages.map(function (m) {
        return [m.id, m.delivery_count, m.owner, Math.round(m.age_seconds || 0),
          Math.round(m.idle_seconds || 0)];
      })));
      var empty = section.querySelector(".empty");
      if (empty) empty.hidden = data.messages.length > 0;
      var nav = section.querySelector("nav.pages");
      var next = section.querySelector("a.next");
      if (nav && next) {
        next.hidden = data.next_after === null;
        if (data.next_after !== null) next.href = nav.dataset.base + encodeURIComponent(data.next_after);
      }
    });
  }

  function refreshQueue() {
    var lists = Array.prototype.slice.call(document.querySelectorAll("section.messages"));
    var counts = getJson(base).then(function (data) {
      var q = data.queue;
      setText("ready", String(q.ready));
      setText("oldest", age(q.oldest_ready_age_seconds));
      setText("delayed", String(q.delayed));
      setText("in-flight-count", String(q.in_flight));
      setText("longest-idle", age(q.oldest_in_flight_age_seconds));
      setText("dead", String(q.dead));
      setText("wait", age(q.predicted_wait_seconds));
      setText("consumer-count", data.consumers_total + " consumer(s)" +
        (data.consumers_total > data.consumers_shown_cap ? ", the first " + data.consumers_shown_cap + " shown." : "."));
      var rows = data.consumers.map(function (c) {
        var tr = document.createElement("tr");
        var th = cell("th", c.name);
        th.scope = "row";
        tr.appendChild(th);
        tr.appendChild(cell("td", String(c.pending)));
        tr.appendChild(cell("td", age(c.idle_seconds)));
        return tr;
      });
      replaceRows(document.getElementById("consumers"), "consumers", rows,
        JSON.stringify(data.consumers.map(function (c) {
          return [c.name, c.pending, Math.round(c.idle_seconds || 0)];
        })));
    });
    return Promise.all([counts].concat(lists.map(refreshList)));
  }

  function deadRow(x, signedIn) {
    var tr = document.createElement("tr");
    tr.dataset.deadId = x.id;
    tr.dataset.count = String(x.delivery_count);
    var href = "/queues/" + encodeURIComponent(name) + "/dead/";
    var th = document.createElement("th");
    th.scope = "row";
    th.appendChild(link(href + encodeURIComponent(x.id), x.id));
    tr.appendChild(th);
    tr.appendChild(cell("td", x.task === null ? "(not a taskrunner message)" : x.task));
    tr.appendChild(cell("td", String(x.delivery_count)));
    tr.appendChild(cell("td", when(x.dead_at)));
    var reason = cell("td", x.reason.length > 120 ? x.reason.slice(0, 117) + "..." : x.reason);
    reason.className = "reason";
    tr.appendChild(reason);
    if (signedIn) {
      var actions = document.createElement("td");
      var confirm = href + "confirm?id=" + encodeURIComponent(x.id) + "&action=";
      actions.appendChild(link(confirm + "retry", "Retry " + x.id, "retry"));
      actions.appendChild(document.createTextNode(" \u00b7 "));
      actions.appendChild(link(confirm + "purge", "Purge " + x.id));
      tr.appendChild(actions);
    }
    return tr;
  }

  function refreshDead() {
    var signedIn = script.dataset.signedIn === "yes";
    var cap = Number(script.dataset.cap);
    return getJson(base + "/dead-letters").then(function (data) {
      var letters = data.dead_letters;
      setText("dead-count", letters.length + " dead letter(s)" +
        (letters.length >= cap ? " (the oldest " + cap + ")." : "."));
      var bulk = document.getElementById("bulk-actions");
      if (bulk) bulk.hidden = letters.length === 0;
      var rows = letters.map(function (x) { return deadRow(x, signedIn); });
      replaceRows(document.getElementById("dead-letters"), "dead", rows,
        JSON.stringify(letters.map(function (x) { return [x.id, x.delivery_count, x.reason]; })));
    });
  }

  var refresh = script.dataset.page === "dead" ? refreshDead : refreshQueue;

  function tick() {
    refresh()
      .then(function () {
        setText("refresh-status",
          "Updated " + new Date().toLocaleTimeString() + "; refreshing every " + every / 1000 + " s.");
      })
      .catch(function (err) {
        setText("refresh-status", "Refresh failed: " + err.message);
      })
      .finally(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
