// Live regions: <div data-live-region data-live-events="<EventSource URL>"
// data-live-fragment="<URL of the region's HTML>">. When an event arrives on the stream the
// region's HTML is fetched again and swapped in (at most one fetch in flight, coalescing
// bursts). A [data-live-status] element shows whether the stream is connected. Pages without
// an events URL are simply not live. While a [data-live-hold] form inside the region has the
// focus or holds typed text, the swap waits (the person's words are never replaced); it
// happens once the form is left empty and unfocused, and the server decides on what is
// submitted meanwhile.
"use strict";

(function () {
  function setStatus(state, text) {
    document.querySelectorAll("[data-live-status]").forEach(function (el) {
      el.setAttribute("data-live-status", state);
      var label = el.querySelector(".live-text");
      if (label) label.textContent = text;
    });
  }

  function makeLive(region) {
    var eventsUrl = region.getAttribute("data-live-events");
    var fragmentUrl = region.getAttribute("data-live-fragment");
    if (!eventsUrl || !fragmentUrl || !window.EventSource) return;

    var fetching = false;
    var again = false;
    var held = false;
    function holding() {
      return Array.prototype.some.call(region.querySelectorAll("[data-live-hold]"), function (form) {
        if (form.contains(document.activeElement)) return true;
        return Array.prototype.some.call(form.querySelectorAll("textarea, input[type=text]"),
          function (field) { return field.value.trim() !== ""; });
      });
    }
    region.addEventListener("focusout", function () {
      // Focus moves after focusout: look once it has landed.
      setTimeout(function () { if (held && !holding()) { held = false; refresh(); } }, 0);
    });
    function refresh() {
      if (holding()) { held = true; return; }
      if (fetching) { again = true; return; }
      fetching = true;
      fetch(fragmentUrl, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.text();
        })
        .then(function (html) {
          if (holding()) { held = true; return; }  // typing began while this was fetched
          region.innerHTML = html;
          // The fragment carries the filter tabs' counts, which live outside the region.
          region.querySelectorAll("[data-count-for]").forEach(function (el) {
            var name = el.getAttribute("data-count-for");
            document.querySelectorAll('[data-count="' + name + '"]').forEach(function (tab) {
              tab.textContent = el.textContent;
            });
          });
          region.dispatchEvent(new CustomEvent("live:updated", { bubbles: true }));
        })
        .catch(function () { /* the next event retries */ })
        .finally(function () {
          fetching = false;
          if (again) { again = false; refresh(); }
        });
    }

    var source = new EventSource(eventsUrl, { withCredentials: true });
    setStatus("connecting", "Connecting…");
    source.addEventListener("open", function () { setStatus("live", "Live"); });
    source.addEventListener("ready", function () { setStatus("live", "Live"); });
    source.addEventListener("error", function () {
      // EventSource reconnects by itself; the region is refreshed once it is back.
      setStatus(source.readyState === EventSource.CLOSED ? "offline" : "connecting",
        source.readyState === EventSource.CLOSED ? "Offline — reload to refresh" : "Reconnecting…");
    });
    ["message", "task-update"].forEach(function (name) {
      source.addEventListener(name, refresh);
    });
    var opened = false;
    source.addEventListener("open", function () {
      if (opened) refresh();  // a reconnect: catch up on anything missed meanwhile
      opened = true;
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live-region]").forEach(makeLive);
  });
})();
