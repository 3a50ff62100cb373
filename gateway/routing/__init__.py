"""One request's walk: the cascade (`cascade.route`), each attempt's admission, call and settling
(`attempts`), the strategies, and the ports the walk talks through (docs/architecture.md,
"A request's walk")."""
