"""One chat-completions request to an OpenAI-compatible endpoint, done carefully.

The real ``openai`` client does the HTTP (base URL, key, headers, error types) with its
own retries turned off: this module retries 429, 5xx, timeouts, dropped connections and
broken JSON itself, with exponential backoff and jitter, honouring Retry-After, so that
every attempt lands in the transcript. Replies are read with a size cap, prices turn
usage into dollars, and a cache on disk replays identical prompts.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

MAX_BODY_BYTES = 1 << 20      # a reply body larger than this is refused unread
MAX_CONTENT_CHARS = 1 << 16   # each choice's text is cut here before code is extracted
MAX_WAIT_S = 120.0            # a longer Retry-After ends the request (the proposer cools down)
DEFAULT_BASE_URL = "https://api.openai.com/v1"
PLACEHOLDER_KEY = "sk-no-key-needed"  # local servers ignore the key, the client wants one

# Dollars per million (input, output) tokens, by model name prefix (longest prefix wins),
# as published by the providers in 2025. Unknown and local models cost 0: pass
# --price-in / --price-out for those that are billed.
PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00), "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00), "gpt-4.1-mini": (0.40, 1.60), "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4-turbo": (10.00, 30.00), "gpt-4": (30.00, 60.00), "gpt-3.5-turbo": (0.50, 1.50),
    "gpt-5": (1.25, 10.00), "gpt-5-mini": (0.25, 2.00), "gpt-5-nano": (0.05, 0.40),
    "o1": (15.00, 60.00), "o1-mini": (1.10, 4.40), "o3": (2.00, 8.00),
    "o3-mini": (1.10, 4.40), "o4-mini": (1.10, 4.40),
    "claude-3-haiku": (0.25, 1.25), "claude-3-5-haiku": (0.80, 4.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-3-5-sonnet": (3.00, 15.00), "claude-3-7-sonnet": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-3-opus": (15.00, 75.00), "claude-opus-4": (15.00, 75.00),
    "claude-opus-4-5": (5.00, 25.00),
    "deepseek-chat": (0.27, 1.10), "deepseek-reasoner": (0.55, 2.19),
}


def price_of(model: str, price_in: float | None = None,
             price_out: float | None = None) -> tuple[float, float, str]:
    """(dollars per million input tokens, per million output tokens, where that came
    from). Flags win; then the table by longest prefix, ignoring a provider prefix."""
    name = model.lower().rsplit("/", 1)[-1]
    match = max((k for k in PRICES if name.startswith(k)), key=len, default=None)
    table = PRICES[match] if match else (0.0, 0.0)
    source = f"price table ({match})" if match else "unknown model: counted as free"
    if price_in is not None or price_out is not None:
        source = "--price-in/--price-out"
    return (table[0] if price_in is None else price_in,
            table[1] if price_out is None else price_out, source)


@dataclass
class Reply:
    contents: list[str]               # the text of each choice (cut at MAX_CONTENT_CHARS)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    attempts: list[dict] = field(default_factory=list)  # the failed tries before it
    cached: bool = False
    truncated: bool = False
    finish_reasons: list[str | None] = field(default_factory=list)
    usage_reported: bool = True


# Why a request failed, for the proposer: the kinds in UNFIXABLE are the same on every
# try (a wrong URL, key or model name, a prompt too long for the model), so the proposer
# stops after a few of them in a row instead of sending the same request all run.
UNFIXABLE = ("context", "bad_request", "auth", "not_found", "connection")


def what_to_change(kind: str, base_url: str, model: str, served: list[str],
                   context_tokens: int | None, context_source: str) -> str:
    """What the user should change after failures of this kind, in their flags' words."""
    if kind == "context":
        return (f"the model's context is {context_tokens} tokens (from {context_source}): "
                f"give the server a longer one (llama.cpp -c, Ollama num_ctx) and pass it "
                f"as --context-tokens, or lower --max-tokens")
    if kind == "auth":
        return f"check the API key (OPENAI_API_KEY) for {base_url}"
    if kind == "not_found":
        if served and model not in served:
            return f"check --model: {base_url} serves {', '.join(served[:5])}"
        return f"check --base-url (now {base_url}; it usually ends in /v1) and --model"
    if kind == "connection":
        return f"nothing answers at {base_url}: start the server or fix --base-url"
    return ("the server refused the request: check --model, --temperature, --max-tokens "
            "and --llm-n against what it accepts")


