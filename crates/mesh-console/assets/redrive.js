// A re-drive's confirmation, served as /assets/redrive.js (no inline script: the
// Content-Security-Policy allows scripts from the console itself only).
// A filter's re-drive (`form.batches`: a group, or a list's "all matching") goes in batches:
// each a POST of the form's fields (the token typed included, held in memory for the run
// only, then dropped) with `batch` and `after` (the last dead letter of the batch before),
// answered with a JSON report; the progress (`#progress`) counts what each batch did. A
// refusal (token, origin, read-only) or a failure stops the run and says why. Without this
// script the form posts once and the whole filter goes in that request.
(function () {
  var form = document.querySelector("form.batches");
  var box = document.getElementById("progress");
  if (!form || !box) { return; }
  var total = Number(form.dataset.total) || 0;
  var size = Number(form.dataset.batch) || 200;
  var bar = document.getElementById("redrive-progress");
  var failures = box.querySelector("ul.failed");
  function set(css, text) {
    var node = box.querySelector(css);
    if (node) { node.textContent = String(text); }
  }
  form.addEventListener("submit", function (submitted) {
    submitted.preventDefault();
    var fields = new URLSearchParams(new FormData(form));
    var token = form.querySelector("input[name='token']");
    if (token) { token.value = ""; }
    form.hidden = true;
    box.hidden = false;
    var redriven = 0;
    var failed = 0;
    var batches = 0;
    function finish(state, text) {
      fields = null;
      box.dataset.state = state;
      set("p.progress-state", text);
    }
    function step(after) {
      var body = new URLSearchParams(fields);
      body.set("batch", String(size));
      if (after) { body.set("after", after); }
      set("p.progress-state", "Batch " + (batches + 1) + "…");
      fetch(form.action, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Accept": "application/json" },
        body: body
      })
        .then(function (response) {
          if (response.ok) { return response.json(); }
          return response.text().then(function (html) {
            var page = new DOMParser().parseFromString(html, "text/html");
            var why = page.querySelector("p.error");
            throw new Error(why ? why.textContent : "status " + response.status);
          });
        })
        .then(function (report) {
          batches += 1;
          redriven += report.redriven;
          failed += report.failed.length;
          report.failed.forEach(function (f) {
            var item = document.createElement("li");
            item.textContent = f.id + ": " + f.error;
            failures.appendChild(item);
          });
          bar.max = Math.max(total, redriven + failed);
          bar.value = redriven + failed;
          set("span.redriven", redriven);
          set("span.failed", failed);
          set("span.batches", batches);
          if (report.done || !report.next) {
            var title = document.querySelector("h1");
            if (title) { title.textContent = "Re-driven: " + redriven; }
            finish("done", "Done: " + redriven + " re-driven, " + failed + " not.");
          } else {
            step(report.next);
          }
        })
        .catch(function (error) {
          finish("stopped", "Stopped after " + redriven + " re-driven: " + error.message);
        });
    }
    step(null);
  });
})();
