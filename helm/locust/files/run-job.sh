#!/bin/sh
# Entry point of the headless master Job: run the load test given as arguments, record its exit code next to the
# results, upload them (`slabench results upload`), and exit with the test's own code, which is the verdict.
# A passing run whose evidence could not be uploaded is not a pass: that case exits 4.
# SIGTERM/SIGINT are forwarded to the test so Locust can stop its workers and write what it has.
set -u
results_dir="${RESULTS_DIR:-/results}"

"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
while :; do
  wait "$child"
  verdict=$?
  # wait returns early when a trapped signal arrives; keep waiting until the test has really exited.
  kill -0 "$child" 2>/dev/null || break
done
trap - TERM INT

mkdir -p "$results_dir" 2>/dev/null  # a sweep that stopped before creating its directory still reports
printf '%s\n' "$verdict" >"$results_dir/exit-code" || echo "run-job: cannot write $results_dir/exit-code" >&2
if [ -n "${RESULTS_S3_URI:-}" ]; then
  if ! slabench results upload "$results_dir" "$RESULTS_S3_URI"; then
    echo "run-job: uploading $results_dir to $RESULTS_S3_URI failed" >&2
    [ "$verdict" -eq 0 ] && verdict=4
  fi
fi
echo "run-job: exit code $verdict" >&2
exit "$verdict"
