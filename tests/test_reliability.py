"""Issue 26's findings 8, 9, 12 and 13: what a hostile model, a broken judge endpoint, a
bad task file or a bad config value does, each caught where it happens (each test failed
before its fix)."""

import asyncio
import gc
import json
import urllib.parse

import pytest

from asyncwebrl.envs import judge as judge_module
from asyncwebrl.envs.judge import LLMJudge, precheck
from asyncwebrl.envs.webgym import WebGymEnvironment
from asyncwebrl.records import Step, Task, Trajectory
from asyncwebrl.rollout import response as response_module
from asyncwebrl.rollout.policies import PolicyFailure, Reply
from asyncwebrl.rollout.response import format_response, response_action
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.evaluate import format_table, run_tasks, summarize, write_eval
from asyncwebrl.runtime.rundir import RunDirectory
from asyncwebrl.web.evaluator import Judgement
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.tasks import generate_tasks
from bare_settings import episode_settings, judge_settings, pool_settings  # tests/bare_settings.py
from loopback import TcpEndpoint, read_request  # tests/loopback.py

TASK = Task(task_id="t1", task_name="Find the price of the blue kettle", website="https://shop.example",
            difficulty=1, evaluator_reference=[{"id": "g", "description": "", "facts": ["price is $24.50"]}])


class Unread:
    """Stands in for a module's regex: any use of it fails the test (what must not be read)."""

    def __getattr__(self, name):
        raise AssertionError(f"a regex was used ({name}) where none may be")


def raw_endpoint(reply: bytes) -> TcpEndpoint:
    """A loopback TCP server that reads one HTTP request and answers `reply` (raw bytes,
    well-formed HTTP or not), then closes the connection."""

    def serve(rfile, wfile):
        read_request(rfile)
        wfile.write(reply)

    return TcpEndpoint(serve)


def ok_reply(body: bytes, content_type: str = "application/json") -> bytes:
    """A well-formed HTTP 200 reply carrying `body`."""
    return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        content_type.encode(), len(body), body)


# -- finding 9: parsing is linear-time and bounded; every writer takes any string -------------

@pytest.mark.parametrize("text", ["\n" * 32_000, " \n" * 32_000, "Memory:" + "\n" * 64_000 + "x"])
def test_parsing_a_response_of_many_blank_lines_is_linear(text):
    # `^\s*` under re.M let a match start on any line and run over all the blank lines after
    # it (every start scanning the rest: quadratic, 15.7 s for 32k newlines). Now a label's
    # indent stays within its own line, so the match starts on the label's line.
    indented = text + "\n  Memory: {}"
    last = list(response_module._SECTION.finditer(indented))[-1]
    assert last.start() == indented.rindex("\n") + 1
    parsed, action = response_action(text, "coordinates")
    assert action.invalid and "tool_call" in action.error


def test_an_overlong_response_is_a_counted_no_op_without_any_regex(monkeypatch):
    monkeypatch.setattr(response_module, "_SECTION", Unread())
    text = "Memory: {}\n" * 20_000 + '<tool_call>{"name": "computer_use", "arguments": {"action": "go_back"}}</tool_call>'
    parsed, action = response_action(text, "coordinates")
    assert action.invalid and "too long" in action.error


def test_the_label_only_precheck_runs_after_the_length_cap(monkeypatch):
    with monkeypatch.context() as patched:   # the cap answers first: no regex reads the 16k characters
        patched.setattr(judge_module, "_WORD", Unread())
        patched.setattr(judge_module, "_LABELS_ONLY", Unread())
        assert precheck(TASK, "answer" + " " * 16_000 + "x").startswith("answer too long")
    assert precheck(TASK, "Final answer :--") == "not an answer"
    assert precheck(TASK, "The price is $24.50.") is None


