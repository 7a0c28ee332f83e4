// The live console's only script: every refreshMillis (set by the page)
// it fetches each part of the page drawn anew by the job
// (console/content?part=...) and puts it in place when it changed, and
// marks on <body data-live> whether the job answers. The heatmaps part
// is revalidated with its ETag, so it only travels when a window fired.
// Everything it shows is drawn by the job; the browser needs no other
// file and no network.
"use strict";
(function () {
  var parts = ["status", "heatmaps", "charts"];
  var shown = {};
  var updates = 0;
  function fetchPart(part) {
    return fetch("console/content?part=" + part, { cache: "no-cache" })
      .then(function (r) {
        if (!r.ok) {
          throw new Error(part + ": HTTP " + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        if (shown[part] !== html) {
          document.getElementById("live-" + part).innerHTML = html;
          shown[part] = html;
        }
      });
  }
  function refresh() {
    Promise.all(parts.map(fetchPart))
      .then(function () {
        updates++;
        document.body.setAttribute("data-live", "connected");
        document.body.setAttribute("data-updates", String(updates));
      })
      .catch(function () {
        // The job stopped or restarts: keep the last drawing, say so,
        // and keep asking.
        document.body.setAttribute("data-live", "lost");
      })
      .finally(function () {
        setTimeout(refresh, refreshMillis);
      });
  }
  setTimeout(refresh, refreshMillis);
})();
