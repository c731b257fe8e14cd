// The live page's script, served as /assets/live.js: opens the stream named by the table's
// `data-stream` and adds a row per event, newest first. Every value goes in as text, never as
// markup. Pause holds new rows back (resume shows them, in order); clear empties the table;
// the key filter (a topic pattern: `*` one word, `#` any number) hides the rows it does not
// match, new ones included.
(function () {
  var table = document.getElementById("live");
  var rows = document.getElementById("rows");
  var status = document.getElementById("status");
  var pause = document.getElementById("pause");
  var clear = document.getElementById("clear");
  var filter = document.getElementById("filter");
  var held = document.getElementById("held");
  var kept = Number(table.dataset.kept);
  var seen = 0;
  var paused = false;
  var waiting = [];
  function matches(pattern, key) {
    var p = pattern.split("."), k = key.split(".");
    function at(i, j) {
      if (i === p.length) { return j === k.length; }
      if (p[i] === "#") {
        for (var n = j; n <= k.length; n += 1) { if (at(i + 1, n)) { return true; } }
        return false;
      }
      return j < k.length && (p[i] === "*" || p[i] === k[j]) && at(i + 1, j + 1);
    }
    return at(0, 0);
  }
  function shown(tr) {
    var pattern = filter.value.trim();
    return tr.dataset.key === undefined || pattern === "" || matches(pattern, tr.dataset.key);
  }
  function cell(tr, text) { var td = document.createElement("td"); td.textContent = text; tr.appendChild(td); return td; }
  function add(tr) {
    tr.hidden = !shown(tr);
    rows.insertBefore(tr, rows.firstChild);
    while (rows.children.length > kept) { rows.removeChild(rows.lastChild); }
  }
  function arrive(tr) {
    if (paused) {
      waiting.push(tr);
      if (waiting.length > kept) { waiting.shift(); }
      held.textContent = String(waiting.length) + " held";
    } else {
      add(tr);
    }
  }
  pause.addEventListener("click", function () {
    paused = !paused;
    pause.textContent = paused ? "Resume" : "Pause";
    pause.setAttribute("aria-pressed", paused ? "true" : "false");
    if (!paused) {
      waiting.forEach(add);
      waiting = [];
      held.textContent = "";
    }
  });
  clear.addEventListener("click", function () {
    while (rows.firstChild) { rows.removeChild(rows.firstChild); }
    waiting = [];
    held.textContent = "";
  });
  filter.addEventListener("input", function () {
    Array.prototype.forEach.call(rows.children, function (tr) { tr.hidden = !shown(tr); });
  });
  var source = new EventSource(table.dataset.stream);
  source.addEventListener("ready", function () { status.textContent = "listening"; status.className = "ok"; });
  source.addEventListener("event", function (e) {
    var ev = JSON.parse(e.data);
    var tr = document.createElement("tr");
    tr.className = "event";
    tr.dataset.id = ev.id;
    tr.dataset.key = ev.key;
    var time = document.createElement("time");
    time.dateTime = ev.datetime;
    time.textContent = ev.time;
    time.title = new Date(ev.datetime).toString();
    cell(tr, "").appendChild(time);
    cell(tr, ev.key); cell(tr, ev.source); cell(tr, ev.node);
    var a = document.createElement("a");
    a.href = "/events/" + encodeURIComponent(ev.id);
    a.textContent = ev.id;
    cell(tr, "").appendChild(a);
    cell(tr, ev.body).className = "body";
    arrive(tr);
    seen += 1;
    document.getElementById("seen").textContent = String(seen);
  });
  source.addEventListener("skipped", function (e) {
    var tr = document.createElement("tr");
    tr.className = "skipped";
    var td = cell(tr, "skipped a message that breaks the contract: " + JSON.parse(e.data));
    td.colSpan = 6;
    arrive(tr);
  });
  source.onerror = function () { status.textContent = "disconnected, reconnecting…"; status.className = "error"; };
})();
