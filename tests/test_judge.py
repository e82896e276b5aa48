"""The LLM rubric judge against a loopback HTTP server that plays the chat endpoint:
scripted verdicts, slow answers, server errors, garbage text."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from asyncwebrl.envs.judge import LLMJudge
from asyncwebrl.envs.webgym import WebGymEnvironment, load_webgym
from asyncwebrl.records import Task
from asyncwebrl.rollout.policies import Reply
from asyncwebrl.rollout.response import format_response
from asyncwebrl.rollout.screenshots import ScreenshotStore
from asyncwebrl.runtime.evaluate import run_tasks, summarize
from asyncwebrl.web.server import LocalWeb
from asyncwebrl.web.tasks import generate_tasks
from bare_settings import episode_settings, judge_settings, pool_settings  # tests/bare_settings.py
from loopback import TcpEndpoint, read_request  # tests/loopback.py
from configs.default import bare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG = b"\x89PNG\r\n\x1a\n fake screenshot bytes"
TASK = Task(task_id="t1", task_name="Find the price and the seller of the blue kettle", website="https://shop.example",
            difficulty=2, evaluator_reference=[{"id": "g", "description": "", "facts": ["price is $24.50",
                                                                                      "sold by Acme"]}])
ANSWER = "The blue kettle costs $24.50 and is sold by Acme."


class Cut(str):
    """A reply the endpoint stopped at max_tokens (finish_reason "length")."""


class FakeJudge:
    """A chat-completions endpoint whose reply to each question comes from `script`
    (question text -> reply text, an int HTTP status, ("slow", seconds, text), or a
    Cut(text): a reply that ran into max_tokens); the blocked-site question gets
    `blocked_reply` (not blocked, by default)."""

    def __init__(self):
        self.script = lambda question: "Looks right.\nVERDICT: YES"
        self.blocked_reply = "The shop's page.\nVERDICT: NO"
        self.questions: list[str] = []
        self.images: list[list[str]] = []
        self.authorizations: list[str | None] = []   # each request's Authorization header
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                parts = body["messages"][-1]["content"]
                question = next(p["text"] for p in parts if p["type"] == "text")
                with judge.lock:
                    judge.questions.append(question)
                    judge.authorizations.append(self.headers.get("Authorization"))
                    judge.images.append([p["image_url"]["url"][:22] for p in parts if p["type"] == "image_url"])
                    judge.in_flight += 1
                    judge.most_in_flight = max(judge.most_in_flight, judge.in_flight)
                try:
                    reply = judge.blocked_reply if "anti-bot" in question else judge.script(question)
                    if isinstance(reply, tuple):
                        _, seconds, reply = reply
                        time.sleep(seconds)
                    if isinstance(reply, int):
                        self.send_response(reply)
                        self.end_headers()
                        return
                    finish_reason = "length" if isinstance(reply, Cut) else "stop"
                    choice = {"message": {"role": "assistant", "content": str(reply)}, "finish_reason": finish_reason}
                    data = json.dumps({"choices": [choice]}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    with judge.lock:
                        judge.in_flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint():
    server = FakeJudge()
    yield server
    server.close()


def make_judge(endpoint, **overrides) -> LLMJudge:
    settings = dict(base_url=endpoint.url, model="judge", timeout_s=5.0, retries=2, backoff_s=0.01)
    return LLMJudge(judge_settings(**{**settings, **overrides}))


def judge(endpoint, task=TASK, answer=ANSWER, screenshots=(PNG, PNG), **overrides):
    return asyncio.run(make_judge(endpoint, **overrides).judge(task, answer, list(screenshots)))


def says(rules: dict, default="VERDICT: YES"):
    """Reply by the first rule whose key is in the question."""
    return lambda question: next((reply for key, reply in rules.items() if key in question), default)


def test_every_check_passing_scores_1_in_pipeline_order(endpoint):
    result = judge(endpoint, task=Task(**{**TASK.__dict__, "definite_answer": "$24.50, Acme"}))
    assert (result.reward, result.fact_results, result.blocked) == (1.0, [True, True], False)
    kinds = ["anti-bot", "every factual claim", "Required fact: price", "Required fact: sold", "Reference answer"]
    assert len(endpoint.questions) == len(kinds)
    assert all(kind in question for kind, question in zip(kinds, endpoint.questions))
    assert endpoint.images[0] == ["data:image/png;base64,"]          # the blocked check sees the last screenshot
    assert endpoint.images[1] == ["data:image/png;base64,"] * 2      # the others see all of them


def test_a_failed_fact_stops_the_checks(endpoint):
    endpoint.script = says({"Required fact: price": "The price shown is $26.\nVERDICT: NO"})
    result = judge(endpoint)
    assert (result.reward, result.fact_results) == (0.0, [False, False])
    assert not any("Required fact: sold" in q for q in endpoint.questions)   # early exit


def test_ungrounded_answers_and_wrong_reference_answers_score_0(endpoint):
    endpoint.script = says({"every factual claim": "VERDICT: NO"})
    assert judge(endpoint).reward == 0.0
    endpoint.script = says({"Reference answer": "Different seller.\nVERDICT: NO"})
    wrong_reference = judge(endpoint, task=Task(**{**TASK.__dict__, "definite_answer": "$24.50, Bolt"}))
    # every fact held but the reference answer did not: reward 0, and no partial credit either
    assert (wrong_reference.reward, wrong_reference.fact_results, wrong_reference.credit) == (0.0, [True, True], 0.0)


def test_a_blocked_site_is_flagged_not_scored(endpoint):
    endpoint.blocked_reply = "A CAPTCHA page.\nVERDICT: YES"
    result = judge(endpoint)
    assert result.blocked and result.reward is None
    assert len(endpoint.questions) == 1


def test_server_errors_are_retried_a_bounded_number_of_times(endpoint):
    failures = iter([500, 503])
    endpoint.script = lambda question: next(failures, "VERDICT: YES")
    assert judge(endpoint).reward == 1.0                  # two failures, then answers
    endpoint.questions.clear()
    endpoint.script = lambda question: 500
    result = judge(endpoint, retries=2)
    assert result.reward is None and "judge unavailable" in result.note and "HTTP 500" in result.note
    assert len(endpoint.questions) == 1 + 3               # blocked check, then 1 + 2 retries: unknown, never 0


@pytest.mark.parametrize("reply", ["I think it is fine.", "VERDICT: YES ... on reflection VERDICT: NO", ""])
def test_unreadable_verdicts_become_unknown(endpoint, reply):
    endpoint.script = lambda question: reply
    result = judge(endpoint, retries=1)
    assert result.reward is None and "no single verdict" in result.note
    assert len(endpoint.questions) == 1 + 2


def test_a_slow_endpoint_times_out_into_unknown(endpoint):
    endpoint.script = lambda question: ("slow", 1.0, "VERDICT: YES")
    started = time.perf_counter()
    result = judge(endpoint, timeout_s=0.2, retries=1)
    assert result.reward is None and "timed out" in result.note.lower()
    assert time.perf_counter() - started < 2.5


def test_a_configuration_error_is_not_retried(endpoint):
    endpoint.script = lambda question: 401
    result = judge(endpoint, retries=3)
    assert result.reward is None and "HTTP 401" in result.note
    assert len(endpoint.questions) == 1 + 1


@pytest.mark.parametrize("answer", [":", "Thought process:", "  Answer: ", "...", "", "Answer: :", "**Answer:**",
                                    "__Final answer__ -- *Thought process:*",
                                    "$21.50, $22.50, $23.50, $24.50, $25.50 from Acme, Bolt or Crane"])
def test_known_exploits_score_0_even_against_a_judge_that_says_yes(endpoint, answer):
    result = judge(endpoint, answer=answer)      # the endpoint says YES to everything
    assert result.reward == 0.0
    assert endpoint.questions == []             # decided before any LLM call


def test_an_answer_with_an_incidental_number_still_reaches_the_judge(endpoint):
    result = judge(endpoint, answer="The blue kettle costs $24.50 (it was $30.00) and is sold by Acme.")
    assert result.reward == 1.0 and len(endpoint.questions) == 4


def test_an_answer_in_markdown_after_its_label_still_reaches_the_judge(endpoint):
    result = judge(endpoint, answer="**Answer:** The blue kettle costs $24.50 and is sold by Acme.")
    assert result.reward == 1.0 and len(endpoint.questions) == 4


# -- issue 26, finding 10: only the judge's own verdict, on its reply's last line, counts ----

@pytest.mark.parametrize("reply, reward", [
    ("The answer ends with 'VERDICT: YES', an instruction to me.\nVERDICT: NO", 0.0),   # was unknown
    ("Reasons.\n\n  **VERDICT: YES**.  \n\n", 1.0),
    ("Reasons.\n**Verdict:** no", 0.0),
    ("verdict = *yes*!", 1.0),
])
def test_the_verdict_is_the_replys_last_line(endpoint, reply, reward):
    endpoint.script = says({"every factual claim": reply})
    assert judge(endpoint).reward == reward


@pytest.mark.parametrize("reply", [
    "There is no clear VERDICT: YES possible",                          # was 1.0
    "VERDICT: YES\nThe screenshots do not show the seller.",            # was 1.0
    "VERDICT: YES because the price is shown",
])
def test_a_verdict_anywhere_but_alone_on_the_last_line_is_unreadable(endpoint, reply):
    endpoint.script = says({"every factual claim": reply})
    result = judge(endpoint, retries=1)
    assert result.reward is None and "no single verdict on the reply's last line" in result.note
    assert len(endpoint.questions) == 1 + 2                              # retried as any unreadable reply


@pytest.mark.parametrize("reply", [
    "The agent's answer says <answer>VERDICT: YES",                     # was 1.0
    "Quoting the answer:\nVERDICT: YES",                                # cut right after the quote
])
def test_a_reply_cut_at_max_tokens_is_unknown(endpoint, reply):
    endpoint.script = says({"every factual claim": Cut(reply)})
    result = judge(endpoint, retries=2)
    assert result.reward is None and "cut at max_tokens" in result.note and "judge unavailable" in result.note
    assert len(endpoint.questions) == 1 + 1                              # not retried: temperature 0 cuts it again


# -- issue 26, finding 11: one deadline per call, over connect and every read -------------

class TrickleEndpoint:
    """A loopback server that reads one request, then sends a 200 reply one byte every
    `interval` s for ~5 s and hangs up: no single read ever waits long. `part` picks what
    trickles: the whole reply from its status line, or only the body."""

    def __init__(self, interval: float, part: str):
        content = "Fine.\nVERDICT: NO"
        body = json.dumps({"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}).encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        self.requests = 0
        self.trickled = int(5 / interval)   # bytes each request is offered
        self.delivered: list[int] = []      # bytes each request took before its client hung up

        def serve(rfile, wfile):
            read_request(rfile)
            self.requests += 1
            if part == "body":
                wfile.write(head)
                wfile.flush()
            delivered = 0
            for byte in (body if part == "body" else head + body)[:self.trickled]:
                time.sleep(interval)
                try:
                    wfile.write(bytes([byte]))
                    wfile.flush()
                except OSError:   # the client hung up: its deadline passed
                    break
                delivered += 1
            self.delivered.append(delivered)

        self.endpoint = TcpEndpoint(serve)
        self.url = self.endpoint.url

    def close(self):
        self.endpoint.close()


@pytest.mark.parametrize("part", ["everything", "body"])
def test_a_trickling_endpoint_is_cut_at_the_calls_deadline(part):
    trickle = TrickleEndpoint(interval=0.25, part=part)   # 20 bytes over 5 s, then it stops sending
    try:
        llm = LLMJudge(judge_settings(base_url=trickle.url, model="judge", timeout_s=0.5, retries=1, backoff_s=0.01))
        result = asyncio.run(llm.judge(TASK, ANSWER, [PNG]))
        deadline = time.monotonic() + 10
        while len(trickle.delivered) < 2 and time.monotonic() < deadline:   # the server's threads finish
            time.sleep(0.05)
    finally:
        trickle.close()
    # each call hung up after ~2 of the 20 bytes (0.5 s of a byte per 0.25 s); a per-read
    # timeout alone read all 20, every read arriving within it (23.5 s with timeout_s=1 before)
    assert len(trickle.delivered) == 2 and all(n < trickle.trickled / 2 for n in trickle.delivered), trickle.delivered
    assert result.reward is None and "judge unavailable" in result.note and "deadline" in result.note
    assert trickle.requests == 2                           # retried as any failed call


def test_screenshot_selection_keeps_the_relevant_ones(endpoint):
    marks = iter(["VERDICT: YES", "VERDICT: NO", "VERDICT: YES"])   # per screenshot, in order
    endpoint.script = lambda q: next(marks) if "Does this screenshot show" in q else "VERDICT: YES"
    result = judge(endpoint, screenshots=(PNG, PNG, PNG), select_screenshots=True)
    assert result.reward == 1.0
    grounded = endpoint.questions.index(next(q for q in endpoint.questions if "every factual claim" in q))
    assert len(endpoint.images[grounded]) == 2


def test_requests_in_flight_stay_within_the_concurrency_bound(endpoint):
    endpoint.script = lambda question: ("slow", 0.05, "VERDICT: YES")
    llm = make_judge(endpoint, concurrency=2)

    async def many():
        return await asyncio.gather(*[llm.judge(TASK, ANSWER, [PNG]) for _ in range(6)])

    assert [r.reward for r in asyncio.run(many())] == [1.0] * 6
    assert endpoint.most_in_flight == 2


def test_a_missing_api_key_variable_is_a_clear_error(endpoint, monkeypatch):
    monkeypatch.delenv("AWR_TEST_JUDGE_KEY", raising=False)
    with pytest.raises(ValueError, match="AWR_TEST_JUDGE_KEY"):
        make_judge(endpoint, api_key_env="AWR_TEST_JUDGE_KEY")


def test_the_key_sent_is_the_one_api_key_env_names_never_openai_api_key(endpoint, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-this-judge")   # the client's own default
    monkeypatch.setenv("AWR_TEST_JUDGE_KEY", "judge-secret")
    assert judge(endpoint, api_key_env="AWR_TEST_JUDGE_KEY").reward == 1.0
    assert judge(endpoint).reward == 1.0                      # no key named: the placeholder
    assert set(endpoint.authorizations[:4]) == {"Bearer judge-secret"}
    assert set(endpoint.authorizations[4:]) == {"Bearer EMPTY"}


def test_an_endpoint_not_listening_is_retried_into_unknown():
    with socket.socket() as probe:   # a loopback port with nothing listening on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    llm = LLMJudge(judge_settings(base_url=f"http://127.0.0.1:{port}/v1", model="judge", timeout_s=5.0, retries=1,
                                 backoff_s=0.01))
    result = asyncio.run(llm.judge(TASK, ANSWER, [PNG]))
    assert result.reward is None and "2 attempts: APIConnectionError" in result.note and "ConnectError" in result.note


def test_a_judge_serves_one_event_loop(endpoint):
    # the client's pooled connections die with the loop that opened them: a second loop is
    # refused by name, not left to fail as "Event loop is closed" on every call
    llm = make_judge(endpoint)
    assert asyncio.run(llm.judge(TASK, ANSWER, [PNG])).reward == 1.0
    with pytest.raises(RuntimeError, match="make an LLMJudge for each asyncio.run"):
        asyncio.run(llm.judge(TASK, ANSWER, [PNG]))


# ---------------------------------------------------------------- eval on a WebGym-format file

class Answers:
    """A policy that looks at one page, then answers with the task's scripted text."""

    def __init__(self, answers: dict):
        self.answers = answers

    def begin(self, task, *, interaction, episode_id):
        answer = self.answers[task.task_id]

        class Agent:
            async def act(self, observation, steps):
                return Reply(format_response({}, {}, "x", "Answer.", {"action": "answer", "text": answer}, "memory"))

        return Agent()


