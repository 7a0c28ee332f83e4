// The live console's only script: it takes the page's new content from
// the job's server-sent events (/console/events) and marks the
// connection's state on <body data-live>. Everything it shows is drawn by
// the job; the browser needs no other file and no network.
"use strict";
(function () {
  var main = document.getElementById("content");
  var source = new EventSource("console/events");
  source.addEventListener("open", function () {
    document.body.setAttribute("data-live", "connected");
  });
  source.addEventListener("update", function (e) {
    main.innerHTML = e.data;
    document.body.setAttribute("data-live", "connected");
    document.body.setAttribute("data-updates", String(Number(document.body.getAttribute("data-updates") || 0) + 1));
  });
  source.addEventListener("error", function () {
    // EventSource reconnects by itself; say meanwhile that the page is
    // not live.
    document.body.setAttribute("data-live", "lost");
  });
})();
