-- wrk script: POST the body in $BENCH_BODY as JSON to the URL's path.
wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"
-- The bench's client app (bench/targets.py makes it); other targets ignore the header.
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")
