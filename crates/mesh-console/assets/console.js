// The script every page loads, served as /assets/console.js (no inline script: the
// Content-Security-Policy allows scripts from the console itself only).
// - Every time is written in UTC (`<time datetime>`): its title, shown on hover, is the
//   browser's local time.
// - A page with an auto-refresh box (`#auto-refresh`, opt-in, remembered for the tab) fetches
//   itself every `data-every` seconds while the box is ticked and swaps the part marked
//   `#refreshed` for the new one: no reload, the form and the box kept.
// - An event search its budget stopped before the page filled goes on by itself
//   (`a.next.auto`), appending what each further walk finds.
// - A dead letters' list's header box (`#select-page`) ticks or clears every row of the page
//   (its "all matching" box, a form field, needs no script).
(function () {
  function localTimes(root) {
    Array.prototype.forEach.call(root.querySelectorAll("time[datetime]"), function (t) {
      var at = new Date(t.dateTime);
      if (!isNaN(at.getTime())) { t.title = "local time: " + at.toString(); }
    });
  }
  localTimes(document);
  searchOn();
  refreshing();
  selectPage();

  function selectPage() {
    // Delegated: the list may be swapped by the auto-refresh.
    document.addEventListener("change", function (changed) {
      var box = changed.target;
      if (!box || box.id !== "select-page") { return; }
      var form = box.form;
      if (!form) { return; }
      Array.prototype.forEach.call(form.querySelectorAll("input.pick"), function (pick) {
        pick.checked = box.checked;
      });
    });
  }

  // A search a page's budget stopped before it filled links on with `a.next.auto`: follow
  // it here, appending the rows each further walk finds, until the page holds `data-limit`
  // rows (the link left is then an ordinary next page) or the store is searched.
  function searchOn() {
    var next = document.querySelector("a.next.auto");
    var table = document.querySelector("table.events");
    if (!next || !table) { return; }
    var limit = Number(next.dataset.limit) || 50;
    fetch(next.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
      .then(function (html) {
        var page = new DOMParser().parseFromString(html, "text/html");
        var rows = page.querySelectorAll("table.events tr.event");
        var body = table.tBodies[0] || table;
        var room = limit - table.querySelectorAll("tr.event").length;
        for (var i = 0; i < rows.length && i < room; i += 1) {
          var row = document.importNode(rows[i], true);
          localTimes(row);
          body.appendChild(row);
        }
        if (table.querySelectorAll("tr.event").length > 0) {
          table.hidden = false;
          var none = document.querySelector("p.none");
          if (none) { none.remove(); }
        }
        var note = document.querySelector("p.partial");
        var fresh = page.querySelector("p.partial");
        var link = page.querySelector("a.next");
        var full = table.querySelectorAll("tr.event").length >= limit;
        if (note) {
          if (fresh && !full) { note.replaceWith(document.importNode(fresh, true)); } else { note.remove(); }
        }
        var holder = next.parentNode;
        if (full && rows.length > room) {
          // The page is full with more behind it: the next page starts after its last row.
          var last = table.querySelectorAll("tr.event a.event");
          var id = last[last.length - 1].getAttribute("href").split("/").pop();
          var url = new URL(next.href);
          url.searchParams.set("after", decodeURIComponent(id));
          next.href = url.toString();
          next.className = "next";
          next.textContent = "Next page →";
        } else if (link && !full) {
          holder.replaceWith(document.importNode(link.parentNode, true));
          searchOn();
        } else if (link) {
          holder.replaceWith(document.importNode(link.parentNode, true));
          var kept = document.querySelector("a.next.auto");
          if (kept) { kept.className = "next"; kept.textContent = "Next page →"; }
        } else {
          holder.remove();
          var done = document.createElement("p");
          done.className = "note searched";
          done.textContent = "The whole store was searched.";
          table.parentNode.insertBefore(done, table.nextSibling);
        }
      })
      .catch(function () { /* the link stays for the operator */ });
  }

  function refreshing() {
  var box = document.getElementById("auto-refresh");
  if (!box) { return; }
  var memory = "mesh-console-refresh:" + location.pathname;
  var every = Math.max(1, Number(box.dataset.every) || 5) * 1000;
  var timer = null;
  var busy = false;
  function refresh() {
    if (busy) { return; }
    busy = true;
    fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("refreshed");
        var old = document.getElementById("refreshed");
        if (fresh && old) {
          var node = document.importNode(fresh, true);
          localTimes(node);
          old.replaceWith(node);
          box.dataset.refreshed = String(Number(box.dataset.refreshed || "0") + 1);
        }
      })
      .catch(function () { /* the next tick tries again */ })
      .then(function () { busy = false; });
  }
  function set(on) {
    if (timer !== null) { clearInterval(timer); timer = null; }
    if (on) { timer = setInterval(refresh, every); }
    try { sessionStorage.setItem(memory, on ? "on" : "off"); } catch (e) { /* storage refused */ }
  }
  try { box.checked = sessionStorage.getItem(memory) === "on"; } catch (e) { box.checked = false; }
  set(box.checked);
  box.addEventListener("change", function () { set(box.checked); });
  }
})();
