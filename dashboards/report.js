// Draws the report's plots from their embedded JSON and makes the trial tables sortable.
// No library besides the plotly.js inlined above: the page must work offline.
(function () {
  "use strict";

  function drawPlots() {
    var blocks = document.querySelectorAll("script.plot-data");
    var pending = [];
    blocks.forEach(function (block) {
      var target = document.getElementById(block.getAttribute("data-target"));
      var figure = JSON.parse(block.textContent);
      var done = Plotly.newPlot(target, figure.data, figure.layout || {}, {
        displaylogo: false,
        // plotly.js 4 offers "Share chart...", which uploads the figure to Plotly's cloud: a report stays local.
        showSendToCloud: false,
        responsive: true,
        modeBarButtonsToRemove: ["select2d", "lasso2d"],
      }).then(function () {
        // A point that carries its MLflow run's URL opens it on click.
        target.on("plotly_click", function (event) {
          var url = event.points && event.points[0] && event.points[0].customdata;
          if (typeof url === "string" && url) {
            window.open(url, "_blank", "noopener");
          }
        });
      });
      pending.push(done);
    });
    // Tests and people can tell "still drawing" from "drawn": the attribute appears when all are.
    Promise.all(pending).then(function () {
      document.body.setAttribute("data-plots-rendered", String(pending.length));
    });
  }

  function sortValue(cell, numeric) {
    var raw = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
    if (raw === "") {
      return null;
    }
    if (numeric) {
      var n = parseFloat(raw);
      return isNaN(n) ? null : n;
    }
    return raw.toLowerCase();
  }

  function makeSortable(table) {
    var headers = table.querySelectorAll("thead th");
    headers.forEach(function (th, column) {
      th.querySelector("button").addEventListener("click", function () {
        var ascending = th.getAttribute("aria-sort") !== "ascending";
        headers.forEach(function (other) {
          other.removeAttribute("aria-sort");
        });
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var numeric = th.getAttribute("data-type") === "number";
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = sortValue(a.cells[column], numeric);
          var y = sortValue(b.cells[column], numeric);
          if (x === null || y === null) {
            return x === y ? 0 : x === null ? 1 : -1; // empty cells last, either direction
          }
          var order = x < y ? -1 : x > y ? 1 : 0;
          return ascending ? order : -order;
        });
        rows.forEach(function (row) {
          body.appendChild(row);
        });
      });
    });
  }

  document.querySelectorAll("table.sortable").forEach(makeSortable);
  drawPlots();
})();
