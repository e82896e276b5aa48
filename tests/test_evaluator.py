"""The programmatic judge: normalisation, near misses, answer stuffing, state facts."""

import pytest

from asyncwebrl.records import Task
from asyncwebrl.web.evaluator import extract, judge, normalize_value


def make_task(facts, checks, *, name="t"):
    return Task(
        task_id=name, task_name="x", website="http://awr.local/x/", difficulty=len(facts),
        evaluator_reference=[{"id": "g0", "description": "d", "facts": facts}],
        local={"site": "shop-v1-s00", "split": "train", "template": "t", "oracle": [],
               "checks": [{"type": c[0], "source": c[1] if len(c) > 1 else "answer",
                           "key": c[2] if len(c) > 2 else "", "vocab": c[3] if len(c) > 3 else ""} for c in checks]},
    )


PRICE_CODE = make_task(["$1,299.00", "LP-4821"], [("number",), ("code",)])


@pytest.mark.parametrize("answer", [
    "Price $1,299.00, code LP-4821",
    "code lp-4821; price 1299",
    "The Aurora X14 Laptop costs 1,299 dollars (product code LP-4821).",
    "PRICE:   $1299.00\nCODE: LP-4821",
])
def test_equivalent_spellings_pass(answer):
    assert judge(PRICE_CODE, answer, {}).reward == 1.0


@pytest.mark.parametrize("answer, why", [
    ("Price $1,289.00, code LP-4821", "wrong digit in the price"),
    ("Price $1,299.00, code LP-4812", "wrong digit in the code"),
    ("Price $1,299.00", "partial: code missing"),
    ("Price $12,990.00, code LP-4821", "a different number that contains the digits"),
    ("Price $1,299.00 or $999.00, code LP-4821", "stuffing: two prices for one"),
    ("codes LP-4821, LP-1234, KB-5555; price $1,299.00", "stuffing: three codes for one"),
    (":", "degenerate answer"),
    ("Thought process:", "degenerate answer"),
    ("", "empty answer"),
])
def test_near_misses_fail(answer, why):
    assert judge(PRICE_CODE, answer, {}).reward == 0.0, why


def test_fact_results_are_per_fact():
    result = judge(PRICE_CODE, "Price $1,299.00", {})
    assert result.fact_results == [True, False]


def test_dates_in_any_common_spelling():
    task = make_task(["March 5, 2026"], [("date",)])
    for answer in ["2026-03-05", "March 5, 2026", "5 March 2026", "Mar 5 2026", "on march 5th, 2026"]:
        assert judge(task, answer, {}).reward == 1.0, answer
    for answer in ["2026-03-06", "March 2026", "5 May 2026"]:
        assert judge(task, answer, {}).reward == 0.0, answer


def test_phone_formatting_and_email_case():
    task = make_task(["(415) 555-0134", "maria.lopez@beacon.edu"], [("phone",), ("email",)])
    assert judge(task, "415-555-0134, Maria.Lopez@Beacon.edu", {}).reward == 1.0
    assert judge(task, "415 555 0134 / maria.lopez@beacon.edu", {}).reward == 1.0
    assert judge(task, "415-555-0143, maria.lopez@beacon.edu", {}).reward == 0.0
    assert judge(task, "(415) 555-0134, m.lopez@beacon.edu", {}).reward == 0.0


def test_text_facts_need_whole_words_and_vocabulary_stuffing_fails():
    task = make_task(["Maria Lopez"], [("text", "answer", "", "person_name")])
    names = {"person_name": ["Maria Lopez", "Omar Ito", "Mei Sato", "Maria Lopez Garcia"]}
    assert judge(task, "The head is maria  LOPEZ.", {}, names).reward == 1.0
    assert judge(task, "Maria", {}, names).reward == 0.0  # partial
    assert judge(task, "Maria Lopez, Omar Ito or Mei Sato", {}, names).reward == 0.0  # stuffing


def test_numbers_inside_dates_codes_and_names_are_not_counted_twice():
    task = make_task(["24 months"], [("number",)])
    assert judge(task, "Aurora X14 Laptop (LP-4821, listed 2026-01-02): warranty 24 months", {}).reward == 1.0
    found = extract("Aurora X14, LP-4821, 2026-01-02, (415) 555-0134, $1,299.50 and 3.5 kg")
    assert found["number"] == ["1299.5", "3.5"]
    assert found["code"] == ["LP-4821"]
    assert found["date"] == ["2026-01-02"]
    assert found["phone"] == ["4155550134"]


def test_overlong_answers_fail():
    task = make_task(["LP-4821"], [("code",)])
    assert judge(task, "LP-4821 " + "blah " * 100, {}).reward == 0.0


