// Behaviour that would otherwise be inline handlers, which the Content-Security-Policy refuses
// (script-src 'self'): delegated from the document, so rows that htmx adds later work too.
//   <button data-remove-closest=".row">  removes its closest ancestor matching the selector
//   <select data-autosubmit>             submits its form when its value changes
(function () {
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-remove-closest]");
    if (!button) return;
    var target = button.closest(button.getAttribute("data-remove-closest"));
    if (target) target.remove();
  });
  document.addEventListener("change", function (event) {
    var field = event.target.closest("[data-autosubmit]");
    if (field && field.form) field.form.submit();
  });
})();

// Plotly (4.8 MB) is fetched only by pages that draw a chart, and only once the page is shown:
// a chart script calls ebcloudWithPlotly(src, draw) with the file's URL (from its own
// data-plotly attribute); the first call adds the script (an added script never holds up
// DOMContentLoaded), later calls wait for it, and `draw` runs as soon as Plotly is there.
(function () {
  var waiting = null;
  window.ebcloudWithPlotly = function (src, draw) {
    if (typeof window.Plotly !== "undefined") { draw(); return; }
    if (!src) return;
    if (waiting === null) {
      waiting = [];
      var script = document.createElement("script");
      script.src = src;
      script.addEventListener("load", function () { var queued = waiting; waiting = []; queued.forEach(function (f) { f(); }); });
      document.head.appendChild(script);
    }
    waiting.push(draw);
  };
})();