def test_a_lone_surrogate_in_a_response_reaches_the_viewer_and_episodes_file(tmp_path):
    store = ScreenshotStore.in_memory()
    answer = "price \ud800 $24.50"
    step = Step(index=0, url="http://x", action={"name": "answer", "text": answer},
                response=f'Memory: {{"a": "\udfff"}}\n<tool_call>{answer}</tool_call>')
    trajectory = Trajectory(task=TASK, steps=[step], outcome="answered", reward=1.0, answer=answer, episode_id="e1")
    run = RunDirectory(str(tmp_path / "run"), tensorboard=False)
    run.save_trajectory(trajectory, store, "update_000001")   # UnicodeEncodeError before
    run.log_episodes([{"answer": answer}], update=1)
    run.close()
    page = (tmp_path / "run" / "trajectories" / "update_000001" / "index.html").read_text(encoding="utf-8")
    assert "\\ud800" in page and "\\udfff" in page
    with open(tmp_path / "run" / "episodes.jsonl", encoding="utf-8") as f:
        assert json.loads(f.readline())["answer"] == answer   # the escape reads back as the same string


def test_reading_the_verdict_of_a_long_blank_reply_is_linear():
    content = "VERDICT:" + " " * 50_000 + "maybe"
    data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
    endpoint = raw_endpoint(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                           % (len(data), data))
    try:
        judge = LLMJudge(judge_settings(base_url=endpoint.url, model="judge", timeout_s=5.0, retries=0))
        judgement = asyncio.run(judge.judge(TASK, "The kettle costs $24.50.", [b"png"]))
    finally:
        endpoint.close()
    assert judgement.reward is None and "no single verdict" in judgement.note
    # read as one stripped line by fullmatch: the verdict's whitespace runs never touch
    assert judge_module._VERDICT.fullmatch("VERDICT:" + " " * 50_000 + "yes")


# -- finding 8: one bad item ends its own episode, never the evaluation ---------------------

