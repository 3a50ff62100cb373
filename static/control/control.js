// The control room's htmx set-up: every htmx request carries the CSRF token (a request without
// it is refused by Django), and a 422 (a form with errors) is swapped in like a 200.
document.addEventListener("htmx:configRequest", (event) => {
  const token = document.querySelector('meta[name="csrf-token"]');
  if (token) event.detail.headers["X-CSRFToken"] = token.content;
});
document.addEventListener("DOMContentLoaded", () => {
  if (window.htmx) {
    htmx.config.responseHandling = [
      { code: "204", swap: false },
      { code: "422", swap: true },
      { code: "[23]..", swap: true },
      { code: "[45]..", swap: false, error: true },
    ];
  }
});
// The status panel refreshes itself every 2 s, except while the operator is filling in one of
// its forms (the kill switch): the refresh would wipe what they typed.
document.addEventListener("htmx:beforeRequest", (event) => {
  const panel = event.detail.elt;
  if (panel.id === "status-panel" && panel.querySelector("form:focus-within")) {
    event.preventDefault();
  }
});
