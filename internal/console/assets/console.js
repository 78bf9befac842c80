// Refreshes the page's #live part without a full reload, every 2 to 60
// seconds or not at all, as chosen in the control it adds to the menu
// (remembered in this browser); never while the tab is hidden. The page
// works without this script (read-only, refreshed by hand).
(function () {
  "use strict";
  var live = document.getElementById("live");
  var spot = document.getElementById("refresh");
  if (!live || !spot) return;
  var KEY = "feed.refresh";
  var choices = [["2", "every 2 s"], ["5", "every 5 s"], ["10", "every 10 s"], ["30", "every 30 s"], ["60", "every 60 s"], ["0", "paused"]];
  var stored = null;
  try { stored = localStorage.getItem(KEY); } catch (e) {}
  var every = choices.some(function (c) { return c[0] === stored; }) ? stored : "5";
  var select = document.createElement("select");
  select.id = "refresh-every";
  select.setAttribute("aria-label", "refresh");
  choices.forEach(function (c) {
    var o = document.createElement("option");
    o.value = c[0];
    o.textContent = "refresh " + c[1];
    select.appendChild(o);
  });
  select.value = every;
  spot.appendChild(select);
  var timer = null;
  // A fetch started before the interval changed (or was paused) is dropped.
  var generation = 0;
  function schedule() {
    generation += 1;
    if (timer) clearInterval(timer);
    timer = null;
    var s = parseInt(select.value, 10);
    spot.setAttribute("data-every", String(s));
    if (s > 0) timer = setInterval(refresh, s * 1000);
  }
  select.addEventListener("change", function () {
    try { localStorage.setItem(KEY, select.value); } catch (e) {}
    schedule();
  });
  function refresh() {
    if (document.hidden) return;
    var a = document.activeElement;
    if (a && live.contains(a) && (a.tagName === "INPUT" || a.tagName === "BUTTON")) return;
    var started = generation;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Feed-Refresh": "1" } })
      // An error page that still has a live part (the overview when the
      // database cannot be reached says "unknown") replaces the figures.
      .then(function (r) { return r.text(); })
      .then(function (text) {
        if (!text || started !== generation) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("live");
        if (fresh) {
          live.replaceChildren.apply(live, Array.prototype.slice.call(fresh.childNodes));
          spot.setAttribute("data-refreshed", String(Date.now()));
        }
      })
      .catch(function () {});
  }
  schedule();
})();
