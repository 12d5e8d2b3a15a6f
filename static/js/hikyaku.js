// Hikyaku web UI behaviour. Plain JavaScript, loaded from a static file so that the
// Content-Security-Policy can forbid inline scripts.
"use strict";

(function () {
  // Copy buttons: <button data-copy-target="element-id">. Falls back to selecting the text
  // when the Clipboard API is unavailable (plain-HTTP origins other than localhost).
  function copyText(button) {
    var target = document.getElementById(button.getAttribute("data-copy-target"));
    if (!target) return;
    var text = target.textContent.trim();
    var done = function () {
      var label = button.textContent;
      button.textContent = "Copied";
      button.setAttribute("data-copied", "true");
      window.setTimeout(function () { button.textContent = label; }, 2000);
    };
    var select = function () {
      var range = document.createRange();
      range.selectNodeContents(target);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      try { if (document.execCommand("copy")) done(); } catch (e) { /* selected for manual copy */ }
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, select);
    } else {
      select();
    }
  }

  // Close an open <details class="menu"> when clicking elsewhere or pressing Escape.
  function closeMenus(except) {
    document.querySelectorAll("details.menu[open]").forEach(function (menu) {
      if (menu !== except) menu.removeAttribute("open");
    });
  }

  // Show the custom expiry date only when "On a date…" is chosen.
  function syncExpiry() {
    var select = document.getElementById("id_expires");
    var field = document.getElementById("field-expires_on");
    if (select && field) field.hidden = select.value !== "custom";
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy-target]");
    if (button) {
      event.preventDefault();
      copyText(button);
    }
    closeMenus(event.target.closest("details.menu"));
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") closeMenus(null);
  });
  document.addEventListener("change", function (event) {
    if (event.target.id === "id_expires") syncExpiry();
  });
  document.addEventListener("DOMContentLoaded", syncExpiry);
})();