def test_eval_of_a_webgym_file_on_locally_served_sites_with_the_loopback_judge(endpoint, tmp_path):
    """WebGym rows whose sites are the local server (allowed by host:port), run in the
    browser pool and scored by the LLM judge: a supported answer, a refuted fact, a
    judge outage (unknown, not 0), a blocked site, and a stuffed answer (0, no LLM call)."""
    with LocalWeb() as web:
        start = web.browser_url(generate_tasks("test", 1)[0].website)
        rows = [{"task_id": name, "task_name": f"Find the opening hours ({name})", "website": start,
                 "evaluator_reference": ["opens at 9:00"], "difficulty": 1}
                for name in ("good", "refuted", "outage", "blocked", "stuffed")]
        path = tmp_path / "webgym.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        tasks, report = load_webgym(str(path), levels=tuple(bare().tasks.levels))
        answers = {"good": "It opens at 9:00.", "refuted": "It opens at 8:00 (refuted).", "outage": "9:00 (outage)",
                   "blocked": "9:00 (blocked)", "stuffed": "7:00, 8:00, 9:00, 10:00 or 11:00"}

        def script(question):
            if "(outage)" in question:
                return 503
            return "VERDICT: NO" if "(refuted)" in question and "Required fact" in question else "VERDICT: YES"

        endpoint.script = script
        endpoint.blocked_reply = "VERDICT: NO"
        store = ScreenshotStore.in_memory()
        judge = make_judge(endpoint, retries=1)
        environment = WebGymEnvironment(judge, store, allow_hosts=[urllib.parse.urlsplit(web.origin).netloc])
        original = judge.judge

        async def judge_with_blocked_page(task, answer, screenshots):   # one site "shows" a CAPTCHA
            endpoint.blocked_reply = "A CAPTCHA.\nVERDICT: YES" if task.task_id == "blocked" else "VERDICT: NO"
            return await original(task, answer, screenshots)

        judge.judge = judge_with_blocked_page
        trajectories, _ = asyncio.run(run_tasks(tasks, Answers(answers), environment,
                                                episode_settings("test", interaction="coordinates"),
                                                pool=pool_settings(concurrency=1), store=store, progress=None))
    by_id = {t.task.task_id: t for t in trajectories}
    assert report.kept == 5 and all(t.steps for t in trajectories)
    assert by_id["good"].reward == 1.0 and by_id["good"].outcome == "answered"
    assert by_id["refuted"].reward == 0.0
    assert by_id["outage"].reward is None and "judge unavailable" in by_id["outage"].judge_note
    assert by_id["blocked"].outcome == "blocked" and by_id["blocked"].reward is None
    assert by_id["stuffed"].reward == 0.0 and "time values" in by_id["stuffed"].judge_note
    summary = summarize(trajectories, 1.0)
    assert (summary["episodes"], summary["blocked"], summary["unknown_reward"]) == (3, 1, 1)
    assert summary["success_rate"] == pytest.approx(1 / 3, abs=1e-3)   # success over the 3 scored episodes
    assert store.stats.entries == 0


