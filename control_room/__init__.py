"""The control room: the operators' pages inside the Django admin (live status, kill switch,
thresholds, provider actions, the static-answer workbench, audit and charts)."""
