-- wrk script: POST the body in $BENCH_BODY as JSON to the URL's path.
wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"