@pytest.mark.parametrize("reply, error", [
    (b"SSH-2.0-OpenSSH_9.6 not http at all\r\n", "APIConnectionError: Connection error. (RemoteProtocolError"),
    (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{\"choices\"",
     "without sending complete message body"),
    (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n" + b"[" * 200_000,
     "RecursionError"),
    # 200 replies that are no chat completion: the client returns them as parsed (or raises
    # JSONDecodeError), and the judge reads no verdict from them
    (ok_reply(b"<html>Bad gateway</html>", "text/html"), "not a chat completion: '<html>"),   # handed back as a str
    (ok_reply(b"{not json"), "JSONDecodeError"),
    (ok_reply(b'{"choices": null}'), "no choices"),
    (ok_reply(b'{"choices": [{"message": null, "finish_reason": "stop"}]}'), "first choice has no message"),
    (ok_reply(b'{"choices": [{"message": {"content": null}, "finish_reason": "stop"}]}'), "no text content"),
])
def test_a_broken_judge_endpoint_makes_the_reward_unknown_not_an_exception(reply, error):
    # collect earlier tests' closed event loops now: one finalised by the garbage collector
    # deep inside the 200,000-bracket JSON parse fails its own repr there (RecursionError in
    # pytest's unraisable-exception hook: a flake of the full suite, not of the judge)
    gc.collect()
    endpoint = raw_endpoint(reply)
    try:
        judge = LLMJudge(judge_settings(base_url=endpoint.url, model="judge", timeout_s=5.0, retries=1, backoff_s=0.01))
        judgement = asyncio.run(judge.judge(TASK, "The kettle costs $24.50.", [b"png"]))
    finally:
        endpoint.close()
    assert judgement.reward is None and "judge unavailable" in judgement.note and error in judgement.note


@pytest.mark.parametrize("depth", [1000, 40_000])
def test_a_response_nested_too_deeply_is_a_counted_no_op(depth):
    deep = "[" * depth
    text = f'Memory: {{"a": {deep}\nProgress: {{}}\n<tool_call>{{"name": "computer_use", "arguments": {deep}</tool_call>'
    parsed, action = response_action(text, "coordinates")   # RecursionError before
    assert action.invalid and "nested too deeply" in action.error
    assert "Memory is not JSON (nested too deeply)" in parsed.errors


class Answering:
    """Answers at once; the "policy-bug" task's agent waits a step, then raises as a buggy
    policy would (its first step's screenshot must still be freed)."""

    def begin(self, task, *, interaction, episode_id):
        class Agent:
            async def act(self, observation, steps):
                if task.task_id == "policy-bug":
                    if not steps:
                        return Reply(format_response({}, {}, "x", "Wait.", {"action": "wait", "time": 0}, "memory"))
                    raise KeyError("a bug in the policy")
                return Reply(format_response({}, {}, "x", "Answer.", {"action": "answer", "text": "It opens at 9:00."}, "memory"))

        return Agent()


class BrokenSampler:
    """A policy whose sampler has failed: every step raises PolicyFailure."""

    def begin(self, task, *, interaction, episode_id):
        class Agent:
            async def act(self, observation, steps):
                raise PolicyFailure("the sampler failed: XlaRuntimeError: device lost")

        return Agent()


def test_an_evaluation_stops_on_a_policy_failure_naming_it():
    """A broken policy is not one bad episode: recording each episode as crashed would go on
    through every task and report a success rate of a run that never acted."""
    from asyncwebrl.envs.local import LocalEnvironment

    with LocalWeb() as web:
        tasks = generate_tasks("test", 1)[:4]
        with pytest.raises(PolicyFailure, match="device lost"):
            asyncio.run(run_tasks(tasks, BrokenSampler(), LocalEnvironment(web, browser_free=True),
                                  episode_settings("test", interaction="set_of_marks", observation="text"),
                                  pool=pool_settings(concurrency=2, driver="http"), progress=None))


class ScriptedJudge:
    """Scores 1, except for the "judge-bug" task, where the call itself raises."""

    async def judge(self, task, answer, screenshots):
        if task.task_id == "judge-bug":
            raise RecursionError("maximum recursion depth exceeded")
        return Judgement(1.0, [True] * len(task.facts), "")


def test_a_blocked_site_a_policy_bug_and_a_judge_bug_end_only_their_episodes(tmp_path):
    with LocalWeb() as web:
        start = web.browser_url(generate_tasks("test", 1)[0].website)
        sites = {"good": start, "judge-bug": start, "policy-bug": start, "blocked": "http://127.0.0.1:9/"}
        tasks = [Task(task_id=name, task_name="Find the opening hours", website=site, difficulty=1,
                      evaluator_reference=[{"id": "g", "description": "", "facts": ["opens at 9:00"]}])
                 for name, site in sites.items()]
        store = ScreenshotStore.in_memory()
        environment = WebGymEnvironment(ScriptedJudge(), store, allow_hosts=[urllib.parse.urlsplit(web.origin).netloc])
        trajectories, wall = asyncio.run(run_tasks(tasks, Answering(), environment,
                                                   episode_settings("test", interaction="coordinates"),
                                                   pool=pool_settings(concurrency=2), store=store, progress=None))
    by_id = {t.task.task_id: t for t in trajectories}
    assert [t.task.task_id for t in trajectories] == list(sites)   # every task has its record, in order
    assert by_id["good"].reward == 1.0
    assert by_id["judge-bug"].reward is None and "judge failed: RecursionError" in by_id["judge-bug"].judge_note
    assert by_id["blocked"].outcome == "crashed" and "navigation blocked" in by_id["blocked"].error
    assert by_id["policy-bug"].outcome == "crashed" and by_id["policy-bug"].error.startswith("KeyError")
    summary = summarize(trajectories, wall)
    assert (summary["episodes"], summary["crashed"], summary["unknown_reward"]) == (1, 2, 1)
    assert summary["crash_reasons"] == {"KeyError": 1, "ValueError": 1}
    # each crash with its message, as a training run's eval_before.json / eval.json keep it
    crashes = {crash["task_id"]: crash["error"] for crash in summary["crashes"]}
    assert crashes.keys() == {"blocked", "policy-bug"} and "navigation blocked" in crashes["blocked"]
    assert "crashed: policy-bug: KeyError" in format_table(summary)
    with open(write_eval(str(tmp_path), summary, trajectories)) as f:
        assert json.load(f)["success_rate"] == 1.0
    assert store.stats.entries == 0


# -- finding 13: the config is checked before anything is built, each error naming its key ---

def default_config(**overrides):
    from configs.default import get_config

    config = get_config()
    for key, value in overrides.items():
        section, name = key.split(".")
        config[section][name] = value
    return config


@pytest.mark.parametrize("key, value, message", [
    ("browser.pages_per_browser", 0, "browser.pages_per_browser must be >= 1, got 0"),
    ("browser.pages", 0, "browser.pages must be >= 1, got 0"),
    ("eval.num_tasks", -1, "eval.num_tasks must be >= 0, got -1"),
    ("train.checkpoint_every", 0, "train.checkpoint_every must be >= 1, got 0"),
    ("train.keep_checkpoints", 0, "train.keep_checkpoints must be >= 1, got 0"),
    ("rl.eta", -1, "rl.eta must be >= 0, got -1"),
    ("rl.group_size", 1, "rl.group_size must be >= 2, got 1"),
    ("rl.groups_per_batch", 0, "rl.groups_per_batch must be >= 1, got 0"),
    ("rl.max_running_groups", 0, "rl.max_running_groups must be >= 1, got 0"),
    ("loss.kind", "ppo", "loss.kind must be one of \\('grpo', 'raft'\\), got 'ppo'"),
    ("loss.normalizer", "tokens", "loss.normalizer must be one of"),
    ("eval.top_p", 0.0, "eval.top_p must be in \\(0, 1\\], got 0.0"),
    ("eval.top_p", 1.5, "eval.top_p must be in \\(0, 1\\], got 1.5"),
])
def test_each_bad_config_value_is_named_by_its_key(key, value, message):
    from asyncwebrl.runtime.validate import validate_config

    with pytest.raises(ValueError, match=message):
        validate_config(default_config(**{key: value}))


def test_every_shipped_config_passes_validation():
    import importlib

    from asyncwebrl.runtime.validate import validate_config

    for name in ("default", "instruct", "miniwob", "warm_start", "thinking"):
        validate_config(importlib.import_module(f"configs.{name}").get_config())
    validate_config(importlib.import_module("configs.default").get_config("bare"))


def test_a_warm_start_run_under_other_agent_settings_than_it_was_trained_with_is_refused(tmp_path):
    """assets/warm_start clicks by label: under set_of_marks each such click would be a no-op,
    a low score rather than an error. Its agent.json names what it was trained with."""
    import json

    from asyncwebrl.runtime import agent_record
    from asyncwebrl.runtime.validate import validate_config

    validate_config(default_config())   # the embedded default agrees with its checkpoint
    with pytest.raises(ValueError, match="agent.interaction='set_of_marks', but assets/warm_start was trained "
                                         "with agent.interaction='labels'"):
        validate_config(default_config(**{"agent.interaction": "set_of_marks"}))
    with pytest.raises(ValueError, match="agent.response_format='action'.*--config.agent.response_format=memory"):
        validate_config(default_config(**{"agent.response_format": "action"}))
    validate_config(default_config(**{"agent.interaction": "set_of_marks", "model.check_agent": False}))
    validate_config(default_config(**{"agent.text_budget": 1024}))   # a longer page cut: not a mismatch

    # what benchmarks/warm_start.py writes is what the check reads
    config = default_config(**{"agent.interaction": "set_of_marks"})
    agent_record.write(str(tmp_path), config.agent)
    assert json.loads((tmp_path / "agent.json").read_text())["interaction"] == "set_of_marks"
    assert agent_record.mismatch(str(tmp_path), config.agent) is None
    assert "agent.interaction='labels'" in agent_record.mismatch(str(tmp_path), default_config().agent)
    assert agent_record.mismatch(str(tmp_path / "elsewhere"), config.agent) is None   # records nothing


def test_main_refuses_a_bad_value_before_building_anything(tmp_path):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    workdir = tmp_path / "run"
    result = subprocess.run([sys.executable, "main.py", "--mode=eval", f"--workdir={workdir}",
                             "--config.browser.pages_per_browser=0"], cwd=root, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0
    assert "browser.pages_per_browser must be >= 1, got 0" in result.stderr
    assert "ZeroDivisionError" not in result.stderr and not workdir.exists()   # nothing was built
