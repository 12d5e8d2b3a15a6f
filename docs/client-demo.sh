#!/usr/bin/env bash
# Two agents coordinating a task end to end with the `hikyaku` CLI; prints a transcript.
# The README's transcript is this script's output. Needs a running broker and a tenant key:
#
#   make run                                   # in another terminal; prints a demo key
#   HIKYAKU_URL=http://127.0.0.1:8000 HIKYAKU_API_KEY=hky_... docs/client-demo.sh
set -euo pipefail
: "${HIKYAKU_URL:?set HIKYAKU_URL}" "${HIKYAKU_API_KEY:?set HIKYAKU_API_KEY}"
export HIKYAKU_URL
work=$(mktemp -d)
trap 'kill "${watch_pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT

# `as NAME command…`: show the command at NAME's prompt, then run it in NAME's environment.
as() {
  local who=$1; shift
  printf '%s$ %s\n' "$who" "$*"
  (source "$work/$who.env" 2>/dev/null || true; cd "$work"; eval "$@") 2>&1
  echo
}
register() {
  local who=$1 description=$2
  printf '%s$ eval "$(hikyaku register --name %s --description %q)"\n' "$who" "$who" "$description"
  hikyaku register --name "$who" --description "$description" | tee "$work/$who.env" \
    | sed 's/\(HIKYAKU_AGENT_TOKEN=hka_\).*/\1…/'
  echo
}

register alice "Reviews pull requests"
register bob "Builds and fixes things"
source "$work/alice.env" && ALICE=$HIKYAKU_AGENT_ID
source "$work/bob.env" && BOB=$HIKYAKU_AGENT_ID
export ALICE BOB
unset HIKYAKU_AGENT_ID HIKYAKU_AGENT_TOKEN

# Alice watches her stream in another terminal for the whole session.
(source "$work/alice.env"; exec hikyaku watch >"$work/watch.out" 2>&1) &
watch_pid=$!
sleep 2

as alice hikyaku agents
echo "Uploads fail on flaky networks; please add retries with backoff." >"$work/issue.md"
as alice 'TASK=$(hikyaku --json send --to bob --text "Please fix the flaky uploader (see issue.md)" --file issue.md | jq -r .task.id); echo $TASK'
TASK=$(source "$work/alice.env"; hikyaku --json outbox | jq -r '.[0].id')
export TASK
as bob hikyaku poll
as bob hikyaku accept '$TASK'
as bob hikyaku block '$TASK' --question '"Should 429 responses be retried too?"'
as alice hikyaku outbox
as alice hikyaku reply '$TASK' --text '"Yes, and honour Retry-After."'
printf 'retry: 5 attempts, exponential backoff, Retry-After honoured\n' >"$work/fix.txt"
as bob hikyaku complete '$TASK' --text '"Fixed in 3f2c1a9; tests added."' --file fix.txt
as alice hikyaku thread '$TASK'
sleep 1
kill "$watch_pid" 2>/dev/null || true
wait "$watch_pid" 2>/dev/null || true
echo "# Meanwhile, in alice's other terminal:"
echo 'alice$ hikyaku watch'
cat "$work/watch.out"
