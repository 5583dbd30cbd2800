// Draws the fragmentation charts from the figure specs the page embeds with json_script.
(function () {
  function draw() {
    var data = document.getElementById("fragmentation-charts");
    if (!data || typeof Plotly === "undefined") return;
    var figures = JSON.parse(data.textContent);
    Object.keys(figures).forEach(function (key) {
      var target = document.getElementById("chart-" + key);
      if (target) Plotly.newPlot(target, figures[key].data, figures[key].layout, {responsive: true, displaylogo: false});
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
