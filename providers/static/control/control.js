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
