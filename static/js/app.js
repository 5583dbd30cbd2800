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