def test_state_facts_read_the_episode_state():
    task = make_task(["2", "1"], [("number", "state", "cart.LP-4821"), ("number", "state", "cart.#")])
    assert judge(task, "done", {"cart": {"LP-4821": 2}}).reward == 1.0
    assert judge(task, "done", {"cart": {"LP-4821": 1}}).reward == 0.0
    assert judge(task, "done", {"cart": {"LP-4821": 2, "KB-1111": 1}}).reward == 0.0  # extra line
    assert judge(task, "done", {}).reward == 0.0


def test_state_echo_needs_the_issued_code_in_the_answer():
    task = make_task([""], [("code", "state_echo", "booking.confirmation")])
    session = {"booking": {"confirmation": "CF-73120"}}
    assert judge(task, "Booked, confirmation CF-73120", session).reward == 1.0
    assert judge(task, "Booked, confirmation CF-73121", session).reward == 0.0
    assert judge(task, "Booked, confirmation CF-73120", {}).reward == 0.0


def test_malformed_fact_is_a_task_error_not_a_silent_zero():
    task = make_task(["not a code"], [("code",)])
    with pytest.raises(ValueError, match="not a valid code"):
        judge(task, "anything", {})


def test_normalize_value():
    assert normalize_value("$1,299.00", "number") == "1299"
    assert normalize_value("1.40 kg", "number") == "1.4"
    assert normalize_value("lp-4821", "code") == "LP-4821"
    assert normalize_value("  Forest   Green ", "text") == "forest green"


def test_times_are_their_own_kind():
    task = make_task(["18:30", "$12.00"], [("time",), ("number",)])
    assert judge(task, "starts 6:30 pm, tickets $12", {}).reward == 1.0
    assert judge(task, "starts 18:30, tickets 12 dollars", {}).reward == 1.0
    assert judge(task, "starts 18:00, tickets $12", {}).reward == 0.0


def test_values_named_by_the_instruction_may_be_repeated():
    task = make_task(["$12.00"], [("number",)])
    task.task_name = "What does the event on March 5 cost for 2 people?"
    assert judge(task, "The March 5 event costs $12.00 for 2 people", {}).reward == 1.0
    assert judge(task, "The March 5 event costs $12.00 or $15.00", {}).reward == 0.0
    rooms = {"room_name": ["Workshop", "Main Hall", "Studio A"]}
    task = make_task(["Main Hall"], [("text", "answer", "", "room_name")])
    task.task_name = 'In which room is the event "Pottery Workshop"?'
    assert judge(task, "Pottery Workshop: Main Hall", {}, rooms).reward == 1.0
    assert judge(task, "Main Hall or the Workshop", {}, rooms).reward == 0.0


def test_partial_credit_is_the_share_of_facts_and_nothing_for_a_broken_rule():
    """rl.reward=facts trains on Judgement.credit: half the facts right is 0.5 (reward 0),
    all of them 1 (reward 1), and an answer that stuffs candidates earns 0 however many of
    its facts are right."""
    assert judge(PRICE_CODE, "Price $1,299.00, code LP-4812", {}).credit == 0.5
    assert judge(PRICE_CODE, "Price $1,289.00, code LP-4812", {}).credit == 0.0
    full = judge(PRICE_CODE, "Price $1,299.00, code LP-4821", {})
    assert (full.reward, full.credit) == (1.0, 1.0)
    stuffed = judge(PRICE_CODE, "Price $1,299.00 or $999.00, code LP-4821", {})
    assert stuffed.fact_results == [True, True] and (stuffed.reward, stuffed.credit) == (0.0, 0.0)
    assert judge(make_task(["LP-4821"], [("code",)]), "LP-4821 " + "blah " * 100, {}).credit == 0.0


def test_a_judge_without_partial_credit_gets_the_share_of_its_fact_results():
    from asyncwebrl.web.evaluator import Judgement

    assert Judgement(0.0, [True, False, False, False]).credit == 0.25
    assert Judgement(1.0, []).credit == 1.0 and Judgement(None, []).credit is None
    with pytest.raises(ValueError, match="full credit is success"):
        Judgement(0.0, [True], credit=1.0)


def test_the_pool_keeps_the_judges_credit_and_none_where_the_reward_is_unknown():
    import asyncio

    from asyncwebrl.records import Trajectory
    from asyncwebrl.rollout.pool import judge_trajectory
    from asyncwebrl.web.evaluator import Judgement

    class Environment:
        def __init__(self, outcome):
            self.outcome = outcome

        async def judge(self, task, answer, episode_id, keys):
            if isinstance(self.outcome, Exception):
                raise self.outcome
            return self.outcome

    def judged(outcome):
        trajectory = Trajectory(task=PRICE_CODE, steps=[], outcome="answered", reward=None, answer="a")
        asyncio.run(judge_trajectory(Environment(outcome), trajectory))
        return trajectory.reward, trajectory.credit

    assert judged(Judgement(0.0, [True, False])) == (0.0, 0.5)
    assert judged(Judgement(None, [], "anti-bot", blocked=True)) == (None, None)
    assert judged(RuntimeError("judge down")) == (None, None)
