// Draws the stacked cost-over-time chart from the JSON the page embeds (no inline script).
// Plotly is fetched after the page is shown (ebcloudWithPlotly, static/js/app.js) from the URL
// in this script's data-plotly attribute.
(function () {
  var plotlySrc = document.currentScript && document.currentScript.getAttribute("data-plotly");
  function draw() {
    var data = document.getElementById("cost-chart-data");
    var target = document.getElementById("cost-chart");
    if (!data || !target) return;
    window.ebcloudWithPlotly(plotlySrc, function () {
      var figure = JSON.parse(data.textContent);
      window.Plotly.react(target, figure.data, figure.layout, {displaylogo: false, responsive: true});
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
  // After the settle, not the swap: htmx settles the new element's class and style back after
  // the swap, which would strip the classes plotly gives its container.
  document.body && document.body.addEventListener("htmx:afterSettle", draw);
})();