class RequestFailed(Exception):
    """Every try failed (or one failed in a way that retrying cannot fix)."""

    def __init__(self, message: str, attempts: list[dict], latency_s: float,
                 cooldown_s: float = 0.0, kind: str = "other",
                 status: int | None = None) -> None:
        super().__init__(message)
        self.attempts, self.latency_s, self.cooldown_s = attempts, latency_s, cooldown_s
        self.kind, self.status = kind, status


class _Transient(Exception):
    def __init__(self, message: str, retry_after: float | None = None,
                 status: int | None = None, kind: str = "other") -> None:
        super().__init__(message)
        self.retry_after, self.status, self.kind = retry_after, status, kind


class _Permanent(Exception):
    def __init__(self, message: str, status: int | None = None, kind: str = "other") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class Client:
    """Sends chat requests for one model; safe to share between threads."""

    def __init__(self, options: dict, closed: threading.Event | None = None) -> None:
        import openai

        self.options = options
        self.model = options["model"]
        self.timeout_s = float(options["timeout_s"])
        self.retries = int(options["retries"])
        self.backoff_s = float(options["backoff_s"])
        self.closed = closed or threading.Event()
        self.price_in, self.price_out, self.price_source = price_of(
            self.model, options.get("price_in"), options.get("price_out"))
        api_key = options.get("api_key") or os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_KEY
        base_url = (options.get("base_url") or os.environ.get("OPENAI_BASE_URL")
                    or DEFAULT_BASE_URL)
        self.base_url = base_url
        self.openai = openai
        self.client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0,
                                    timeout=self.timeout_s)
        self.cache = Path(options["cache"]) if options.get("cache") else None
        self._uses: dict[str, int] = {}
        self._lock = threading.Lock()
        self._rng = random.Random()

    # -- the request, with its retries -------------------------------------------------
    def complete(self, messages: list[dict], overrides: dict | None = None,
                 constraint: dict | None = None) -> Reply:
        """The reply to these messages (``overrides`` replace request settings, e.g. this
        request's temperature; ``constraint``: the body fields that constrain decoding,
        stochopt/llm/structured.py); RequestFailed when no try succeeded, of kind
        "constraint" when the server refused the constraint."""
        start = time.monotonic()
        key, use = self._cache_key(messages, constraint)
        cached = self._cache_get(key, use)
        if cached is not None:
            cached.latency_s = time.monotonic() - start
            return cached
        attempts: list[dict] = []
        for attempt in range(self.retries + 1):
            try:
                reply = self._once(messages, overrides or {}, constraint)
            except _Permanent as e:
                attempts.append({"error": str(e), "status": e.status, "retried": False})
                raise RequestFailed(str(e), attempts, time.monotonic() - start,
                                    kind=e.kind, status=e.status) from None
            except _Transient as e:
                wait = self._wait(attempt, e.retry_after)
                retry = attempt < self.retries and wait <= MAX_WAIT_S and not self.closed.is_set()
                attempts.append({"error": str(e), "status": e.status, "retried": retry,
                                 "retry_after_s": e.retry_after,
                                 "wait_s": round(wait, 3) if retry else None})
                if not retry:
                    cooldown = e.retry_after if (e.retry_after or 0) > MAX_WAIT_S else 0.0
                    tries = len(attempts)
                    raise RequestFailed(f"{e} (gave up after {tries} tr"
                                        f"{'y' if tries == 1 else 'ies'})", attempts,
                                        time.monotonic() - start, cooldown, e.kind,
                                        e.status) from None
                self.closed.wait(wait)  # a closing proposer cuts the wait short
                continue
            reply.attempts = attempts
            reply.latency_s = time.monotonic() - start
            self._cache_put(key, use, reply)
            return reply
        raise AssertionError("unreachable")

    def _wait(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter (half fixed, half random); never less than
        what the server asked for."""
        base = min(60.0, self.backoff_s * 2 ** attempt)
        wait = base / 2 + self._rng.uniform(0, base / 2)
        return max(wait, retry_after or 0.0)

    def params(self, overrides: dict | None = None) -> dict:
        """The request's settings besides model and messages (only those set)."""
        o = self.options
        params = {}
        if o.get("n", 1) > 1:
            params["n"] = o["n"]
        if isinstance(o.get("temperature"), int | float):
            params["temperature"] = o["temperature"]
        if o.get("max_tokens"):
            params["max_tokens"] = o["max_tokens"]
        params.update({k: v for k, v in (overrides or {}).items() if v is not None})
        return params

    def served_models(self) -> list[dict] | None:
        """The /v1/models listing as plain dicts (None when the server has none)."""
        try:
            page = self.client.with_options(timeout=min(self.timeout_s, 10.0)).models.list()
            return [m.model_dump() for m in page.data]
        except Exception:  # an endpoint without /models is fine: the context has defaults
            return None

    def probe(self, messages: list[dict], overrides: dict, constraint: dict) -> str:
        """One try of a small constrained request (no retries, no cache): the reply's
        text; RequestFailed when it fails."""
        start = time.monotonic()
        try:
            return (self._once(messages, overrides, constraint).contents or [""])[0]
        except (_Permanent, _Transient) as e:
            raise RequestFailed(str(e), [], time.monotonic() - start, kind=e.kind,
                                status=e.status) from None

    def _once(self, messages: list[dict], overrides: dict,
              constraint: dict | None = None) -> Reply:
        openai = self.openai
        deadline = time.monotonic() + self.timeout_s
        try:
            with self.client.chat.completions.with_streaming_response.create(
                    model=self.model, messages=messages, **self.params(overrides),
                    **({"extra_body": constraint} if constraint else {})) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        raise _Permanent(f"the reply is larger than {MAX_BODY_BYTES} bytes: "
                                         "refused unread")
                    if time.monotonic() > deadline:
                        raise _Transient(f"no complete reply within {self.timeout_s:g} s")
        except openai.APIStatusError as e:
            raise _status_error(e, constraint) from None
        except openai.APITimeoutError:
            raise _Transient(f"no reply within {self.timeout_s:g} s (timeout)") from None
        except openai.APIConnectionError as e:
            raise _Transient(f"connection failed: {e.__cause__ or e}",
                             kind="connection") from None
        except (_Transient, _Permanent):
            raise
        except Exception as e:  # the transport broke mid-body: httpx errors and the like
            kind = "timeout" if "timeout" in type(e).__name__.lower() else "connection broken"
            raise _Transient(f"{kind} while reading the reply: {type(e).__name__}: {e}") \
                from None
        return self._parse(bytes(body))

    def _parse(self, body: bytes) -> Reply:
        try:
            data = json.loads(body)
            choices = data["choices"]
            contents = [(c.get("message") or {}).get("content") or "" for c in choices]
            if not isinstance(contents, list) or not all(isinstance(c, str) for c in contents):
                raise TypeError("message contents are not strings")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            snippet = body[:200].decode(errors="replace")
            raise _Transient(f"the reply is not a chat completion ({type(e).__name__}: {e}): "
                             f"{snippet!r}") from None
        truncated = any(len(c) > MAX_CONTENT_CHARS for c in contents)
        usage = data.get("usage") or {}
        p = _int(usage.get("prompt_tokens"))
        c = _int(usage.get("completion_tokens"))
        return Reply([x[:MAX_CONTENT_CHARS] for x in contents], p, c, self.cost(p, c),
                     truncated=truncated,
                     finish_reasons=[ch.get("finish_reason") for ch in choices],
                     usage_reported=bool(usage))

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.price_in + completion_tokens * self.price_out) / 1e6

    # -- the cache: the k-th use of a prompt in this process replays entry k ------------
    def _cache_key(self, messages: list[dict], constraint: dict | None = None
                   ) -> tuple[str, int]:
        request = {"model": self.model, "messages": messages}
        if constraint:  # (unconstrained requests keep the keys they always had)
            request["constraint"] = constraint
        text = json.dumps(request, sort_keys=True)
        key = hashlib.sha256(text.encode()).hexdigest()
        with self._lock:
            use = self._uses.get(key, 0)
            self._uses[key] = use + 1
        return key, use

    def _cache_get(self, key: str, use: int) -> Reply | None:
        if self.cache is None:
            return None
        try:
            data = json.loads((self.cache / f"{key}-{use}.json").read_text())
            return Reply(list(data["contents"]), cached=True,
                         finish_reasons=list(data.get("finish_reasons", [])),
                         truncated=bool(data.get("truncated")))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _cache_put(self, key: str, use: int, reply: Reply) -> None:
        if self.cache is None:
            return
        data = {"model": self.model, "contents": reply.contents,
                "finish_reasons": reply.finish_reasons, "truncated": reply.truncated,
                "usage": {"prompt_tokens": reply.prompt_tokens,
                          "completion_tokens": reply.completion_tokens}}
        write_json_atomic(self.cache / f"{key}-{use}.json", data)

    def close(self) -> None:
        self.closed.set()
        self.client.close()


