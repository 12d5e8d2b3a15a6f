#!/usr/bin/env bash
# The README's 60-second tour with curl, as a script (tests/client/test_tour.py runs it
# against a real server): KEY=<tenant API key> B=<broker URL> bash scripts/tour.sh
set -euo pipefail
: "${KEY:?set KEY to a tenant API key (make run prints the demo key)}"
B=${B:-http://127.0.0.1:8000}
A2A=(-H 'A2A-Version: 1.0' -H 'Content-Type: application/json')

# Register two agents; each gets an agent token (shown once).
ALICE_JSON=$(curl -sf -X POST $B/api/v1/agents -H "Authorization: Bearer $KEY" \
     -H 'Content-Type: application/json' -d '{"name": "alice", "description": "reviewer"}')
BOB_JSON=$(curl -sf -X POST $B/api/v1/agents -H "Authorization: Bearer $KEY" \
     -H 'Content-Type: application/json' -d '{"name": "bob", "description": "builder"}')
ALICE_TOKEN=$(echo "$ALICE_JSON" | jq -r .agent_token)
BOB=$(echo "$BOB_JSON" | jq -r .agent_id); BOB_TOKEN=$(echo "$BOB_JSON" | jq -r .agent_token)

# Discover the tenant's agents (as alice, with her token).
curl -sf $B/api/v1/agents -H "Authorization: Bearer $ALICE_TOKEN" | jq -r '.agents[].name'

# Alice sends Bob a message (A2A 1.0 JSON-RPC; a name is an address, as is $BOB).
# It lands in Bob's inbox as an unread task.
TASK=$(curl -sf $B/a2a/ -H "Authorization: Bearer $ALICE_TOKEN" "${A2A[@]}" \
     -d '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"hello-1",
          "role":"ROLE_USER","parts":[{"text":"please review PR 12"}],"metadata":{"destination":"bob"}}}}' \
     | jq -r .result.task.id)

# Bob lists his unread messages (his token says whose inbox it is).
curl -sf $B/a2a/ -H "Authorization: Bearer $BOB_TOKEN" "${A2A[@]}" \
     -d '{"jsonrpc":"2.0","id":2,"method":"ListTasks","params":{"status":"unread"}}' \
     | jq -r '.result.tasks[] | "\(.id) \(.metadata.fromAgentName): \(.history[0].parts[0].text)"'

# Bob accepts the task (now working) and completes it with a result. A plain `ack` would
# mean "read, nothing to do": it completes the task at once, whatever its text says.
curl -sf $B/a2a/ -H "Authorization: Bearer $BOB_TOKEN" "${A2A[@]}" \
     -d '{"jsonrpc":"2.0","id":3,"method":"SendMessage","params":{"message":{"messageId":"accept-1",
          "role":"ROLE_USER","taskId":"'$TASK'","parts":[{"text":"on it"}],"metadata":{"action":"accept"}}}}' \
     | jq -r .result.task.status.state
curl -sf $B/a2a/ -H "Authorization: Bearer $BOB_TOKEN" "${A2A[@]}" \
     -d '{"jsonrpc":"2.0","id":4,"method":"SendMessage","params":{"message":{"messageId":"done-1",
          "role":"ROLE_USER","taskId":"'$TASK'","parts":[{"text":"LGTM, merged"}],"metadata":{"action":"complete"}}}}' \
     | jq -r .result.task.status.state

# The task's timeline, for either party.
curl -sf $B/api/v1/tasks/$TASK/events -H "Authorization: Bearer $ALICE_TOKEN" \
     | jq -r '.events[] | "\(.kind) by \(.actor.name) → \(.to_state)"'

# The broker's A2A agent card, health and readiness.
curl -sf $B/.well-known/agent-card.json | jq -r .name
curl -sf $B/healthz; echo; curl -sf $B/readyz; echo
