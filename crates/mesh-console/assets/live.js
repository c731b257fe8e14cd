// The live page's script, served as /assets/live.js: opens the stream named by the table's
// `data-stream` and adds a row per event, newest first. Every value goes in as text, never as
// markup.
(function () {
  var table = document.getElementById("live");
  var rows = document.getElementById("rows");
  var status = document.getElementById("status");
  var kept = Number(table.dataset.kept);
  var seen = 0;
  function cell(tr, text) { var td = document.createElement("td"); td.textContent = text; tr.appendChild(td); return td; }
  function add(tr) { rows.insertBefore(tr, rows.firstChild); while (rows.children.length > kept) { rows.removeChild(rows.lastChild); } }
  var source = new EventSource(table.dataset.stream);
  source.addEventListener("ready", function () { status.textContent = "listening"; status.className = "ok"; });
  source.addEventListener("event", function (e) {
    var ev = JSON.parse(e.data);
    var tr = document.createElement("tr");
    tr.className = "event";
    tr.dataset.id = ev.id;
    cell(tr, ev.time); cell(tr, ev.key); cell(tr, ev.source); cell(tr, ev.node);
    var a = document.createElement("a");
    a.href = "/events/" + encodeURIComponent(ev.id);
    a.textContent = ev.id;
    cell(tr, "").appendChild(a);
    cell(tr, ev.body).className = "body";
    add(tr);
    seen += 1;
    document.getElementById("seen").textContent = String(seen);
  });
  source.addEventListener("skipped", function (e) {
    var tr = document.createElement("tr");
    tr.className = "skipped";
    var td = cell(tr, "skipped a message that breaks the contract: " + JSON.parse(e.data));
    td.colSpan = 6;
    add(tr);
  });
  source.onerror = function () { status.textContent = "disconnected, reconnecting…"; status.className = "error"; };
})();
