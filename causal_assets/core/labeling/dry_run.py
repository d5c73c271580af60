"""What a labelling run will cost, said before its first call: questions x budget = solver calls, the prompt tokens
they evaluate (`sizing.evaluated_tokens`), and, with the local solver, the minutes on this machine now
(`sizing.estimate_labels`: the rate measured on 2 idle cores, times how much slower the solver runs here now,
measured); with a remote endpoint the tokens only (its time is its latency). A run planned above the ceiling of
solver calls (`CAUSAL_ASSETS_LABEL_MAX_CALLS`) stops before the first call."""
from __future__ import annotations

from dataclasses import dataclass

from causal_assets.core.foundation.progress import duration
from causal_assets.core.labeling.sizing import Machine, estimate_labels, evaluated_tokens, expected_calls

CEILING_VARIABLE = "CAUSAL_ASSETS_LABEL_MAX_CALLS"


@dataclass(frozen=True)
class LabelPlan:
    benchmark: str
    questions: int
    budget: int
    calls: int
    prompt_tokens: int
    seconds: float | None        # None: a remote endpoint (tokens only)
    source: str                  # where the rate came from
    expected_calls: int = 0      # the calls expected (`sizing.expected_calls`), at most `calls`

    def line(self) -> str:
        time = (f"about {duration(self.seconds)} on this machine (from {self.source})" if self.seconds is not None
                else "its time depends on the endpoint's latency")
        return (f"estimate for {self.benchmark!r}: {self.questions} questions x {self.budget} solver calls = "
                f"{self.calls} calls, about {self.prompt_tokens:,} prompt tokens; {time}")


def plan_labels(benchmark: str, questions: int, budget: int, pool_size: int, doc_chars: float,
                machine: Machine | None = None, remote: bool = False, separate: bool = True, code: bool = True,
                stop_when_decided: bool = True) -> LabelPlan:
    """The plan: at most questions x budget calls (what the ceiling holds), the prompt tokens and seconds of the calls
    expected (`sizing.expected_calls`: the second block only where a label is undecided). `machine`: what the
    machine gives the local scorer (None: measured now, `sizing.measure_machine`); `remote`: an endpoint, whose
    time is not estimated."""
    if remote:
        calls = int(round(questions * expected_calls(budget, pool_size, stop_when_decided)))
        seconds, source = None, "the endpoint"
    else:
        estimate = estimate_labels(questions, budget, pool_size, doc_chars, machine=machine, separate=separate,
                                   code=code, stop_when_decided=stop_when_decided)
        calls, seconds, source = estimate.calls, estimate.seconds, estimate.source
    tokens = int(round(calls * evaluated_tokens(pool_size, doc_chars, code)))
    return LabelPlan(benchmark, questions, budget, questions * budget, tokens, seconds, source, calls)


def ceiling_problem(plan: LabelPlan, max_calls: int | None) -> str | None:
    """Why `plan` may not start (more calls than `max_calls`; 0 or None: no ceiling), or None."""
    if not max_calls or plan.calls <= max_calls:
        return None
    return (f"labelling {plan.benchmark!r} would make {plan.calls} solver calls ({plan.questions} questions x "
            f"{plan.budget}), above the ceiling of {max_calls} ({CEILING_VARIABLE}); no call made: raise it "
            f"(`export {CEILING_VARIABLE}={plan.calls}`, 0 for no ceiling) or label fewer questions "
            f"(monte_carlo.max_questions or budget in the benchmark registry)")
