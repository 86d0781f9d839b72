// The Keys page: copy a new key's secret, confirm a revocation, and keep a reload from showing
// the secret again or creating a second key.
(function () {
  "use strict";

  // The secret arrives in the answer to the create form's POST. Replacing this history entry
  // with a plain GET of the page means a reload (or Back, then Forward) asks for the list
  // again — without the secret, and without posting the form a second time.
  if (document.querySelector("[data-secret-shown]")) {
    history.replaceState(null, "", location.pathname);
  }

  const copy = document.getElementById("copy-secret");
  if (copy) {
    const field = document.querySelector(copy.dataset.copy);
    const state = document.getElementById("copy-state");
    copy.addEventListener("click", async () => {
      field.select();
      try {
        await navigator.clipboard.writeText(field.value);
      } catch (error) {
        // No clipboard API (a page over plain HTTP on another host): the old way still works.
        if (!document.execCommand("copy")) {
          state.textContent = "Copy failed: select the secret and copy it by hand.";
          return;
        }
      }
      state.textContent = "Copied.";
    });
  }

  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
})();
