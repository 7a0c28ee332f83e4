// The live console's only script: every refreshMillis (set by the page)
// it fetches the content drawn anew by the job (console/content) and puts
// it in place, and marks on <body data-live> whether the job answers.
// Everything it shows is drawn by the job; the browser needs no other
// file and no network.
"use strict";
(function () {
  var main = document.getElementById("content");
  var updates = 0;
  function refresh() {
    fetch("console/content", { cache: "no-store" })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("HTTP " + r.status);
        }
        return r.text();
      })
      .then(function (html) {
        main.innerHTML = html;
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