def _status_error(e, constraint: dict | None = None) -> Exception:
    status = e.status_code
    detail = _error_message(e)
    text = f"HTTP {status} from the endpoint: {detail}"
    if constraint and status not in (408, 409, 429) and _names_constraint(detail, constraint):
        return _Permanent(text, status, "constraint")  # (some servers answer 500 to it)
    if status == 429 or status == 408 or status == 409 or status >= 500:
        return _Transient(text, _retry_after(e.response.headers), status)
    from stochopt.llm.context import is_context_error
    if is_context_error(status, detail) or _error_code(e) == "context_length_exceeded":
        return _Permanent(text, status, "context")
    kind = {401: "auth", 403: "auth", 404: "not_found"}.get(status, "bad_request")
    hints = {401: "check OPENAI_API_KEY", 403: "check OPENAI_API_KEY and its permissions",
             404: "check --base-url (it usually ends in /v1) and --model"}
    return _Permanent(text + (f"; {hints[status]}" if status in hints else ""), status, kind)


def _names_constraint(message: str, constraint: dict) -> bool:
    """Whether an error is about the fields that constrained the request (a server that
    does not know them, or refuses the schema or grammar sent)."""
    words = set(constraint) | {"response_format", "json_schema", "grammar", "guided",
                               "structured_output", "schema"}
    low = message.lower()
    return any(w.lower() in low for w in words)


def _error_code(e) -> str | None:
    body = getattr(e, "body", None)
    inner = body.get("error", body) if isinstance(body, dict) else None
    return inner.get("code") if isinstance(inner, dict) else None


def _error_message(e) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:500]
    return str(e)[:500]


def _retry_after(headers) -> float | None:
    """Seconds the server asked us to wait: retry-after-ms, or Retry-After as seconds or
    an HTTP date."""
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def _int(v) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def write_json_atomic(path: Path, data) -> None:
    """Write to a temporary file beside it, then rename (no fsync: logs, not results)."""
    write_text_atomic(path, json.dumps(data, indent=1, default=str) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
