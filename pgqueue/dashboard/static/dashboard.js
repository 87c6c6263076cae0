// pgqueue dashboard: refresh the live part of a page in place.
//
// Every element with data-refresh is fetched again every data-interval milliseconds with
// the X-Pgqueue-Fragment header; the server answers with that element's new content only,
// which replaces the old: no reload, no flicker, scroll position kept. Refreshing pauses
// while the tab is hidden or while the user is typing in a field inside the element.
(function () {
  "use strict";

  function busy(element) {
    var active = document.activeElement;
    return active && element.contains(active) &&
      (active.tagName === "INPUT" || active.tagName === "SELECT" || active.tagName === "TEXTAREA");
  }

  function refresh(element) {
    if (document.hidden || busy(element)) {
      return;
    }
    fetch(element.getAttribute("data-refresh"), {
      headers: { "X-Pgqueue-Fragment": "1" },
      credentials: "same-origin",
      redirect: "manual",
    }).then(function (response) {
      if (!response.ok) {
        element.classList.add("stale");
        return null;
      }
      return response.text();
    }).then(function (html) {
      if (html !== null && html !== undefined) {
        element.innerHTML = html;
        element.classList.remove("stale");
      }
    }).catch(function () {
      element.classList.add("stale");
    });
  }

  function start() {
    var elements = document.querySelectorAll("[data-refresh]");
    Array.prototype.forEach.call(elements, function (element) {
      var interval = parseInt(element.getAttribute("data-interval"), 10) || 3000;
      window.setInterval(function () { refresh(element); }, interval);
    });
    // A picker that shows its choice at once (data-autosubmit) submits its form.
    document.addEventListener("change", function (event) {
      if (event.target.hasAttribute && event.target.hasAttribute("data-autosubmit")) {
        event.target.form.submit();
      }
    });
    // A destructive form asks first (data-confirm holds the question).
    document.addEventListener("submit", function (event) {
      var question = event.target.getAttribute("data-confirm");
      if (question && !window.confirm(question)) {
        event.preventDefault();
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
