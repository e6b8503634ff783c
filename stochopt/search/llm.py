"""The llm proposer: kernels written by a model behind an OpenAI-compatible endpoint.

A chain asks ``take(chain)`` for a candidate whenever its bandit picks the llm arm.
take() never waits when other proposers share the chain: it starts requests (up to
``concurrency`` in flight, on threads of this worker process) and hands out candidates
from replies that have arrived, or None so that a builtin move runs meanwhile. With the
llm alone it waits for the next reply. Each reply's code blocks go through the LEIR
parser and nothing else; every outcome comes back through ``record`` and feeds the
next prompt. Every request is written to llm/ in the run directory.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from stochopt.errors import ParseError, StochoptError
from stochopt.leir.parser import parse
from stochopt.leir.render import render
from stochopt.search.chain import Candidate
from stochopt.search.llm_client import Client, Reply, RequestFailed, price_of, write_json_atomic
from stochopt.search.llm_prompt import (
    EDIT_START,
    PromptBuilder,
    apply_edits,
    code_blocks,
    load_templates,
)
from stochopt.verify.check import check, check_signature

DEFAULTS = {
    "model": None, "base_url": None, "api_key": None,
    "concurrency": 2,          # requests in flight per chain
    "timeout_s": 60.0,         # per try
    "retries": 4,              # tries after the first, on 429, 5xx, timeouts, broken JSON
    "backoff_s": 1.0,          # first backoff; doubles per try, with jitter
    "n": 1,                    # choices per request
    "temperature": None, "max_tokens": None,   # sent only when set
    "price_in": None, "price_out": None,       # $ per million tokens; default: PRICES
    "max_cost": None,          # this worker sends nothing more once it has spent this
    "prompts": None,           # a folder of templates replacing prompts/
    "cache": None,             # a folder replaying identical prompts
    "failures_in_prompt": 4,
}
MAX_CANDIDATES = 8             # code blocks taken from one reply
MAX_COOLDOWN_S = 300.0         # the longest pause after failed requests


def llm_options(llm: dict | None, max_cost: float | None = None) -> dict | None:
    """The LLM settings with defaults filled in and every value checked (None when no
    model is configured)."""
    if not llm or not llm.get("model"):
        return None
    unknown = sorted(set(llm) - set(DEFAULTS))
    if unknown:
        raise StochoptError(f"unknown LLM setting(s) {', '.join(unknown)}",
                            hint=f"use {', '.join(DEFAULTS)}")
    o = {**DEFAULTS, **{k: v for k, v in llm.items() if v is not None}}
    if max_cost is not None:
        o["max_cost"] = max_cost
    for key, low in (("concurrency", 1), ("retries", 0), ("n", 1), ("failures_in_prompt", 0)):
        v = o[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < low or v > 64:
            raise StochoptError(f"LLM setting {key} must be an integer in {low}..64, got {v!r}")
    for key in ("timeout_s", "backoff_s", "temperature", "price_in", "price_out", "max_cost"):
        v = o[key]
        if v is not None and (not isinstance(v, int | float) or isinstance(v, bool) or v < 0):
            raise StochoptError(f"LLM setting {key} must be a number >= 0, got {v!r}")
    if not o["timeout_s"] > 0:
        raise StochoptError("the LLM timeout must be positive")
    for key in ("prompts", "cache"):
        if o[key] is not None:
            o[key] = str(Path(o[key]).expanduser().resolve())
    load_templates(o["prompts"])  # fail now, in the main process, on a bad template
    if o["cache"]:
        try:
            Path(o["cache"]).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StochoptError(f"cannot create the LLM cache {o['cache']}: {e}") from None
    return o


@dataclass
class LLMCandidate(Candidate):
    request: str | None = None   # the transcript it came from (llm/<request>.json)
    number: int = 0              # its place among that request's candidates
    code: str | None = None      # the text it was read from


class LLMProposer:
    def __init__(self, options: dict, spec, machine, baseline, run_dir: str | Path | None,
                 chain_index: int = 0, deadline: float | None = None, stop=None,
                 roofline_cycles: int | None = None) -> None:
        self.options, self.spec, self.machine = options, spec, machine
        self.chain_index = chain_index
        self.deadline, self.stop = deadline, stop   # wall-clock time; a multiprocessing Event
        self.dir = Path(run_dir) / "llm" if run_dir else None
        self.prompts = PromptBuilder(load_templates(options.get("prompts")), spec, machine,
                                     baseline, roofline_cycles)
        self.closed = threading.Event()
        self.client = Client(options, self.closed)
        self.failures: deque[dict] = deque(maxlen=options["failures_in_prompt"])
        self._cond = threading.Condition()
        self._ready: deque[LLMCandidate] = deque()
        self._in_flight = 0
        self._seq = 0
        self._failed_in_a_row = 0
        self._cooldown_until = 0.0
        self.spent_usd = 0.0
        self.transcripts: dict[str, dict] = {}
        self._best: tuple[str, object] | None = None
        self._system_file: str | None = None
        self._output_shape: tuple | None = None
        self._chain = None

    @classmethod
    def from_job(cls, job, spec, machine, stop=None) -> LLMProposer:
        baseline = parse(job.baseline_text, machine)
        options = {**DEFAULTS, **job.llm}  # a resumed run's settings may predate a default
        return cls(options, spec, machine, baseline, job.run_dir, job.index, job.deadline,
                   stop)

    # -- the chain's side ------------------------------------------------------------
    def take(self, chain) -> Candidate | None:
        """A candidate from a reply that has arrived, or None (then a builtin move runs).
        With the llm as the chain's only arm, waits for one until the run stops."""
        self._chain = chain
        if self._output_shape is None and chain.screening.references:
            self._output_shape = tuple(chain.screening.references[0].shape)
        self._start_requests(chain)
        cand = self._pop()
        while cand is None and chain.arms == ["llm"] and not self._stopping():
            with self._cond:
                if not self._ready:
                    self._cond.wait(0.1)
            cand = self._pop()
            if cand is None:
                self._start_requests(chain)  # a cooldown may have ended
        return cand

    def record(self, event: dict, cand: Candidate) -> None:
        """The chain's verdict on a candidate: into its transcript and the next prompt."""
        if not isinstance(cand, LLMCandidate) or cand.request is None:
            return
        event["llm_request"] = cand.request
        outcome = event["outcome"]
        error = self._explain(event, cand)
        with self._cond:
            t = self.transcripts.get(cand.request)
            if t is not None:
                t["candidates"][cand.number].update(
                    outcome=outcome, cycles=event.get("cycles"), error=error)
                if all(c.get("outcome") for c in t["candidates"]):
                    self._save(t)
        if outcome != "best" and cand.move != "request_failed" and self.failures.maxlen:
            self.failures.append({"outcome": outcome, "cycles": event.get("cycles"),
                                  "error": error, "code": cand.code})

    def _explain(self, event: dict, cand: LLMCandidate) -> str | None:
        """The event's verdict in words the model can act on."""
        error, cycles = event.get("error"), event.get("cycles")
        if isinstance(error, str) or error is None and event["outcome"] != "rejected":
            return error
        best = self._chain.best_cycles if self._chain is not None else "?"
        if error and cand.kernel is not None:  # failed on screening inputs
            return self._counterexample(cand.kernel) or f"wrong on a screening input " \
                                                        f"(error {error})"
        if event["outcome"] == "rejected" and error is None:
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
        """Fill the free request slots, all with one prompt built from the chain now."""
        with self._cond:
            waiting = len({c.request for c in self._ready})
            free = self.options["concurrency"] - self._in_flight - waiting
            if (free <= 0 or self._stopping() or self._over_budget()
                    or time.monotonic() < self._cooldown_until):
                return
            self._in_flight += free
        kernel = self._best_kernel(chain)
        messages = self.prompts.messages(kernel, list(self.failures))
        base_text = render(kernel)
        for _ in range(free):
            self._seq += 1
            rid = f"chain{self.chain_index}-{self._seq:05d}"
            self.transcripts[rid] = self._transcript(rid, messages)
            threading.Thread(target=self._request, args=(rid, messages, base_text),
                             daemon=True, name=f"stochopt-llm-{rid}").start()

    def _best_kernel(self, chain):
        text = getattr(chain, "best_text", None)
        if text is None:
            return chain.current
        if self._best is None or self._best[0] != text:
            try:
                self._best = (text, parse(text, self.machine))
            except StochoptError:
                return chain.current
        return self._best[1]

    def _request(self, rid: str, messages: list[dict], base_text: str) -> None:
        """On a thread: one request, its candidates into the ready queue."""
        t = self.transcripts[rid]
        try:
            reply = self.client.complete(messages)
            cands = self._candidates(rid, reply, base_text)
        except Exception as e:  # RequestFailed, or a bug: either way the run goes on
            failed = isinstance(e, RequestFailed)
            message = str(e) if failed else f"internal error: {type(e).__name__}: {e}"
            latency = e.latency_s if failed else 0.0
            cand = LLMCandidate("llm", "request_failed", error=f"LLM request failed: {message}",
                                outcome="invalid", request=rid, latency_s=latency)
            with self._cond:
                t.update(status="failed", error=message, latency_s=round(latency, 3),
                         attempts=e.attempts if failed else [],
                         candidates=[{"move": cand.move}])
                self._failed_in_a_row += 1
                pause = min(MAX_COOLDOWN_S,
                            self.options["backoff_s"] * 2 ** (self._failed_in_a_row + 1))
                if failed:  # a Retry-After too long to wait inside the request
                    pause = max(pause, e.cooldown_s)
                self._cooldown_until = time.monotonic() + pause
                t["cooldown_s"] = round(pause, 3)
                self._in_flight -= 1
                self._ready.append(cand)
                self._save(t)
                self._cond.notify_all()
            return
        cost = 0.0 if reply.cached else reply.cost_usd
        tokens = 0 if reply.cached else reply.prompt_tokens + reply.completion_tokens
        cands[0].tokens, cands[0].cost_usd = tokens, cost   # the request, counted once
        for c in cands:
            c.latency_s = reply.latency_s / len(cands)
        with self._cond:
            t.update(status="ok", latency_s=round(reply.latency_s, 3), replies=reply.contents,
                     finish_reasons=reply.finish_reasons, truncated=reply.truncated,
                     cached=reply.cached, attempts=reply.attempts, cost_usd=cost,
                     usage={"prompt_tokens": reply.prompt_tokens,
                            "completion_tokens": reply.completion_tokens,
                            "reported": reply.usage_reported},
                     candidates=[{"move": c.move, "code": c.code,
                                  **({} if c.outcome is None else
                                     {"read_as": c.outcome, "read_error": c.error})}
                                 for c in cands])
            if self.closed.is_set():  # too late: nobody will evaluate them
                for c in t["candidates"]:
                    c["outcome"] = "not evaluated: the run ended first"
            self.spent_usd += cost
            self._failed_in_a_row = 0
            self._in_flight -= 1
            self._ready.extend(cands)
            self._save(t)
            self._cond.notify_all()

    # -- replies ---------------------------------------------------------------------
    def _candidates(self, rid: str, reply: Reply, base_text: str) -> list[LLMCandidate]:
        out: list[LLMCandidate] = []
        for content in reply.contents or [""]:  # no choices at all reads as no code
            blocks = code_blocks(content)
            if not blocks:
                out.append(LLMCandidate(
                    "llm", "no_code", outcome="parse_error", code=content[:400],
                    error="the reply holds no code block: answer with one ```leir block "
                          "holding the whole kernel"))
            for block in blocks:
                move = "edit" if EDIT_START.search(block) else "kernel"
                try:
                    text = apply_edits(base_text, block) if move == "edit" else block
                except ParseError as e:
                    out.append(LLMCandidate("llm", move, error=str(e), outcome="parse_error",
                                            code=block))
                    continue
                kernel, outcome, error = self._read(text)
                out.append(LLMCandidate("llm", move, kernel, error, outcome, code=text))
        out = out[:MAX_CANDIDATES]
        for i, c in enumerate(out):
            c.request, c.number = rid, i
        return out

    def _read(self, text: str):
        """(kernel, None, None) for a kernel the chain may evaluate, else (None, outcome,
        error). The LEIR parser is the only thing that ever reads model output."""
        try:
            kernel = parse(text, self.machine)
            check_signature(kernel, self.spec)
        except ParseError as e:
            return None, "parse_error", str(e)
        except StochoptError as e:  # a ConstraintError, or the wrong signature
            return None, "invalid", str(e)
        except Exception as e:  # the parser must never take the run down with it
            return None, "parse_error", f"stochopt could not read this text " \
                                        f"({type(e).__name__}: {str(e)[:200]})"
        shape = kernel.output_type.shape
        if self._output_shape is not None and tuple(shape) != self._output_shape:
            return None, "invalid", (f"the kernel returns shape {list(shape)}, the spec "
                                     f"{list(self._output_shape)}")
        return kernel, None, None

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
    def _transcript(self, rid: str, messages: list[dict]) -> dict:
        return {"id": rid, "chain": self.chain_index, "model": self.client.model,
                "base_url": self.client.base_url, "price_per_million":
                [self.client.price_in, self.client.price_out, self.client.price_source],
                "params": self.client.params(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "status": "in flight", "messages": self._logged(messages),
                "candidates": []}

    def _logged(self, messages: list[dict]) -> list[dict]:
        """The system prompt is the same in every request: it is written once beside the
        transcripts, and each transcript names its file."""
        system = messages[0]["content"]
        digest = hashlib.sha256(system.encode()).hexdigest()
        name = f"system-{digest[:12]}.txt"
        if self.dir is not None and self._system_file != name:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / name).write_text(system)
            self._system_file = name
        return [{"role": "system", "content_file": name, "sha256": digest}] + messages[1:]

    def _save(self, t: dict) -> None:
        if self.dir is not None:
            write_json_atomic(self.dir / f"{t['id']}.json", t)


def describe(options: dict | None) -> str:
    """One line for people: model, endpoint, price."""
    if not options:
        return "no LLM"
    p_in, p_out, source = price_of(options["model"], options.get("price_in"),
                                   options.get("price_out"))
    return (f"{options['model']} at {options.get('base_url') or 'the default endpoint'}, "
            f"${p_in:g}/${p_out:g} per million tokens in/out ({source})")
