/* The run pages: live progress of a run (finished results linked in the matrix as they land), the matrix filter,
   the trigger form's case count. No library, no CDN. */
(function () {
  "use strict";

  var POLL_MS = 1000;
  var MAX_BACKOFF_MS = 15000;

  // --- Live progress: poll progress.json; once the run has finished, swap in the rendered results. -------------

  function startProgress() {
    var body = document.getElementById("run-body");
    if (!body || body.dataset.live !== "1") return;
    var progressUrl = body.dataset.progressUrl;
    var partialUrl = body.dataset.partialUrl;
    var failures = 0;
    var table = document.getElementById("matrix-table");
    var since = table ? table.dataset.since || "0" : null;

    function setText(name, value) {
      body.querySelectorAll('[data-field="' + name + '"]').forEach(function (el) { el.textContent = value; });
    }

    function setWidth(bar, percent) {
      var fill = bar && bar.querySelector(".fill");
      if (fill) fill.style.width = Math.max(0, Math.min(100, percent)) + "%";
    }

    function stale(on) {
      var note = body.querySelector('[data-field="stale"]');
      if (note) note.hidden = !on;
    }

    function dropQueuedNotice() {
      document.querySelectorAll(".flash .run-queued").forEach(function (item) {
        var list = item.parentNode;
        item.remove();
        if (list && !list.children.length) list.remove();
      });
    }

    // Each new cell replaces its "not run yet" placeholder; the server rendered it, escaped, like the rest.
    function placeCells(p) {
      if (!table || !p.cells) return;
      var cells = {};
      table.querySelectorAll("td[data-cell]").forEach(function (td) { cells[td.dataset.cell] = td; });
      p.cells.forEach(function (item) {
        var old = cells[item.key];
        if (!old) return;
        var holder = document.createElement("tbody");
        holder.innerHTML = "<tr>" + item.html + "</tr>";
        var fresh = holder.querySelector("td");
        if (fresh) old.replaceWith(fresh);
      });
      (p.rows || []).forEach(function (item) {
        table.querySelectorAll("tr[data-row]").forEach(function (row) {
          if (row.dataset.row === item.key) row.className = item.classes;
        });
      });
      if (p.last_result !== undefined) {
        since = String(p.last_result);
        table.dataset.since = since;
      }
    }

    function update(p) {
      if (p.status !== "pending") dropQueuedNotice();
      placeCells(p);
      var badge = body.querySelector('[data-field="status"]');
      if (badge) {
        badge.textContent = p.status_label;
        badge.className = "status status-" + p.status;
      }
      ["done", "total", "passed", "failed", "errored", "cancelled", "elapsed"].forEach(function (name) {
        setText(name, p[name]);
      });
      setText("current", p.current || (p.status === "pending" ? "waiting for the worker to pick the run up…" : "…"));
      var bar = body.querySelector('[data-field="bar"]');
      if (bar) {
        setWidth(bar, p.percent);
        bar.setAttribute("aria-valuenow", p.done);
      }
      p.models.forEach(function (item) {
        body.querySelectorAll("tr[data-model]").forEach(function (row) {
          if (row.dataset.model !== item.model) return;
          setWidth(row.querySelector(".bar"), item.percent);
          var done = row.querySelector('[data-part="done"]');
          if (done) done.textContent = item.done;
        });
      });
      if (p.cancel_requested) {
        var form = body.querySelector("[data-cancel-form]");
        if (form) {
          var note = document.createElement("span");
          note.className = "muted";
          note.textContent = "Cancelling: stops after the case in progress…";
          form.replaceWith(note);
        }
      }
    }

    function retry(next) {
      failures += 1;
      stale(failures > 1);
      window.setTimeout(next, Math.min(POLL_MS * Math.pow(2, failures), MAX_BACKOFF_MS));
    }

    function swapInResults() {
      fetch(partialUrl, { credentials: "same-origin", cache: "no-store", headers: { Accept: "text/html" } })
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.text();
        })
        .then(function (html) {
          var template = document.createElement("template");
          template.innerHTML = html.trim();
          var fresh = template.content.getElementById("run-body");
          if (!fresh) throw new Error("no run body in the response");
          body.replaceWith(fresh);
          addSkipLink();
        })
        .catch(function () { retry(swapInResults); });
    }

    function poll() {
      var url = since === null ? progressUrl : progressUrl + "?since=" + encodeURIComponent(since);
      fetch(url, { credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" } })
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.json();
        })
        .then(function (p) {
          failures = 0;
          stale(false);
          update(p);
          if (p.finished) swapInResults();
          else window.setTimeout(poll, POLL_MS);
        })
        .catch(function () { retry(poll); });
    }

    window.setTimeout(poll, POLL_MS);
  }

  // --- Matrix filter: all / failures only / where models disagree, without reloading. ---------------------------

  document.addEventListener("click", function (event) {
    var link = event.target.closest("[data-matrix-filter]");
    if (!link) return;
    var table = document.getElementById("matrix-table");
    if (!table) return;
    event.preventDefault();
    var show = link.dataset.matrixFilter;
    table.dataset.show = show;
    link.parentNode.querySelectorAll("[data-matrix-filter]").forEach(function (other) {
      if (other === link) other.setAttribute("aria-current", "true");
      else other.removeAttribute("aria-current");
    });
    var url = new URL(window.location.href);
    if (show === "all") url.searchParams.delete("show");
    else url.searchParams.set("show", show);
    window.history.replaceState(null, "", url.pathname + url.search + "#matrix");
  });

  // --- Keyboard: the skip link lands on the first failed cell; after Back, focus is where the reviewer left. -----

  // A run that finished while the page watched it gets the skip link the finished page is served with.
  function addSkipLink() {
    if (document.querySelector(".skip-link") || !document.getElementById("first-failure")) return;
    var skip = document.createElement("a");
    skip.className = "skip-link";
    skip.href = "#first-failure";
    skip.dataset.skipTo = "first-failure";
    skip.textContent = "Skip to first failure";
    document.body.prepend(skip);
  }

  var LEFT_FROM = "runs:left-from:";

  document.addEventListener("click", function (event) {
    var skip = event.target.closest("[data-skip-to]");
    if (skip) {
      var target = document.getElementById(skip.dataset.skipTo);
      if (!target) return;
      event.preventDefault();
      target.focus();
      return;
    }
    var link = event.target.closest("#run-body a[href]");
    if (!link || link.hasAttribute("download") || link.dataset.matrixFilter !== undefined) return;
    try {
      window.sessionStorage.setItem(LEFT_FROM + window.location.pathname, link.getAttribute("href"));
    } catch (error) { /* storage refused (private mode, quota): Back then starts at the top, as it always did */ }
  });

  // A page restored from the back-forward cache, or loaded again by Back, puts focus back on the link the reviewer
  // followed from it; a page opened any other way starts at the top.
  window.addEventListener("pageshow", function (event) {
    var entry = window.performance && performance.getEntriesByType ? performance.getEntriesByType("navigation")[0] : null;
    if (!event.persisted && !(entry && entry.type === "back_forward")) return;
    var href = null;
    try { href = window.sessionStorage.getItem(LEFT_FROM + window.location.pathname); } catch (error) { return; }
    if (!href) return;
    var links = document.querySelectorAll("#run-body a[href]");
    for (var i = 0; i < links.length; i++) {
      if (links[i].getAttribute("href") === href) {
        links[i].focus();
        return;
      }
    }
  });

  // --- Trigger form: how many enabled cases the filter selects, before submitting. ------------------------------

  function startCaseCount() {
    var form = document.querySelector("form[data-count-url]");
    if (!form) return;
    var suite = form.querySelector('[name="suite"]');
    var filter = form.querySelector('[name="case_filter"]');
    var output = document.getElementById("case-count");
    var timer = null;
    var controller = null;
    var last = null;

    var trialsInput = form.querySelector('[name="trials"]');

    function models() {
      return form.querySelectorAll('[name="models"]:checked').length;
    }

    function trials() {
      var value = trialsInput ? Number(trialsInput.value) : 1;
      return Number.isInteger(value) && value >= 1 ? value : 1;
    }

    function show() {
      if (!last) return;
      var text = last.message;
      var chosen = models();
      if (last.matching && chosen) {
        var repeats = trials();
        var results = last.matching * chosen * repeats;
        text += " × " + chosen + " model" + (chosen === 1 ? "" : "s") +
          (repeats > 1 ? " × " + repeats + " trials" : "") + " = " + results.toLocaleString("en-US") +
          " result" + (results === 1 ? "" : "s");
      }
      output.textContent = text;
      output.classList.toggle("none", !last.matching);
    }

    function refresh() {
      if (!suite.value) {
        last = null;
        output.textContent = "Choose a suite to see how many enabled cases run.";
        output.classList.remove("none");
        return;
      }
      if (controller) controller.abort();
      controller = new AbortController();
      var url = form.dataset.countUrl + "?" + new URLSearchParams({ suite: suite.value, case_filter: filter.value });
      fetch(url, { credentials: "same-origin", signal: controller.signal, headers: { Accept: "application/json" } })
        .then(function (response) { return response.json(); })
        .then(function (data) {
          if (data.error) {
            last = null;
            output.textContent = data.error;
            output.classList.add("none");
            return;
          }
          last = data;
          show();
        })
        .catch(function (error) {
          if (error.name !== "AbortError") output.textContent = "Could not count the cases right now.";
        });
    }

    function later() {
      window.clearTimeout(timer);
      timer = window.setTimeout(refresh, 250);
    }

    suite.addEventListener("change", refresh);
    filter.addEventListener("input", later);
    form.querySelectorAll('[name="models"]').forEach(function (box) { box.addEventListener("change", show); });
    if (trialsInput) trialsInput.addEventListener("input", show);
    form.addEventListener("submit", function () {
      var button = form.querySelector('button[type="submit"]');
      // A second click would queue a second run; the page is about to change anyway.
      window.setTimeout(function () { button.disabled = true; button.textContent = "Starting…"; }, 0);
    });
    if (suite.value) refresh();
  }

  function start() {
    startProgress();
    startCaseCount();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
