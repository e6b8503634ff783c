"""The llm proposer: kernels from a model behind an OpenAI-compatible endpoint.

A chain asks ``take(chain)`` for a candidate whenever its bandit picks the llm arm.
take() never waits when other proposers share the chain: it starts requests (up to
``concurrency`` in flight, on threads of this worker process) and hands out candidates
from replies that have arrived, or None so that a builtin move runs meanwhile. With the
llm alone it waits for the next reply.

Each request asks for one form (stochopt/llm/forms.py): a transform plan from the menu
of rewrites that apply to the kernel shown, edits of it, or a whole kernel; the form is
drawn by what each has yielded so far. Where the endpoint constrains decoding
(stochopt/llm/structured.py) the reply's shape is sent with the request. Replies are read
by llm_replies.py (the LEIR parser, or the plan applied to the kernel shown); every
outcome comes back through ``record``, feeds the next prompt and the forms' yields, and
an accepted plan's rules weigh more in the chain's rewrite arm for a while
(stochopt/llm/steering.py). Every request is written to llm/ in the run directory.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import deque
from pathlib import Path

from stochopt.backend.cost import cost
from stochopt.errors import StochoptError
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.llm.client import (
    UNFIXABLE,
    Client,
    Reply,
    RequestFailed,
    what_to_change,
    write_json_atomic,
    write_text_atomic,
)
from stochopt.llm.context import (
    DEFAULT_CONTEXT_TOKENS,
    TokenCounter,
    context_from_error,
    context_from_models,
    is_reasoning_model,
    prompt_tokens_from_error,
    reply_room,
    table_context,
)
from stochopt.llm.forms import FORMS, FormYield, answer_text, form_weights, forms_in_time
from stochopt.llm.options import DEFAULTS, on_this_machine
from stochopt.llm.pacing import LOCAL_START, Pacer
from stochopt.llm.plan_prompt import PlanPrompts
from stochopt.llm.prompt import LEVELS, Prompt, PromptBuilder, load_templates
from stochopt.llm.steering import RuleSteering
from stochopt.llm.structured import Structured, fields, reply_constraint
from stochopt.llm.variants import Variant, draw_variants, pick_failures, temperature_range
from stochopt.rundir import BEST, INVALID, LLM_TRANSCRIPTS, REJECTED
from stochopt.search.chain import Candidate
from stochopt.search.llm_replies import (
    LLMCandidate,
    ReplyReader,
    faster_than_shown,
    judged,
    transcript_entry,
)
from stochopt.transform.plan import plan_to_json
from stochopt.verify.check import check

MAX_COOLDOWN_S = 300.0         # the longest pause after failed requests
GIVE_UP_AFTER = 3              # identical unfixable failures in a row stop the proposer
PROBE_TOKENS = 24              # the reply room of a probe of constrained decoding
STRUCTURED_JSON = "structured.json"  # what the probe found, shared by the run's chains


class LLMProposer:
    def __init__(self, options: dict, spec, machine, baseline, run_dir: str | Path | None,
                 chain_index: int = 0, deadline: float | None = None, stop=None,
                 roofline_cycles: int | None = None, seed: int | None = None,
                 client=None) -> None:
        self.options, self.spec, self.machine = options, spec, machine
        self.chain_index = chain_index
        self.deadline, self.stop = deadline, stop   # wall-clock time; a multiprocessing Event
        self.dir = Path(run_dir) / LLM_TRANSCRIPTS if run_dir else None
        self.prompts = PromptBuilder(load_templates(options.get("prompts")), spec, machine,
                                     baseline, roofline_cycles, options.get("examples"))
        self.plans = PlanPrompts(self.prompts)
        self.closed = threading.Event()
        # the client: anything with complete() and probe() (a benchmark's stand-in)
        self.client = client or Client(options, self.closed)
        self.reader = ReplyReader(spec, machine)
        self.structured = Structured(options.get("structured") or "auto")
        self.forms = tuple(options.get("forms") or FORMS)
        self.yields = {f: FormYield() for f in FORMS}
        self.steering = RuleSteering()
        self.local = on_this_machine(options.get("base_url"))
        self.pacer = Pacer(LOCAL_START if self.local else 1.0)
        self._held_back: set[str] = set()  # forms said to wait for lack of time (once each)
        self._faster: set[str] = set()  # requests that brought a faster candidate
        self._notes: list[str] = []    # lines for the user, put on the next candidate
        self.failures: deque[dict] = deque(maxlen=max(8, options["failures_in_prompt"]))
        self.rng = random.Random(f"llm-{chain_index if seed is None else seed}")
        self.temperatures = temperature_range(options.get("temperature"), options["model"])
        self.tokens = TokenCounter()
        self._cond = threading.Condition()
        self._setup = threading.Lock()
        self._ready: deque[LLMCandidate] = deque()
        self._in_flight: dict[str, str] = {}   # request id -> its focus
        self._seq = 0
        self._failed_in_a_row = 0
        self._streak: tuple[str, int] = ("", 0)  # (kind of the last failures, how many)
        self._cooldown_until = 0.0
        self.context_tokens: int | None = None
        self.context_source = ""
        self.served: list[dict] | None = None  # the server's /v1/models listing
        self.stopped: str | None = None          # why the proposer gave up, once it has
        self.spent_usd = 0.0
        self.transcripts: dict[str, dict] = {}
        self._best: tuple[str, object, int] | None = None
        self._earlier: deque[tuple[int, str]] = deque(maxlen=3)  # (cycles, text) of old bests
        self._system_files: set[str] = set()
        self._chain = None
        # the run's limits when chains share them across machines (Ray: the coordinating
        # actor, stochopt/search/ray_actors.py): acquire(n) -> slots granted,
        # release(slots, cost_usd)
        self.gate = None

    @classmethod
    def from_job(cls, job, spec, machine, stop=None) -> LLMProposer:
        baseline = parse(job.baseline_text, machine)
        options = {**DEFAULTS, **job.llm}  # a resumed run's settings may predate a default
        return cls(options, spec, machine, baseline, job.run_dir, job.index, job.deadline,
                   stop, seed=job.seed)

    # -- the chain's side ------------------------------------------------------------
    def take(self, chain) -> Candidate | None:
        """A candidate from a reply that has arrived, or None (then a builtin move runs).
        With the llm as the chain's only arm, waits for one until the run stops."""
        self._chain = chain
        if self.reader.output_shape is None and chain.screening.references:
            self.reader.output_shape = tuple(chain.screening.references[0].shape)
        self._start_requests(chain)
        cand = self._pop()
        while (cand is None and chain.arms == ["llm"] and not self._stopping()
               and self.stopped is None):
            with self._cond:
                if not self._ready:
                    self._cond.wait(0.1)
            cand = self._pop()
            if cand is None:
                self._start_requests(chain)  # a cooldown may have ended
        return cand or self._pop()   # the failure that stopped the proposer, if it just did

    def record(self, event: dict, cand: Candidate) -> None:
        """The chain's verdict on a candidate: into its transcript and the next prompt."""
        if not isinstance(cand, LLMCandidate) or cand.request is None:
            return
        event.update(llm_request=cand.request, llm_candidate=cand.number, llm_form=cand.form)
        if cand.focus:
            event["llm_variant"] = cand.focus
        if cand.steps:
            event["llm_steps"] = plan_to_json(cand.steps)
        if cand.prompt_tokens:
            event["prompt_tokens"] = cand.prompt_tokens
        if cand.note:
            event["llm_note"] = cand.note
        if cand.stopped:
            event["llm_stopped"] = cand.stopped
            if self.stop is not None and self._chain is not None and \
                    self._chain.arms == ["llm"]:
                self.stop.set()   # nothing else can propose: the run ends (exit status 1)
        outcome = event["outcome"]
        error = self._explain(event, cand)
        verdict = judged(event)
        faster = verdict["accepted"] and faster_than_shown(event, cand)
        with self._cond:
            if faster:
                self._faster.add(cand.request)
            t = self.transcripts.get(cand.request)
            if t is not None:
                t["candidates"][cand.number].update(
                    outcome=outcome, cycles=event.get("cycles"), error=error, **verdict)
                if all(c.get("outcome") for c in t["candidates"]):
                    self._pace(t, cand.request)
                    self._save(t)
            if cand.move != "request_failed":
                y = self.yields[cand.form]
                y.well_typed += verdict["well_typed"]
                y.accepted += verdict["accepted"]
            if faster and cand.steps:
                self.steering.reinforce(s.rule for s in cand.steps)  # the model's judgement
        if outcome != BEST and cand.move != "request_failed":
            self.failures.append({"outcome": outcome, "cycles": event.get("cycles"),
                                  "error": error, "code": cand.code, "plan": cand.plan,
                                  "rules": [s.rule for s in cand.steps]})

    def rule_weights(self, base):
        """The rewrite arm's weights for one draw (the chain's proposer asks)."""
        return self.steering.weights(base)

    def _explain(self, event: dict, cand: LLMCandidate) -> str | None:
        """The event's verdict in words the model can act on."""
        error, cycles = event.get("error"), event.get("cycles")
        if isinstance(error, str) or error is None and event["outcome"] != REJECTED:
            return error
        best = self._chain.best_cycles if self._chain is not None else "?"
        if error and cand.kernel is not None:  # failed on screening inputs
            return self._counterexample(cand.kernel) or f"wrong on a screening input " \
                                                        f"(error {error})"
        if event["outcome"] == REJECTED and error is None:
            return f"{cycles} cycles, slower than the best kernel ({best} cycles): not tried"
        return (f"correct on the screening inputs, but {cycles} cycles is not faster than "
                f"the best kernel ({best} cycles)")

    def close(self) -> None:
        """Stop: no new requests or waits; transcripts of what is unfinished are written
        as they stand (a reply that lands later still rewrites its own)."""
        self.closed.set()
        with self._cond:
            for t in self.transcripts.values():
                if t["status"] == "in flight":
                    t["status"] = "abandoned: the run ended before the reply"
                for c in t["candidates"]:
                    c.setdefault("outcome", None)
                    if c["outcome"] is None:
                        c["outcome"] = "not evaluated: the run ended first"
                self._save(t)
            self._cond.notify_all()

    # -- requests ----------------------------------------------------------------------
    def _stopping(self) -> bool:
        return (self.closed.is_set() or (self.stop is not None and self.stop.is_set())
                or (self.deadline is not None and time.time() >= self.deadline))

    def _over_budget(self) -> bool:
        cap = self.options.get("max_cost")
        return cap is not None and self.spent_usd >= cap

    def _pop(self) -> LLMCandidate | None:
        with self._cond:
            return self._ready.popleft() if self._ready else None

    def _start_requests(self, chain) -> None:
        """Fill the free request slots, each with its own variant of the prompt."""
        with self._cond:
            waiting = len({c.request for c in self._ready})
            free = self.options["concurrency"] - len(self._in_flight) - waiting
            if (free <= 0 or self._stopping() or self._over_budget() or self.stopped
                    or time.monotonic() < self._cooldown_until
                    or (self._paced(chain) and not self.pacer.ready(time.monotonic()))):
                return
            if self.gate is not None:
                free = self.gate.acquire(free)
                if free <= 0:
                    return
            variants = draw_variants(self.rng, free, set(self._in_flight.values()),
                                     self.temperatures,
                                     form_weights(self.yields, self._forms_now()))
            ids = []
            for variant in variants:
                self._seq += 1
                rid = f"chain{self.chain_index}-{self._seq:05d}"
                self._in_flight[rid] = variant.focus
                self.yields[variant.form].requests += 1
                ids.append(rid)
        kernel, path = self._best_kernel(chain)
        limit = self.options["failures_in_prompt"]
        for rid, variant in zip(ids, variants, strict=True):
            # plans see the plans that failed, kernels and edits the code that failed
            mine = [f for f in self.failures if (f.get("plan") is not None) ==
                    (variant.form == "plan")]
            failures = pick_failures(mine, variant.failures, limit, self.rng)
            earlier = self._earlier[-1] if variant.earlier_best and self._earlier else None
            self.transcripts[rid] = self._transcript(rid, variant)
            threading.Thread(target=self._request,
                             args=(rid, variant, kernel, path, failures, earlier),
                             daemon=True, name=f"stochopt-llm-{rid}").start()

    def _forms_now(self) -> tuple[str, ...]:
        """The forms asked for now: all allowed ones, or on a server on this machine
        those whose replies can come back in time (forms.forms_in_time), with a line
        the first time a form waits for lack of it."""
        if not self.local:
            return self.forms
        left = None if self.deadline is None else self.deadline - time.time()
        forms, waiting = forms_in_time(self.forms, self.yields, left)
        self._notes += [line for f, line in waiting.items() if f not in self._held_back]
        self._held_back.update(waiting)
        return forms

    def _paced(self, chain) -> bool:
        """Whether this chain's requests wait on the pacer (stochopt/llm/pacing.py)."""
        return self.options.get("pace", True) and getattr(chain, "arms", None) != ["llm"]

    def _pace(self, t: dict, rid: str) -> None:
        """A reply fully judged: into the pacer, and a line when the duty changes."""
        if self._chain is None or not self._paced(self._chain) or t.get("status") != "ok":
            return
        faster = rid in self._faster
        self._faster.discard(rid)   # a request is judged once
        note = self.pacer.judged(t.get("latency_s") or 0.0, faster, time.monotonic())
        t["duty"] = self.pacer.duty
        if note:
            self._notes.append(note)

    def _best_kernel(self, chain):
        """The kernel the prompts show (the best the chain knows) and its path from the
        run's start, when the chain knows it (None otherwise)."""
        text = getattr(chain, "best_text", None)
        if text is None:
            return chain.current, getattr(chain, "current_path", None)
        if self._best is None or self._best[0] != text:
            try:
                kernel = parse(text, self.machine)
            except StochoptError:
                return chain.current, getattr(chain, "current_path", None)
            if self._best is not None:
                self._earlier.append((self._best[2], self._best[0]))
            self._best = (text, kernel, chain.best_cycles)
        return self._best[1], getattr(chain, "best_path", None)

    # -- the context -------------------------------------------------------------------
    def _learn_context(self) -> None:
        """Once per proposer, before the first prompt: the model's context, from the
        setting, the server's model listing, the table of hosted models, or the default;
        and, with --structured auto, what the endpoint constrains decoding by."""
        with self._setup:
            if self.context_tokens is not None:
                return
            model = self.options["model"]
            self.served = self.client.served_models()
            found = context_from_models(self.served or [], model)
            for value, source in ((self.options.get("context_tokens"), "--context-tokens"),
                                  (found, "the server's /v1/models"),
                                  (table_context(model), "the table of hosted models"),
                                  (DEFAULT_CONTEXT_TOKENS, "the default for unknown models")):
                if value:
                    self.context_tokens, self.context_source = value, source
                    break
            probe = {} if is_reasoning_model(model) else {"max_tokens": PROBE_TOKENS,
                                                          "temperature": 0.0}
            lines = self.structured.probe(self.client, probe, self.dir / STRUCTURED_JSON
                                          if self.dir is not None else None)
            with self._cond:
                self._notes += lines

    def _budget(self) -> tuple[int, int]:
        """(tokens the prompt may use, tokens kept for the reply)."""
        room = reply_room(self.context_tokens, self.options.get("max_tokens"))
        return self.context_tokens - room, room

    def _overrides(self, variant: Variant, room: int) -> dict:
        """This request's own settings: its temperature, and the reply's room as
        max_tokens when not set (reasoning models refuse that key)."""
        out = {"temperature": variant.temperature}
        if not self.options.get("max_tokens") and not is_reasoning_model(self.options["model"]):
            out["max_tokens"] = room
        return out

    def _prompt(self, kernel, failures, variant: Variant, earlier, min_level: int = 0
                ) -> tuple[Prompt, int]:
        budget, room = self._budget()
        if variant.form == "plan":
            return self.plans.build(kernel, failures, budget, self.tokens.estimate,
                                    variant.focus, self.context_tokens), room
        constrained = self.structured.family_for(variant.form) is not None
        prompt = self.prompts.build(kernel, failures, budget, self.tokens.estimate,
                                    variant.focus, earlier, min_level,
                                    answer_text(variant.form, constrained))
        return prompt, room

    def _request(self, rid: str, variant: Variant, kernel, path, failures: list[dict],
                 earlier) -> None:
        """On a thread: one request (shrunk and sent again once if the model's context
        refuses it), its candidates into the ready queue."""
        t = self.transcripts[rid]
        try:
            self._learn_context()
            prompt, room = self._prompt(kernel, failures, variant, earlier)
            self._describe_prompt(t, prompt, room)
            if not prompt.fits:
                raise RequestFailed(
                    f"the smallest prompt (about {prompt.estimate_tokens} tokens) and the "
                    f"reply's {room} do not fit a context of {self.context_tokens} tokens",
                    [], 0.0, kind="context")
            try:
                reply = self._send(t, variant, prompt, kernel, room)
            except RequestFailed as e:
                if e.kind != "context" or variant.form == "plan" or \
                        prompt.level == len(LEVELS) - 1:
                    raise
                prompt, room = self._shrink(t, e, prompt, kernel, failures, variant, earlier)
                reply = self._send(t, variant, prompt, kernel, room)
            if reply.usage_reported and not reply.cached:
                self.tokens.observe(prompt.messages, reply.prompt_tokens)
            if variant.form == "plan":
                cands = self.reader.plan_candidates(reply.contents, kernel, prompt.entries,
                                                    path)
            else:
                cands = self.reader.code_candidates(reply.contents, render(kernel))
            shown = cost(kernel, self.machine).cycles
            for c in cands:
                c.shown_cycles = shown
        except Exception as e:  # RequestFailed, or a bug: either way the run goes on
            self._failed(rid, t, variant, e)
            return
        self._arrived(rid, t, variant, reply, cands)

    def _send(self, t: dict, variant: Variant, prompt: Prompt, kernel, room: int) -> Reply:
        """The request, constrained where the endpoint takes it; a dialect it refuses is
        dropped for the run and the request sent again at once (the next dialect, or free
        text, with one line saying so)."""
        overrides = self._overrides(variant, room)
        while True:
            family = self.structured.family_for(variant.form)
            dialect = self.structured.dialect(family) if family else None
            constraint = None
            if dialect is not None:
                menu = [e.number for e in getattr(prompt, "entries", ())]  # plan prompts
                payload = reply_constraint(variant.form, family, menu, render(kernel))
                constraint = fields(dialect, payload, f"stochopt_{variant.form}")
            t["structured"] = {**self.structured.describe(), "constrained": dialect}
            try:
                return self.client.complete(prompt.messages, overrides, constraint)
            except RequestFailed as e:
                if e.kind != "constraint" or dialect is None:
                    raise
                t.setdefault("structured_refused", []).append(
                    {"dialect": dialect, "error": str(e)[:300]})
                note = self.structured.refused(dialect, e)
                if note:
                    with self._cond:
                        self._notes.append(note)

    def _shrink(self, t: dict, error: RequestFailed, sent: Prompt, kernel, failures, variant,
                earlier) -> tuple[Prompt, int]:
        """After a context-length refusal: learn what the error says, and build a prompt
        of a later level that fits the smaller budget (never the one sent)."""
        message = str(error)
        with self._setup:
            stated = context_from_error(message)
            if stated and stated < self.context_tokens:
                self.context_tokens, self.context_source = stated, "the server's error"
            counted = prompt_tokens_from_error(message)
            if counted and counted > sent.estimate_tokens:  # the estimate was not safe enough
                self.tokens.observe(sent.messages, counted)
        prompt, room = self._prompt(kernel, failures, variant, earlier, sent.level + 1)
        t["shrunk"] = {"error": message[:300], "from_level": LEVELS[sent.level].name,
                       "from_estimate_tokens": sent.estimate_tokens,
                       "attempts": error.attempts}
        self._describe_prompt(t, prompt, room)
        if not prompt.fits:
            raise RequestFailed(message, error.attempts, error.latency_s, kind="context",
                                status=error.status)
        return prompt, room

    def _describe_prompt(self, t: dict, prompt: Prompt, room: int) -> None:
        with self._cond:
            t["messages"] = self._logged(prompt.messages)
            t["prompt"] = {"level": prompt.level_name, "estimate_tokens":
                           prompt.estimate_tokens, "chars": sum(len(m["content"]) for m in
                                                                prompt.messages),
                           "context_tokens": self.context_tokens,
                           "context_source": self.context_source, "reply_tokens": room}
            if variant_form(t) == "plan":
                t["prompt"]["menu_entries"] = len(getattr(prompt, "entries", ()))
            t["params"] = self.client.params(self._overrides(t["variant_obj"], room))

    def _failed(self, rid: str, t: dict, variant: Variant, e: Exception) -> None:
        failed = isinstance(e, RequestFailed)
        message = str(e) if failed else f"internal error: {type(e).__name__}: {e}"
        kind = e.kind if failed else "internal"
        latency = e.latency_s if failed else 0.0
        cand = LLMCandidate("llm", "request_failed", error=f"LLM request failed: {message}",
                            outcome=INVALID, request=rid, latency_s=latency,
                            focus=variant.focus, form=variant.form)
        with self._cond:
            cand.note = t["note"] = self._take_notes()
            t.update(status="failed", error=message, error_kind=kind,
                     latency_s=round(latency, 3), attempts=e.attempts if failed else [],
                     candidates=[{"move": cand.move}])
            self._failed_in_a_row += 1
            same = self._streak[1] + 1 if self._streak[0] == kind else 1
            self._streak = (kind, same)
            if kind in UNFIXABLE and same >= GIVE_UP_AFTER and self.stopped is None:
                self.stopped = cand.stopped = self._give_up_message(kind, message, same)
                t["stopped"] = self.stopped
            pause = min(MAX_COOLDOWN_S,
                        self.options["backoff_s"] * 2 ** (self._failed_in_a_row + 1))
            if failed:  # a Retry-After too long to wait inside the request
                pause = max(pause, e.cooldown_s)
            self._cooldown_until = time.monotonic() + pause
            t["cooldown_s"] = round(pause, 3)
            self._finished(rid, 0.0)
            self._ready.append(cand)
            self._save(t)
            self._cond.notify_all()

    def _arrived(self, rid: str, t: dict, variant: Variant, reply: Reply,
                 cands: list[LLMCandidate]) -> None:
        cost = 0.0 if reply.cached else reply.cost_usd
        tokens = 0 if reply.cached else reply.prompt_tokens + reply.completion_tokens
        cands[0].tokens, cands[0].cost_usd = tokens, cost   # the request, counted once
        cands[0].prompt_tokens = 0 if reply.cached else reply.prompt_tokens
        for i, c in enumerate(cands):
            c.request, c.number = rid, i
            c.latency_s = reply.latency_s / len(cands)
            c.focus, c.form = variant.focus, variant.form
        with self._cond:
            cands[0].note = t["note"] = self._take_notes()
            y = self.yields[variant.form]
            if reply.usage_reported and not reply.cached:
                y.tokens, y.measured = y.tokens + tokens, y.measured + 1
            if not reply.cached:
                y.answered, y.seconds = y.answered + 1, y.seconds + reply.latency_s
            t.update(status="ok", latency_s=round(reply.latency_s, 3), replies=reply.contents,
                     finish_reasons=reply.finish_reasons, truncated=reply.truncated,
                     cached=reply.cached, attempts=reply.attempts, cost_usd=cost,
                     usage={"prompt_tokens": reply.prompt_tokens,
                            "completion_tokens": reply.completion_tokens,
                            "reported": reply.usage_reported},
                     candidates=[transcript_entry(c) for c in cands])
            if self.closed.is_set():  # too late: nobody will evaluate them
                for c in t["candidates"]:
                    c["outcome"] = "not evaluated: the run ended first"
            self.spent_usd += cost
            self._failed_in_a_row = 0
            self._streak = ("", 0)
            self._finished(rid, cost)
            self._ready.extend(cands)
            self._save(t)
            self._cond.notify_all()

    def _finished(self, rid: str, cost_usd: float) -> None:
        """A request is over: its slot is free again (here, and in the run's limits)."""
        held = rid in self._in_flight   # (its value, the focus, may be None)
        self._in_flight.pop(rid, None)
        if held and self.gate is not None:
            self.gate.release(1, cost_usd)

    def _give_up_message(self, kind: str, message: str, count: int) -> str:
        """One line: what failed, and what to change."""
        names = [m.get("id") for m in self.served or [] if m.get("id")]
        fix = what_to_change(kind, self.client.base_url, self.options["model"], names,
                             self.context_tokens, self.context_source)
        return (f"the LLM proposer stopped after {count} identical failures "
                f"({message[:240]}): {fix}")

    def _take_notes(self) -> str | None:
        """The lines waiting for the user (said once, on the next candidate)."""
        notes, self._notes = self._notes, []
        return "; ".join(notes) or None

    # -- replies ---------------------------------------------------------------------
    def _counterexample(self, kernel) -> str | None:
        """Why a kernel failed screening, said the way the verifier says it."""
        chain = self._chain
        try:
            verdict = check(kernel, self.spec, examples=len(chain.screening.inputs),
                            machine=self.machine, baseline=chain.baseline,
                            extra_inputs=chain.screening.inputs, structured=False)
        except StochoptError as e:
            return str(e)
        return verdict.counterexample.describe() if verdict.counterexample else None

    # -- transcripts -----------------------------------------------------------------
    def _transcript(self, rid: str, variant: Variant) -> dict:
        """A new request's transcript (its variant names the form and the focus)."""
        return {"id": rid, "chain": self.chain_index, "model": self.client.model,
                "base_url": self.client.base_url, "price_per_million":
                [self.client.price_in, self.client.price_out, self.client.price_source],
                "params": self.client.params(), "variant": variant.to_json(),
                "variant_obj": variant,
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "status": "in flight", "messages": [], "candidates": []}

    def _logged(self, messages: list[dict]) -> list[dict]:
        """The system prompt is the same in every request: it is written once beside the
        transcripts, and each transcript names its file."""
        system = messages[0]["content"]
        digest = hashlib.sha256(system.encode()).hexdigest()
        name = f"system-{digest[:12]}.txt"
        if self.dir is not None and name not in self._system_files:
            self.dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.dir / name, system)
            self._system_files.add(name)
        return [{"role": "system", "content_file": name, "sha256": digest}] + messages[1:]

    def _save(self, t: dict) -> None:
        if self.dir is not None:
            write_json_atomic(self.dir / f"{t['id']}.json",
                              {k: v for k, v in t.items() if k != "variant_obj"})


def variant_form(t: dict) -> str:
    return (t.get("variant") or {}).get("form") or "kernel"
