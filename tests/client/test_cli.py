"""The `hikyaku` CLI against a real broker: every command, in text and `--json`, and its exits."""

from __future__ import annotations

import base64
import re
import subprocess

from testbed import free_port
from tests.client.conftest import BIN, LIVE_DB, base_env, hikyaku

pytestmark = LIVE_DB

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def one_error_line(result, pattern: str) -> None:
    assert len(result.err_lines) == 1, result.stderr
    assert re.search(pattern, result.err_lines[0]), result.err_lines[0]
    assert result.err_lines[0].startswith("Error: ")


# register / whoami / agents / deregister


def test_register_prints_export_lines_that_eval_in_a_shell(client_broker, api_key):
    env = base_env(HIKYAKU_URL=client_broker.url, HIKYAKU_API_KEY=api_key)
    result = hikyaku("register", "--name", "evelyn", "--description", "reviews code", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert all(line.startswith(("# ", "export ")) for line in lines), lines
    assert f"export HIKYAKU_URL={client_broker.url}" in lines
    assert re.search(rf"^export HIKYAKU_AGENT_ID={UUID}$", result.stdout, re.M)
    assert re.search(r"^export HIKYAKU_AGENT_TOKEN=hka_\w+$", result.stdout, re.M)
    # The lines work as advertised: eval them, then act as the new agent.
    shell = subprocess.run(
        ["bash", "-c", 'eval "$(hikyaku register --name frank --description x)" && hikyaku whoami'],
        env={**env, "PATH": f"{BIN}:{env.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 0, shell.stderr
    assert re.search(r"name\s+frank", shell.stdout)


def test_register_json_has_the_compat_fields_and_the_token(client_broker, api_key):
    env = base_env(HIKYAKU_URL=client_broker.url, HIKYAKU_API_KEY=api_key)
    skills = '[{"id": "review", "name": "Code review", "description": "Reviews PRs"}]'
    result = hikyaku(
        "--json", "register", "--name", "carol", "--description", "", "--skills", skills, env=env
    )
    assert result.returncode == 0, result.stderr
    body = result.json()
    # The tenant key is never printed back (the REST answer keeps it for old clients).
    assert {"agent_id", "agent_token", "name", "registered_at"} == body.keys()
    assert api_key not in result.stdout + result.stderr and body["name"] == "carol"
    assert body["agent_token"].startswith("hka_")


def test_registering_a_taken_name_says_what_to_do(client_broker, api_key, register):
    dana = register("dana")
    env = base_env(HIKYAKU_URL=client_broker.url, HIKYAKU_API_KEY=api_key)
    again = hikyaku("register", "--name", "dana", "--description", "second", env=env)
    assert again.returncode == 1 and again.stdout == ""
    one_error_line(again, "An agent named 'dana' is already registered in this tenant")
    assert "another --name" in again.stderr and "hikyaku agents --search dana" in again.stderr
    assert "HTTP 409 AGENT_NAME_TAKEN" in again.stderr
    assert dana.run("deregister").returncode == 0  # deregistering frees the name
    assert hikyaku("register", "--name", "dana", "--description", "x", env=env).returncode == 0


def test_send_addresses_an_agent_by_name(register):
    alice, bob = register("alice"), register("bob")
    sent = alice.run_json("send", "--to", "bob", "--text", "by name")["task"]
    assert sent["metadata"]["toAgentId"] == bob.agent_id
    assert [t["id"] for t in bob.run_json("poll")] == [sent["id"]]
    unknown = alice.run("send", "--to", "nobody-by-that-name", "--text", "x")
    assert unknown.returncode == 1
    one_error_line(unknown, "Destination agent not found: nobody-by-that-name")


def test_register_also_takes_the_key_as_an_option(client_broker, api_key):
    env = base_env(HIKYAKU_URL=client_broker.url)
    for args in (
        ["--api-key", api_key, "--json", "register", "--name", "g", "--description", "x"],
        ["--json", "register", "--api-key", api_key, "--name", "s", "--description", "x"],
    ):
        result = hikyaku(*args, env=env)
        assert result.returncode == 0, result.stderr
        assert result.json()["agent_id"]


def test_register_without_a_key_fails_with_one_line(client_broker):
    result = hikyaku(
        "register", "--name", "x", "--description", "y", env=base_env(HIKYAKU_URL=client_broker.url)
    )
    assert result.returncode == 1
    one_error_line(result, "HIKYAKU_API_KEY")


def test_register_with_bad_skills_json_is_a_usage_error(client_broker, api_key):
    env = base_env(HIKYAKU_URL=client_broker.url, HIKYAKU_API_KEY=api_key)
    result = hikyaku("register", "--name", "x", "--description", "y", "--skills", "{no", env=env)
    assert result.returncode == 2
    one_error_line(result, "--skills: invalid JSON")


def test_whoami_and_agents_in_text_and_json(register):
    alice, bob = register("alice", "reviews code"), register("bob", "builds things")
    me = alice.run("whoami")
    assert me.returncode == 0, me.stderr
    assert alice.agent_id in me.stdout and "reviews code" in me.stdout
    assert alice.run_json("whoami")["agent_id"] == alice.agent_id

    table = alice.run("agents")
    assert table.returncode == 0
    header, *rows = table.stdout.strip().splitlines()
    assert header.split() == ["AGENT", "ID", "NAME", "REGISTERED", "LAST", "SEEN", "DESCRIPTION"]
    assert any(alice.agent_id in row and "alice (you)" in row for row in rows)
    assert any(bob.agent_id in row and "builds things" in row for row in rows)
    # Columns line up: every row starts its NAME at the same offset as the header.
    offset = header.index("NAME")
    assert all(row[offset - 2 : offset] == "  " for row in rows)

    listed = alice.run_json("agents")
    assert isinstance(listed, list)
    assert {a["agent_id"] for a in listed} >= {alice.agent_id, bob.agent_id}

    detail = alice.run("agents", "--id", bob.agent_id)
    assert detail.returncode == 0 and "builds things" in detail.stdout
    body = alice.run_json("agents", "--id", bob.agent_id)
    assert body["agent_id"] == bob.agent_id and "agent_card" in body
    assert alice.run_json("agents", "--search", "bo")[0]["name"] == "bob"


def test_agents_for_an_unknown_id_fails_with_one_line(register):
    alice = register("alice")
    result = alice.run("agents", "--id", "00000000-0000-0000-0000-000000000000")
    assert result.returncode == 1
    one_error_line(result, r"not found.*404")


def test_deregister_in_text_and_json(register):
    alice, bob = register("alice"), register("bob")
    result = alice.run("deregister")
    assert result.returncode == 0, result.stderr
    assert f"Agent {alice.agent_id} deregistered." in result.stdout
    assert bob.run_json("deregister") == {"status": "deregistered"}
    gone = alice.run("whoami")
    assert gone.returncode == 1
    one_error_line(gone, "401")


# The old broker's way: tenant key + --agent-id, in either position.


def test_old_cli_invocations_work_unchanged(register):
    alice, bob = register("alice"), register("bob")
    env = alice.key_env
    sent = hikyaku(
        "--json",
        "send",
        "--agent-id",
        alice.agent_id,
        "--to",
        bob.agent_id,
        "--text",
        "hi",
        env=env,
    )
    assert sent.returncode == 0, sent.stderr
    task = sent.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["metadata"]["fromAgentId"] == alice.agent_id

    # Global options before the subcommand, as the old skill documents them.
    polled = hikyaku(
        "--url", bob.url, "--api-key", bob.api_key, "--agent-id", bob.agent_id, "--json", "poll",
        env=base_env(),
    )  # fmt: skip
    assert polled.returncode == 0, polled.stderr
    assert [t["id"] for t in polled.json()] == [task["id"]]

    for args in (
        ["get-task", "--agent-id", bob.agent_id, "--task-id", task["id"]],
        ["agents", "--agent-id", bob.agent_id],
        ["agents", "--agent-id", bob.agent_id, "--id", alice.agent_id],
        [
            "poll",
            "--agent-id",
            bob.agent_id,
            "--page-size",
            "10",
            "--since",
            "2020-01-01T00:00:00Z",
        ],
    ):
        assert hikyaku(*args, env=env).returncode == 0, args

    acked = hikyaku("--json", "ack", "--agent-id", bob.agent_id, "--task-id", task["id"], env=env)
    assert acked.returncode == 0, acked.stderr
    assert acked.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert hikyaku("deregister", "--agent-id", bob.agent_id, env=env).returncode == 0


def test_key_without_agent_id_is_explained(register):
    alice = register("alice")
    result = hikyaku("poll", env=alice.key_env)
    assert result.returncode == 1
    one_error_line(result, "HIKYAKU_AGENT_ID")


# send / broadcast / poll / ack / cancel / get-task


def test_send_and_poll_in_text_and_json(register):
    alice, bob = register("alice"), register("bob")
    sent = alice.run("send", "--to", bob.agent_id, "--text", "Please review PR #42")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith(f"Message sent to bob ({bob.agent_id[:8]}).")
    assert re.search(r"state\s+unread *\n", sent.stdout)

    polled = bob.run("poll")
    assert polled.returncode == 0, polled.stderr
    header, row = polled.stdout.strip().splitlines()
    assert header.split() == ["TASK", "FROM", "STATE", "UPDATED", "MESSAGE"]
    assert f"alice ({alice.agent_id[:8]})" in row and "unread" in row
    assert row.rstrip().endswith("Please review PR #42")
    # Local time, no zone suffix: 2026-01-31 12:00:00.
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row)

    tasks = bob.run_json("poll")
    assert isinstance(tasks, list) and len(tasks) == 1
    assert tasks[0]["artifacts"][0]["parts"] == [{"text": "Please review PR #42"}]
    assert tasks[0]["metadata"]["awaiting"] == "recipient"


def test_poll_of_an_empty_inbox(register):
    alice = register("alice")
    assert alice.run("poll").stdout.strip() == "No messages found."
    assert alice.run_json("poll") == []


def test_send_files_and_data_parts(register, tmp_path):
    alice, bob = register("alice"), register("bob")
    report = tmp_path / "report.md"
    report.write_text("# Findings\n")
    task = alice.run_json(
        "send", "--to", bob.agent_id, "--text", "see attached",
        "--file", str(report), "--data", '{"pr": 42, "files": ["a.py"]}',
    )["task"]  # fmt: skip
    parts = task["artifacts"][0]["parts"]
    assert parts[0] == {"text": "see attached"}
    assert parts[1]["filename"] == "report.md" and parts[1]["mediaType"] == "text/markdown"
    assert base64.b64decode(parts[1]["raw"]) == b"# Findings\n"
    assert parts[2] == {"data": {"pr": 42, "files": ["a.py"]}}
    shown = bob.run("get-task", task["id"])
    assert "[file report.md, 11 B]" in shown.stdout
    assert '[data {"pr":42,"files":["a.py"]}]' in shown.stdout


def test_user_text_is_never_read_as_markup(register):
    alice, bob = register("alice"), register("bob")
    alice.run_json("send", "--to", bob.agent_id, "--text", "[bold]literal[/bold] [red]")
    assert "[bold]literal[/bold] [red]" in bob.run("poll").stdout


def test_send_reuses_a_message_id_idempotently(register):
    alice, bob = register("alice"), register("bob")
    first = alice.run_json("send", "--to", bob.agent_id, "--text", "once", "--message-id", "m-1")
    again = alice.run_json("send", "--to", bob.agent_id, "--text", "once", "--message-id", "m-1")
    assert first["task"]["id"] == again["task"]["id"]
    assert len(bob.run_json("poll")) == 1


def test_send_needs_content_and_a_known_recipient(register):
    alice = register("alice")
    empty = alice.run("send", "--to", alice.agent_id)
    assert empty.returncode == 2
    one_error_line(empty, "give --text, --file or --data")
    unknown = alice.run("send", "--to", "00000000-0000-0000-0000-000000000000", "--text", "x")
    assert unknown.returncode == 1
    one_error_line(unknown, r"Destination agent not found.*-32602")
    missing_file = alice.run("send", "--to", alice.agent_id, "--file", "/nonexistent/x")
    assert missing_file.returncode == 1
    one_error_line(missing_file, "Cannot read '/nonexistent/x'")


def test_broadcast_in_text_and_json(register_alone):
    register = register_alone
    alice, bob, carol = register("alice"), register("bob"), register("carol")
    text = alice.run("broadcast", "--text", "build is red")
    assert text.returncode == 0, text.stderr
    assert "Broadcast sent to 2 agent(s)." in text.stdout
    body = alice.run_json("broadcast", "--text", "build is green")
    assert isinstance(body, list) and len(body) == 1
    summary = body[0]["task"]
    assert summary["metadata"]["type"] == "broadcast_summary"
    assert summary["metadata"]["recipientCount"] == 2
    for agent in (bob, carol):
        texts = [t["artifacts"][0]["parts"][0]["text"] for t in agent.run_json("poll")]
        assert sorted(texts) == ["build is green", "build is red"]
    assert alice.run_json("poll") == []


def test_poll_filters_and_pages(register):
    alice, bob = register("alice"), register("bob")
    ids = [
        alice.run_json("send", "--to", bob.agent_id, "--text", f"m{i}")["task"]["id"]
        for i in range(3)
    ]
    bob.run_json("ack", ids[0])

    unread = bob.run_json("poll", "--status", "input-required")
    assert {t["id"] for t in unread} == set(ids[1:])
    # The human names the tables print are the names the filters take.
    assert {t["id"] for t in bob.run_json("poll", "--status", "unread")} == set(ids[1:])
    listed = bob.run("poll", "--status", "unread").stdout
    assert listed.count("unread") == 2 and ids[0] not in listed
    assert bob.run_json("poll", "--status", "blocked") == []
    assert bob.run_json("poll", "--status", "completed")[0]["id"] == ids[0]
    done = bob.run_json("poll", "--status", "TASK_STATE_COMPLETED")
    assert [t["id"] for t in done] == [ids[0]]

    page = bob.run("--json", "poll", "--page-size", "2")
    assert len(page.json()) == 2
    token = re.search(r"--page-token (\S+)", page.stderr).group(1)
    rest = bob.run_json("poll", "--page-size", "2", "--page-token", token)
    assert len(rest) == 1
    assert {t["id"] for t in page.json() + rest} == set(ids)

    assert len(bob.run_json("poll", "--since", "1h")) == 3
    assert bob.run_json("poll", "--since", "2999-01-01T00:00:00Z") == []
    bad = bob.run("poll", "--since", "yesterday")
    assert bad.returncode == 2
    one_error_line(bad, "not a timestamp")
    bad_state = bob.run("poll", "--status", "sleeping")
    assert bad_state.returncode == 2
    one_error_line(bad_state, "Unknown task state")


def test_ack_in_text_and_json_and_twice(register):
    alice, bob = register("alice"), register("bob")
    first = alice.run_json("send", "--to", bob.agent_id, "--text", "fyi")["task"]["id"]
    second = alice.run_json("send", "--to", bob.agent_id, "--text", "fyi 2")["task"]["id"]
    text = bob.run("ack", "--task-id", first)
    assert text.returncode == 0 and text.stdout.startswith("Message acknowledged.")
    assert re.search(r"state\s+completed *\n", text.stdout)
    assert bob.run_json("ack", second)["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    again = bob.run("ack", first)
    assert again.returncode == 1
    one_error_line(again, "-32004")


def test_cancel_in_text_and_json(register):
    alice, bob = register("alice"), register("bob")
    first = alice.run_json("send", "--to", bob.agent_id, "--text", "oops")["task"]["id"]
    second = alice.run_json("send", "--to", bob.agent_id, "--text", "oops 2")["task"]["id"]
    text = alice.run("cancel", "--task-id", first)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("Task canceled.")
    assert re.search(r"state\s+canceled *\n", text.stdout)
    assert alice.run_json("cancel", second)["task"]["status"]["state"] == "TASK_STATE_CANCELED"
    by_recipient = bob.run("cancel", second)
    assert by_recipient.returncode == 1
    one_error_line(by_recipient, "-3200")


def test_get_task_in_text_and_json(register):
    alice, bob = register("alice"), register("bob")
    task_id = alice.run_json("send", "--to", bob.agent_id, "--text", "details?")["task"]["id"]
    text = bob.run("get-task", "--task-id", task_id)
    assert text.returncode == 0
    assert re.search(rf"task\s+{task_id}", text.stdout)
    assert re.search(rf"to\s+bob \({bob.agent_id[:8]}\)", text.stdout)
    assert "details?" in text.stdout
    body = bob.run_json("get-task", task_id)
    assert body["task"]["id"] == task_id and len(body["task"]["history"]) == 1
    assert bob.run_json("get-task", task_id, "--history-length", "0")["task"].get("history") is None
    missing = bob.run("get-task")
    assert missing.returncode == 2
    one_error_line(missing, "task id is required")
    unknown = bob.run("get-task", "00000000-0000-0000-0000-000000000000")
    assert unknown.returncode == 1
    one_error_line(unknown, "-32001")


# Our lifecycle verbs, outbox and thread.


def test_accept_block_reply_comment_complete_outbox_and_thread(register, tmp_path):
    alice, bob = register("alice"), register("bob")
    task_id = alice.run_json("send", "--to", bob.agent_id, "--text", "Fix the flaky test")["task"][
        "id"
    ]

    accepted = bob.run("accept", task_id)
    assert accepted.returncode == 0 and accepted.stdout.startswith("Task accepted")
    assert re.search(r"state\s+working *\n", accepted.stdout)

    blocked = bob.run_json("block", task_id, "--question", "Which branch?")["task"]
    assert blocked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert blocked["metadata"]["awaiting"] == "sender"
    assert blocked["status"]["message"]["parts"] == [{"text": "Which branch?"}]
    waiting = alice.run("outbox")
    assert "blocked" in waiting.stdout and "Which branch?" in waiting.stdout
    assert [t["id"] for t in alice.run_json("outbox", "--status", "blocked")] == [task_id]
    assert re.search(r"state\s+blocked *\n", alice.run("get-task", task_id).stdout)

    replied = alice.run("reply", task_id, "--text", "main")
    assert replied.returncode == 0 and re.search(r"state\s+working *\n", replied.stdout)
    assert bob.run_json("comment", task_id, "--text", "halfway")["task"]["status"]["state"] == (
        "TASK_STATE_WORKING"
    )
    log = tmp_path / "fix.log"
    log.write_text("ok\n")
    done = bob.run_json("complete", task_id, "--text", "Fixed in abc123", "--file", str(log))[
        "task"
    ]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    result = done["artifacts"][-1]
    assert result["name"] == "result" and result["parts"][0] == {"text": "Fixed in abc123"}

    outbox = alice.run_json("outbox")
    assert [t["id"] for t in outbox] == [task_id]
    assert (
        alice.run_json("outbox", "--to", bob.agent_id, "--status", "completed")[0]["id"] == task_id
    )
    assert alice.run_json("outbox", "--status", "working") == []
    table = alice.run("outbox").stdout
    assert f"bob ({bob.agent_id[:8]})" in table and "completed" in table

    thread = alice.run("thread", task_id)
    assert thread.returncode == 0, thread.stderr
    timeline = thread.stdout[thread.stdout.index("TIME") :]
    kinds = [line.split()[2] for line in timeline.splitlines()[1:] if line.strip()]
    assert kinds == ["created", "accept", "block", "reply", "comment", "complete"]
    assert "Which branch?" in timeline and "TASK_STATE" not in thread.stdout
    changes = [re.search(r"(\S+ → \S+|  unread  )", line) for line in timeline.splitlines()[1:]]
    assert [m.group(1).strip() for m in changes if m] == [
        "unread",
        "unread → working",
        "working → blocked",
        "blocked → working",
        "working → completed",
    ]
    body = alice.run_json("thread", task_id)
    assert body["task"]["id"] == task_id
    assert [e["kind"] for e in body["events"]] == kinds


def test_reject_and_fail(register):
    alice, bob = register("alice"), register("bob")
    first = alice.run_json("send", "--to", bob.agent_id, "--text", "a")["task"]["id"]
    second = alice.run_json("send", "--to", bob.agent_id, "--text", "b")["task"]["id"]
    rejected = bob.run("reject", first, "--reason", "not my area")
    assert rejected.returncode == 0 and rejected.stdout.startswith("Task rejected.")
    assert re.search(r"state\s+rejected *\n", rejected.stdout) and "not my area" in rejected.stdout
    early = bob.run("fail", second, "--reason", "x")
    assert early.returncode == 1  # fail needs an accepted task
    one_error_line(early, "-32004")
    bob.run_json("accept", second)
    failed = bob.run_json("fail", second, "--text", "tests crash")["task"]
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    assert failed["status"]["message"]["parts"] == [{"text": "tests crash"}]


def test_verbs_refuse_the_wrong_party(register):
    alice, bob = register("alice"), register("bob")
    task_id = alice.run_json("send", "--to", bob.agent_id, "--text", "x")["task"]["id"]
    result = alice.run("accept", task_id)
    assert result.returncode == 1
    one_error_line(result, r"JSON-RPC -32\d+")
    usage = bob.run("block", task_id)
    assert usage.returncode == 2
    one_error_line(usage, "--question")
    conflict = bob.run("accept", task_id, "--task-id", "other")
    assert conflict.returncode == 2
    one_error_line(conflict, "two different task ids")


# Errors.


def test_bad_credentials_exit_1_with_one_line(client_broker, register):
    alice = register("alice")
    env = base_env(
        HIKYAKU_URL=client_broker.url,
        HIKYAKU_AGENT_ID=alice.agent_id,
        HIKYAKU_AGENT_TOKEN="hka_" + "x" * 40,
    )
    for args in (["agents"], ["poll"], ["send", "--to", alice.agent_id, "--text", "x"]):
        result = hikyaku(*args, env=env)
        assert result.returncode == 1, args
        one_error_line(result, "401")
        assert result.stdout == ""
    wrong_key = hikyaku(
        "agents",
        "--agent-id",
        alice.agent_id,
        env=base_env(HIKYAKU_URL=client_broker.url, HIKYAKU_API_KEY="hky_" + "0" * 32),
    )
    assert wrong_key.returncode == 1
    one_error_line(wrong_key, "Invalid, revoked or expired API key")


def test_no_credentials_at_all(client_broker):
    result = hikyaku("agents", env=base_env(HIKYAKU_URL=client_broker.url))
    assert result.returncode == 1
    one_error_line(result, "No credentials: set HIKYAKU_AGENT_TOKEN")


def test_usage_errors_exit_2_with_one_line(register):
    alice = register("alice")
    for args, pattern in (
        ([], "required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["send", "--text", "x"], "required: --to"),
        (["send", "--to", "x", "--data", "{"], "--data: invalid JSON"),
        (["poll", "--page-size", "0"], "must be at least 1"),
    ):
        result = alice.run(*args)
        assert result.returncode == 2, (args, result.stderr)
        one_error_line(result, pattern)


def test_connection_refused_names_the_url():
    port = free_port()  # nothing listens there
    url = f"http://127.0.0.1:{port}"
    env = base_env(HIKYAKU_URL=url, HIKYAKU_AGENT_TOKEN="hka_" + "x" * 40, HIKYAKU_AGENT_ID="a")
    for args, path in ((["agents"], "/api/v1/agents"), (["poll"], "/a2a/")):
        result = hikyaku(*args, env=env)
        assert result.returncode == 1
        one_error_line(result, re.escape(f"{url}{path} (connection refused)"))


def test_wrong_url_is_explained(client_broker, register):
    alice = register("alice")
    env = {**alice.env, "HIKYAKU_URL": f"{client_broker.url}/nope"}
    result = hikyaku("poll", env=env)
    assert result.returncode == 1
    one_error_line(result, "is not an A2A endpoint")


def test_help_and_version():
    env = base_env()
    top = hikyaku("--help", env=env)
    assert top.returncode == 0
    for command in (
        "register", "send", "broadcast", "poll", "ack", "cancel", "get-task", "agents",
        "deregister", "accept", "complete", "reject", "fail", "block", "reply", "comment",
        "outbox", "thread", "watch", "whoami",
    ):  # fmt: skip
        assert re.search(rf"^\s+{command}\s", top.stdout, re.M), command
    assert hikyaku("--version", env=env).stdout.startswith("hikyaku ")


def test_get_task_saves_the_tasks_files(register, tmp_path):
    alice, bob = register("alice"), register("bob")
    (tmp_path / "issue.md").write_text("# flaky\n")
    (tmp_path / "fix.bin").write_bytes(b"\x00\x01\xff")
    task_id = alice.run_json(
        "send", "--to", "bob", "--text", "see", "--file", str(tmp_path / "issue.md")
    )["task"]["id"]
    bob.run_json("accept", task_id)
    # A name that tries to leave the directory is reduced to a plain file name.
    import httpx

    crafted = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "crafted-1",
                "role": "ROLE_USER",
                "taskId": task_id,
                "parts": [{"raw": "ZXZpbA==", "filename": "../../evil.txt"}],
                "metadata": {"action": "comment"},
            }
        },
    }
    headers = {"Authorization": f"Bearer {alice.token}", "A2A-Version": "1.0"}
    assert "error" not in httpx.post(f"{alice.url}/a2a/", json=crafted, headers=headers).json()
    bob.run_json("complete", task_id, "--text", "done", "--file", str(tmp_path / "fix.bin"))

    out = tmp_path / "out"
    saved = alice.run("get-task", task_id, "--save-files", str(out))
    assert saved.returncode == 0, saved.stderr
    assert sorted(p.name for p in out.iterdir()) == ["evil.txt", "fix.bin", "issue.md"]
    assert (out / "issue.md").read_text() == "# flaky\n"
    assert (out / "fix.bin").read_bytes() == b"\x00\x01\xff"
    assert not (tmp_path.parent / "evil.txt").exists()
    assert f"Saved {out / 'fix.bin'}" in saved.stderr
    again = alice.run_json("get-task", task_id, "--save-files", str(out))
    assert sorted(again["saved"]) == sorted(
        str(out / n) for n in ("evil-1.txt", "fix-1.bin", "issue-1.md")
    )


def test_a_mistyped_agent_token_is_named_as_such(client_broker):
    env = base_env(HIKYAKU_URL=client_broker.url, HIKYAKU_AGENT_TOKEN="hka_truncated")
    result = hikyaku("agents", env=env)
    assert result.returncode == 1
    one_error_line(result, "Invalid agent token")
    assert "API key" not in result.stderr


def test_thread_names_a_person_who_acted_for_an_agent(register):
    """A person's action from the web UI reads as theirs in `hikyaku thread`."""
    from agents.models import Agent as AgentRow
    from messaging.parties import Sender
    from messaging.services import act_on_task

    alice, bob = register("alice"), register("bob")
    task_id = alice.run_json("send", "--to", bob.agent_id, "--text", "Deploy it")["task"]["id"]
    row = AgentRow.objects.select_related("tenant").get(pk=bob.agent_id)
    act_on_task(
        sender=Sender(tenant=row.tenant, agent=row, person="ann@example.com"),
        task_id=task_id,
        action="accept",
        message={"messageId": "web-accept-1", "parts": []},
    )
    thread = alice.run("thread", task_id)
    assert thread.returncode == 0, thread.stderr
    accept = next(line for line in thread.stdout.splitlines() if " accept " in line)
    assert f"ann@example.com for bob ({bob.agent_id[:8]})" in accept
    events = alice.run_json("thread", task_id)["events"]
    assert events[-1]["actor"]["person"] == "ann@example.com"
