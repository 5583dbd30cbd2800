// Draws every set of plotly figures a page embeds with json_script (an element whose id ends in
// "-charts"): each figure goes into the element with id "chart-<key>". Plotly itself is the
// installed package's plotly.min.js, served as a static file and fetched after the page is
// shown (ebcloudWithPlotly, static/js/app.js), from the URL in this script's data-plotly.
// Charts that arrive in an htmx fragment (the pool page loads its charts after it shows) are
// drawn when the fragment settles.
(function () {
  var plotlySrc = document.currentScript && document.currentScript.getAttribute("data-plotly");
  function draw(root) {
    var sets = (root || document).querySelectorAll('script[id$="-charts"]');
    if (!sets.length) return;
    window.ebcloudWithPlotly(plotlySrc, function () {
      sets.forEach(function (data) {
        var figures = JSON.parse(data.textContent);
        Object.keys(figures).forEach(function (key) {
          var target = document.getElementById("chart-" + key);
          if (target) Plotly.react(target, figures[key].data, figures[key].layout, {responsive: true, displaylogo: false});
        });
      });
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", function () { draw(); });
  else draw();
  document.addEventListener("htmx:afterSettle", function (event) { draw(event.target); });
})();
