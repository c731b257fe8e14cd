// The script every page loads, served as /assets/console.js (no inline script: the
// Content-Security-Policy allows scripts from the console itself only).
// - Every time is written in UTC (`<time datetime>`): its title, shown on hover, is the
//   browser's local time.
// - A page with an auto-refresh box (`#auto-refresh`, opt-in, remembered for the tab) fetches
//   itself every `data-every` seconds while the box is ticked and swaps the part marked
//   `#refreshed` for the new one: no reload, the form and the box kept.
(function () {
  function localTimes(root) {
    Array.prototype.forEach.call(root.querySelectorAll("time[datetime]"), function (t) {
      var at = new Date(t.dateTime);
      if (!isNaN(at.getTime())) { t.title = "local time: " + at.toString(); }
    });
  }
  localTimes(document);
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
})();
