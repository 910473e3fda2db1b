"""The LLM repair loop end to end: real HTTP to a scripted endpoint, real files, real edits."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_llm import Content, Delay, HTTPError, Refusal, ScriptedLLM, ToolCalls
from torchport.agents.llm.client import LLMClient, LLMError
from torchport.agents.llm.config import LLMConfig, LLMConfigError, resolve, with_base_url
from torchport.agents.llm.repair import RepairRequest, repair
from torchport.agents.llm.toolbox import Workspace
from torchport.prompts import load

TRAIN = """\
import torch

# the training step
def step(model, x):
    torch.cuda.synchronize()  # wait for the GPU
    y = model(x)
    return y.sum()
"""
REQUEST = RepairRequest(
    kind="construct",
    target="tpu",
    path="train.py",
    start_line=5,
    end_line=5,
    problem="TPD001 torch.cuda.synchronize() has no meaning on a TPU",
)
FIXED = TRAIN.replace(
    "torch.cuda.synchronize()  # wait for the GPU", "torch.accelerator.synchronize()"
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "train.py").write_text(TRAIN, encoding="utf-8")
    return root


def make_client(server: ScriptedLLM, **config) -> LLMClient:
    settings = {"timeout_s": 5.0, "max_retries": 2, **config}
    return LLMClient(LLMConfig(base_url=server.base_url, model="m", **settings), backoff_s=0.01)


def run(script, root: Path, request: RepairRequest = REQUEST, client_config=None, **kwargs):
    with ScriptedLLM(script) as server:
        client = make_client(server, **(client_config or {}))
        result = repair(request, Workspace(root), client, **kwargs)
    return result, server


def sync_fix(**extra) -> dict:
    return {
        "path": "train.py",
        "start_line": 5,
        "end_line": 5,
        "new_code": "torch.accelerator.synchronize()",
        "reason": "device-agnostic sync",
        **extra,
    }


def last_message(request_body: dict) -> dict:
    return request_body["messages"][-1]


# -- protocols -----------------------------------------------------------------------------


def test_native_tool_calls_read_then_edit_then_finish(repo):
    script = [
        ToolCalls([("read_file", {"path": "train.py", "start_line": 4, "end_line": 6})]),
        ToolCalls([("replace_lines", sync_fix())]),
        ToolCalls([("finish", {"summary": "synchronize through torch.accelerator"})]),
    ]
    result, server = run(script, repo)
    assert result.status == "edited", result.error
    assert (repo / "train.py").read_text() == FIXED
    assert result.turns == 3 and result.summary == "synchronize through torch.accelerator"
    [edit] = result.edits
    assert (edit.path, edit.start_line, edit.end_line, edit.tool) == (
        "train.py",
        5,
        5,
        "replace_lines",
    )
    assert edit.before == "    torch.cuda.synchronize()  # wait for the GPU\n"
    assert edit.after == "    torch.accelerator.synchronize()\n"
    # The model was offered native tools and got each tool's answer back under its call id.
    offered = {t["function"]["name"] for t in server.requests[0]["tools"]}
    assert {"read_file", "replace_lines", "finish"} <= offered and "run_verifier" not in offered
    answer = last_message(server.requests[1])
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_1"
    assert answer["content"].splitlines()[0] == "    4| def step(model, x):"
    # The first user message shows the target, the problem and the numbered span.
    user = server.requests[0]["messages"][1]["content"]
    assert "Target: tpu" in user and "TPD001" in user
    assert "    5|     torch.cuda.synchronize()  # wait for the GPU" in user
    assert server.exhausted == 0


def test_json_in_content_with_fences(repo):
    script = [
        Content(
            "Sure.\n```json\n"
            + json.dumps({"tool": "replace_lines", "arguments": sync_fix()})
            + "\n```"
        ),
        Content('{"tool": "finish", "arguments": {"summary": "done"}}'),
    ]
    result, server = run(script, repo)
    assert result.status == "edited"
    assert (repo / "train.py").read_text() == FIXED
    feedback = last_message(server.requests[1])
    assert feedback["role"] == "user" and feedback["content"].startswith("Result of replace_lines:")
    assert "torch.accelerator.synchronize()" in feedback["content"]


def test_span_protocol_offers_no_tools_and_names_the_lines_to_rewrite(repo):
    answer = Content('```json\n{"new_code": "torch.accelerator.synchronize()"}\n```')
    result, server = run([answer], repo, protocol="span")
    assert result.status == "edited" and result.turns == 1
    assert (repo / "train.py").read_text() == FIXED
    body = server.requests[0]
    assert "tools" not in body
    assert "Rewrite line 5 of train.py" in last_message(body)["content"]
    assert '"start_line": 5' in last_message(body)["content"]


def test_span_protocol_repairs_a_dropped_closing_quote_and_asks_again_in_its_own_terms(repo):
    broken = (
        '{"edits": [{"start_line": 5, "end_line": 5, '
        '"new_code": "torch.accelerator.synchronize()}], "summary": "sync"}'
    )
    result, _ = run([Content(broken)], repo, protocol="span")
    assert result.status == "edited" and (repo / "train.py").read_text() == FIXED
    (repo / "train.py").write_text(TRAIN)
    result, server = run(
        [Content("sure, here you go"), Content('{"new_code": "torch.accelerator.synchronize()"}')],
        repo,
        protocol="span",
    )
    assert result.status == "edited" and result.turns == 2
    assert '"edits"' in last_message(server.requests[1])["content"]
    assert '"tool"' not in last_message(server.requests[1])["content"]


def test_span_protocol_empty_edits_is_no_change_and_bad_protocol_is_refused(repo):
    result, _ = run([Content('{"edits": [], "summary": "needs a human"}')], repo, protocol="span")
    assert result.status == "no-change" and (repo / "train.py").read_text() == TRAIN
    with pytest.raises(ValueError, match="protocol"):
        run([], repo, protocol="freeform")


def test_edits_shorthand_applies_every_edit_bottom_up_then_finishes(repo):
    shorthand = {
        "edits": [
            {"start_line": 5, "end_line": 5, "new_code": "torch.accelerator.synchronize()\nn = 1"},
            # copied with its line-number prefix, as small models do
            {
                "start_line": 6,
                "end_line": 7,
                "new_code": "    6| y = model(x)\n    7| return y.mean()",
            },
        ],
        "summary": "two edits",
    }
    result, _ = run([Content(json.dumps(shorthand))], repo)
    assert result.status == "edited" and result.turns == 1 and len(result.edits) == 2
    expected = FIXED.replace("synchronize()\n", "synchronize()\n    n = 1\n")
    assert (repo / "train.py").read_text() == expected.replace("y.sum()", "y.mean()")


def test_malformed_json_is_answered_with_an_error_then_a_good_reply_works(repo):
    script = [
        Content('{"tool": "replace_lines", "arguments": {"path": '),
        Content(json.dumps({"tool": "replace_lines", "arguments": sync_fix()})),
        Content('{"tool": "finish", "arguments": {"summary": "ok"}}'),
    ]
    result, server = run(script, repo)
    assert result.status == "edited" and result.turns == 3
    assert last_message(server.requests[1])["content"].startswith("error: answer with one JSON")


def test_bad_native_arguments_and_unknown_tools_are_errors_the_model_can_read(repo):
    script = [
        ToolCalls([("rm_rf", {"path": "/"}), ("replace_lines", "{not json")]),
        ToolCalls([("replace_lines", {"path": "train.py", "start_line": "five"})]),
        ToolCalls([("finish", {"summary": "nothing to do"})]),
    ]
    result, server = run(script, repo)
    assert result.status == "no-change" and result.edits == []
    first, second = server.requests[1]["messages"][-2:]
    assert "unknown tool 'rm_rf'" in first["content"]
    assert "not valid JSON" in second["content"]
    assert "start_line must be an integer" in last_message(server.requests[2])["content"]
    assert (repo / "train.py").read_text() == TRAIN


def test_a_refused_edit_tells_the_model_which_span_is_valid(repo):
    script = [
        ToolCalls([("replace_lines", {**sync_fix(), "start_line": 4, "end_line": 5})]),
        ToolCalls([("finish", {"summary": "gave up"})]),
    ]
    result, server = run(script, repo)
    assert result.status == "no-change"
    assert "lines 4-7" in last_message(server.requests[1])["content"]


# -- confinement ------------------------------------------------------------------------------


def test_paths_outside_the_workspace_are_refused_and_nothing_outside_is_written(tmp_path, repo):
    outside = tmp_path / "outside.py"
    outside.write_text("SECRET_OUTSIDE = 1\n", encoding="utf-8")
    (repo / "link.py").symlink_to(outside)
    (repo / "notes.env").write_text("X=1\n")
    workspace = Workspace(repo)
    edit = {"start_line": 1, "end_line": 1, "new_code": "x = 2"}
    for path, reason in [
        ("../outside.py", "'..' is not allowed"),
        (str(outside), "is absolute"),
        ("link.py", "points outside"),
        ("notes.env", "not a .py file"),
        ("missing.py", "no such file"),
    ]:
        answer = workspace.call("replace_lines", {"path": path, **edit})
        assert answer.startswith("error:") and reason in answer, (path, answer)
    assert outside.read_text() == "SECRET_OUTSIDE = 1\n"
    assert workspace.edits == []
    # Through the loop: reads that escape are refused, so the outside never reaches the model.
    script = [
        ToolCalls([("read_file", {"path": "../outside.py"}), ("read_file", {"path": "link.py"})]),
        ToolCalls([("finish", {"summary": "x"})]),
    ]
    result, server = run(script, repo)
    assert result.status == "no-change"
    assert all("SECRET_OUTSIDE" not in body for body in server.bodies)


def test_edits_to_files_other_than_the_problem_file_are_refused(repo):
    (repo / "other.py").write_text("a = 1\n")
    script = [
        ToolCalls(
            [
                (
                    "replace_lines",
                    {"path": "other.py", "start_line": 1, "end_line": 1, "new_code": "a = 2"},
                )
            ]
        ),
        ToolCalls([("finish", {"summary": "x"})]),
    ]
    result, server = run(script, repo)
    assert result.status == "no-change"
    assert "only train.py may be edited" in last_message(server.requests[1])["content"]
    assert (repo / "other.py").read_text() == "a = 1\n"


# -- endings --------------------------------------------------------------------------------------


def test_a_refusal_field_ends_the_loop_and_rolls_back_edits(repo):
    script = [ToolCalls([("replace_lines", sync_fix())]), Refusal("I can't do that.")]
    result, _ = run(script, repo)
    assert result.status == "refused" and result.summary == "I can't do that."
    assert result.edits == [] and result.rolled_back == ["train.py"]
    assert (repo / "train.py").read_text() == TRAIN


def test_a_refusal_in_plain_text_is_refused(repo):
    result, _ = run([Content("I'm sorry, but I cannot help with modifying this code.")], repo)
    assert result.status == "refused" and result.turns == 1
    assert (repo / "train.py").read_text() == TRAIN


def test_turn_cap_gives_up_with_turns_equal_to_the_cap(repo):
    script = [ToolCalls([("replace_lines", sync_fix())])] + [
        ToolCalls([("read_file", {"path": "train.py"})]) for _ in range(5)
    ]
    result, server = run(script, repo, max_turns=3)
    assert result.status == "gave-up" and result.turns == 3 and len(server.requests) == 3
    assert (repo / "train.py").read_text() == TRAIN  # the unfinished edit was rolled back


def test_token_budget_gives_up(repo):
    script = [
        ToolCalls([("read_file", {"path": "train.py"})], prompt_tokens=400, completion_tokens=200)
    ] * 5
    result, _ = run(script, repo, max_tokens_total=1000)
    assert result.status == "gave-up" and result.turns == 2 and "token budget" in result.error


def test_timeouts_are_retried_then_reported_as_an_error(repo):
    script = [Delay(2.0, Content("late")) for _ in range(3)]
    result, server = run(script, repo, client_config={"timeout_s": 0.2, "max_retries": 2})
    assert result.status == "error" and "timed out" in result.error
    assert result.usage["retries"] == 2 and result.usage["calls"] == 0
    assert len(server.requests) == 3
    assert (repo / "train.py").read_text() == TRAIN


def test_server_errors_are_retried_and_counted(repo):
    script = [
        HTTPError(500),
        HTTPError(429, "slow down"),
        ToolCalls([("replace_lines", sync_fix())], prompt_tokens=120, completion_tokens=30),
        ToolCalls([("finish", {"summary": "ok"})], prompt_tokens=200, completion_tokens=10),
    ]
    result, server = run(script, repo)
    assert result.status == "edited"
    assert result.usage["retries"] == 2 and result.usage["calls"] == 2
    assert (result.usage["prompt_tokens"], result.usage["completion_tokens"]) == (320, 40)
    assert len(server.requests) == 4


def test_a_client_error_is_not_retried(repo):
    result, server = run([HTTPError(401, "invalid api key"), Content("never")], repo)
    assert result.status == "error" and "HTTP 401" in result.error
    assert len(server.requests) == 1 and result.usage["retries"] == 0


def test_a_server_without_tools_gets_the_json_protocol_for_the_rest_of_the_session(repo):
    script = [
        HTTPError(400, "tools are not supported by this server"),
        Content(json.dumps({"tool": "replace_lines", "arguments": sync_fix()})),
        Content('{"tool": "finish", "arguments": {"summary": "ok"}}'),
    ]
    with ScriptedLLM(script) as server:
        client = make_client(server)
        result = repair(REQUEST, Workspace(repo), client)
    assert result.status == "edited" and not client.tools_supported
    assert "tools" in server.requests[0]
    assert all("tools" not in body for body in server.requests[1:])
    assert client.usage.retries == 0


def test_falling_back_mid_session_turns_native_tool_messages_into_plain_ones(repo):
    script = [
        ToolCalls([("read_file", {"path": "train.py", "start_line": 5, "end_line": 5})]),
        HTTPError(400, "this server does not support tool calling"),
        Content('{"tool": "finish", "arguments": {"summary": "nothing to change"}}'),
    ]
    result, server = run(script, repo)
    assert result.status == "no-change"
    plain = server.requests[2]["messages"]
    assert all(m["role"] != "tool" and "tool_calls" not in m for m in plain)
    assert plain[-1]["content"].startswith("Tool result:\n    5|")
    assert json.loads(plain[-2]["content"])["tool"] == "read_file"


def test_a_deadline_already_passed_gives_up_without_asking(repo):
    result, server = run([Content("never")], repo, deadline_s=0)
    assert result.status == "gave-up" and result.turns == 0 and server.requests == []


def test_a_failed_repair_undoes_only_its_own_edits(repo):
    workspace = Workspace(repo)
    first = [ToolCalls([("replace_lines", sync_fix())]), ToolCalls([("finish", {"summary": "a"})])]
    second = [
        ToolCalls(
            [
                (
                    "replace_lines",
                    {**sync_fix(), "start_line": 7, "end_line": 7, "new_code": "return 0"},
                )
            ]
        ),
        Refusal("no"),
    ]
    with ScriptedLLM(first + second) as server:
        client = make_client(server)
        assert repair(REQUEST, workspace, client).status == "edited"
        result = repair(REQUEST, workspace, client)
    assert result.status == "refused" and result.rolled_back == ["train.py"]
    assert (repo / "train.py").read_text() == FIXED


def test_a_repair_that_fails_verification_then_succeeds(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    program = root / "area.py"
    program.write_text(
        "import math\n\n\ndef area(r):\n    return cuda_area(r)  # CUDA-only helper\n\n\n"
        "print(round(area(1.0), 4))\n"
    )

    def verify() -> dict:
        run = subprocess.run(
            [sys.executable, str(program)], capture_output=True, text=True, timeout=30
        )
        ok = run.returncode == 0 and run.stdout.strip() == "3.1416"
        return {"ok": ok, "error": run.stderr.strip().splitlines()[-1] if run.stderr else None}

    def edit(code: str) -> ToolCalls:
        args = {"path": "area.py", "start_line": 5, "end_line": 5, "new_code": code}
        return ToolCalls([("replace_lines", args)])

    finish = ToolCalls([("finish", {"summary": "area on the CPU"})])
    script = [edit("return pi * r * r"), finish, edit("return math.pi * r * r"), finish]
    request = RepairRequest("failure", "tpu", "area.py", 5, 5, "NameError: name 'cuda_area'")
    result, server = run(script, root, request, verify=verify)
    assert result.status == "edited" and result.verify_calls == 2 and result.turns == 4
    assert "return math.pi * r * r" in program.read_text()
    failure = last_message(server.requests[2])
    assert failure["role"] == "tool" and "NameError: name 'pi' is not defined" in failure["content"]
    offered = {t["function"]["name"] for t in server.requests[0]["tools"]}
    assert "run_verifier" in offered


def test_verification_that_never_passes_gives_up_and_restores_the_file(repo):
    script = [ToolCalls([("replace_lines", sync_fix())]), ToolCalls([("finish", {"summary": "x"})])]
    result, _ = run(script, repo, max_turns=2, verify=lambda: {"ok": False, "error": "boom"})
    assert result.status == "gave-up" and result.verify_calls == 1
    assert (repo / "train.py").read_text() == TRAIN


# -- secrets --------------------------------------------------------------------------------------


def test_secrets_never_reach_the_model_or_the_transcript(repo, monkeypatch):
    api_key = "tp-live-0123456789abcdef"
    aws = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYFAKEKEY"
    token_in_file = "sk-proj-abcdefghijklmnop1234"
    monkeypatch.setenv("TORCHPORT_LLM_API_KEY", api_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", aws)
    source = TRAIN + f"# api key: {token_in_file}\n# aws: {aws}\n"
    (repo / "train.py").write_text(source)
    script = [
        ToolCalls([("read_file", {"path": "train.py"}), ("search", {"pattern": "key"})]),
        ToolCalls([("finish", {"summary": f"saw {token_in_file}"})]),
    ]
    with ScriptedLLM(script) as server:
        config = resolve(server.base_url, os.environ)  # the key comes from the env
        client = LLMClient(config, backoff_s=0.01)
        request = RepairRequest(**{**REQUEST.__dict__, "context": f"env has {api_key}"})
        result = repair(request, Workspace(repo), client)
    assert result.status == "no-change"
    everything = "\n".join(server.bodies) + json.dumps(result.transcript) + result.summary
    for secret in (api_key, aws, token_in_file):
        assert secret not in everything
    assert "[REDACTED]" in server.bodies[1]
    assert (repo / "train.py").read_text() == source  # the file itself is not touched


# -- config --------------------------------------------------------------------------------------


def test_resolve_flags():
    assert resolve("none", {"TORCHPORT_LLM_BASE_URL": "http://x/v1"}) is None
    remote = resolve("http://127.0.0.1:8080/v1/", {})
    assert (remote.base_url, remote.model, remote.api_key, remote.local) == (
        "http://127.0.0.1:8080/v1",
        "default",
        "not-needed",
        False,
    )
    named = resolve("https://api.example.com/v1", {"TORCHPORT_LLM_MODEL": "gpt-4o-mini"})
    assert named.model == "gpt-4o-mini"
    local = resolve("local", {})
    assert local.local and local.base_url == "" and local.model == "qwen2.5-coder-1.5b-instruct"
    started = with_base_url(local, "http://127.0.0.1:9/v1/", model="q4", api_key="k" * 12)
    assert (started.base_url, started.model, started.api_key) == (
        "http://127.0.0.1:9/v1",
        "q4",
        "k" * 12,
    )
    assert with_base_url(local, "http://h/v1").model == local.model
    env = {"TORCHPORT_LLM_BASE_URL": "http://h:1/v1"}
    assert resolve(None, env).base_url == "http://h:1/v1" == resolve("auto", env).base_url
    has_llama = importlib.util.find_spec("llama_cpp") is not None
    assert (resolve("auto", {}) is not None) == has_llama


def test_resolve_rejects_bad_values_listing_the_valid_ones():
    with pytest.raises(LLMConfigError, match="none, auto, local, http://"):
        resolve("gpt4", {})
    with pytest.raises(LLMConfigError, match="not an http"):
        resolve("auto", {"TORCHPORT_LLM_BASE_URL": "localhost:8080"})


def test_api_key_precedence_and_the_key_is_never_shown():
    both = {"TORCHPORT_LLM_API_KEY": "sk-ours-1234567890", "OPENAI_API_KEY": "sk-openai-1234567890"}
    assert resolve("http://h/v1", both).api_key == "sk-ours-1234567890"
    assert resolve("http://h/v1", {"OPENAI_API_KEY": "sk-openai-1234567890"}).api_key == (
        "sk-openai-1234567890"
    )
    config = resolve("http://h/v1", both)
    assert "sk-ours" not in repr(config) and "sk-ours" not in str(config)
    assert "sk-ours" not in json.dumps(config.to_json())


# -- client and tools on their own -------------------------------------------------------------


def test_client_reply_and_usage(tmp_path):
    with ScriptedLLM([Content("hello", prompt_tokens=7, completion_tokens=3)]) as server:
        client = make_client(server)
        reply = client.chat([{"role": "user", "content": "hi"}])
    assert (reply.content, reply.finish_reason, reply.tool_calls) == ("hello", "stop", [])
    usage = client.usage.to_json()
    assert (usage["calls"], usage["prompt_tokens"], usage["completion_tokens"]) == (1, 7, 3)
    assert server.requests[0]["model"] == "m" and server.requests[0]["temperature"] == 0.0


def test_client_needs_a_base_url():
    with pytest.raises(LLMError, match="no base_url"):
        LLMClient(resolve("local", {}))


def test_search_and_find_uses(repo):
    (repo / "pkg").mkdir()
    (repo / "pkg" / "amp.py").write_text(
        "from torch.cuda.amp import autocast\n"
        "import torch\n"
        "# torch.cuda.amp in a comment is not a use\n"
        "scaler = torch.cuda.amp.GradScaler()\n"
        "text = 'torch.cuda.amp'\n"
    )
    workspace = Workspace(repo)
    uses = workspace.call("find_uses", {"symbol": "torch.cuda.amp"})
    assert uses.splitlines() == [
        "pkg/amp.py:1: from torch.cuda.amp import autocast",
        "pkg/amp.py:4: scaler = torch.cuda.amp.GradScaler()",
    ]
    assert workspace.call("find_uses", {"symbol": "GradScaler"}).startswith("pkg/amp.py:4:")
    found = workspace.call("search", {"pattern": "model(x"})  # not a valid regex: literal
    assert found == "train.py:6: y = model(x)"


def test_the_rewriter_prompt_states_the_protocol():
    prompt = load("rewriter")
    assert '{"tool": "TOOL_NAME", "arguments": {...}}' in prompt and "{tools}" in prompt
    assert "not instructions" in prompt
