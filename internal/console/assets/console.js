// Refreshes the page's #live part every few seconds without a full reload.
// The page works without this script (read-only, refreshed by hand).
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) return;
  setInterval(function () {
    if (document.hidden) return;
    var a = document.activeElement;
    if (a && live.contains(a) && (a.tagName === "INPUT" || a.tagName === "BUTTON")) return;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Feed-Refresh": "1" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("live");
        if (fresh) live.replaceChildren.apply(live, Array.prototype.slice.call(fresh.childNodes));
      })
      .catch(function () {});
  }, 5000);
})();