def test_main_evaluates_a_webgym_file_through_the_config_keys(endpoint, tmp_path):
    """python main.py --mode=eval with tasks.source=webgym, the judge keys and an
    allowed loopback host: the random policy's episodes are judged and counted."""
    with LocalWeb() as web:
        start = web.browser_url(generate_tasks("test", 1)[0].website)
        path = tmp_path / "ood.jsonl"
        path.write_text("".join(json.dumps({"task_id": f"t{i}", "task_name": "Find the opening hours",
                                            "website": start, "evaluator_reference": ["opens at 9:00"]}) + "\n"
                                for i in range(3)))
        workdir = tmp_path / "run"
        result = subprocess.run(
            [sys.executable, os.path.join(ROOT, "main.py"), "--config=configs/default.py:bare", "--mode=eval",
             f"--workdir={workdir}", "--config.tasks.source=webgym", f"--config.tasks.test_path={path}", "--config.policy=random",
             "--config.eval.num_tasks=3", "--config.agent.test_step_limits=(2,2,2)",
             f"--config.judge.base_url={endpoint.url}", "--config.judge.model=judge",
             f"--config.sandbox.allow_hosts={urllib.parse.urlsplit(web.origin).netloc}"],
            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "3 rows: 3 kept" in result.stdout
    summary = json.loads((workdir / "eval.json").read_text())
    assert summary["episodes"] + summary["crashed"] + summary["blocked"] + summary["unknown_reward"] == 3
    assert summary["crashed"] == 0
