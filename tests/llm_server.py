"""A loopback HTTP server that speaks the OpenAI chat-completions protocol and plays a
script: the LLM tests talk to it through the real ``openai`` client, over real sockets.

    with LLMServer([reply(FAST_KERNEL_TEXT), error(429, retry_after=1)]) as server:
        ... base_url=server.url ...
        server.requests[1]["body"]["messages"]   # what the second request carried

Each POST to /v1/chat/completions takes the next step of the script (``default`` once
the script is spent). A step is a dict made by ``reply``, ``error``, ``raw``, ``slow``
or ``held``. Import it as ``from tests.llm_server import LLMServer`` with the repository
root on sys.path.
"""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NO_CODE = "I have no better kernel to offer."


def reply(*contents: str, prompt_tokens: int = 1000, completion_tokens: int = 200,
          usage: bool = True) -> dict:
    """A 200 answer with one choice per content."""
    return {"kind": "reply", "contents": list(contents), "usage": usage,
            "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}


def error(status: int, retry_after: float | None = None, message: str = "scripted error",
          retry_after_ms: int | None = None) -> dict:
    """An HTTP error in OpenAI's error format, optionally with Retry-After (seconds) or
    OpenAI's retry-after-ms."""
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    if retry_after_ms is not None:
        headers["retry-after-ms"] = str(retry_after_ms)
    body = json.dumps({"error": {"message": message, "type": "server_error", "code": None}})
    return {"kind": "raw", "status": status, "body": body.encode(), "headers": headers}


def raw(body: bytes | str, status: int = 200, content_type: str = "application/json") -> dict:
    """Any body at all: broken JSON, HTML, a huge blob."""
    data = body.encode() if isinstance(body, str) else body
    return {"kind": "raw", "status": status, "body": data,
            "headers": {"Content-Type": content_type}}


def slow(seconds: float, then: dict | None = None) -> dict:
    """Wait before answering (long enough to trip the client's timeout)."""
    return {**(then or reply(NO_CODE)), "delay": seconds}


def held(gate: threading.Event, then: dict | None = None) -> dict:
    """Answer only once ``gate`` is set: a reply that is certainly not ready yet."""
    return {**(then or reply(NO_CODE)), "gate": gate}


class LLMServer:
    """``context_tokens``: refuse, as llama.cpp's server does, a request whose prompt (at
    ``chars_per_token``) plus max_tokens exceeds it. ``listing``: extra keys of the model's
    /v1/models entry (e.g. ``{"max_model_len": 4096}``, as vLLM reports)."""

    def __init__(self, script: list[dict] | None = None, default: dict | None = None,
                 model: str = "test-model", context_tokens: int | None = None,
                 chars_per_token: float = 3.0, listing: dict | None = None,
                 plans: dict | None = None) -> None:
        self.script = list(script or [])
        self.plans = plans   # the answer to every plan request (the script is for the rest)
        self.default = default or reply(NO_CODE)
        self.model = model
        self.context_tokens, self.chars_per_token = context_tokens, chars_per_token
        self.listing = listing or {}
        self.requests: list[dict] = []
        self.probes: list[dict] = []   # probes of constrained decoding (structured.py)
        self.lock = threading.Lock()
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        # A short poll: shutdown() waits up to one poll, and every test stops a server.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,),
                                       daemon=True, name="llm-test-server")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def push(self, *steps: dict) -> None:
        with self.lock:
            self.script.extend(steps)

    def next_step(self, body) -> dict:
        with self.lock:
            if is_probe(body):  # a probe of constrained decoding: not part of the script
                self.probes.append(body)
                return self.answer_probe(body)
            self.requests.append({"body": body, "time": time.time()})
            refused = self.over_context(body)
            if refused:
                return refused
            if self.plans is not None and is_plan_request(body):
                return self.plans
            return self.script.pop(0) if self.script else self.default

    def answer_probe(self, body) -> dict:
        """This server ignores every constraint field, as llama.cpp does a field it does
        not know (subclasses enforce or refuse them)."""
        return reply("Hello.")

    def prompt_tokens(self, body) -> int:
        """The prompt's tokens as this server counts them."""
        chars = sum(len(m.get("content") or "") for m in body.get("messages", []))
        return int(chars / self.chars_per_token)

    def over_context(self, body) -> dict | None:
        if self.context_tokens is None or not isinstance(body, dict):
            return None
        prompt, reply_room = self.prompt_tokens(body), body.get("max_tokens") or 0
        if prompt + reply_room <= self.context_tokens:
            return None
        return error(400, message=(
            f"This model's maximum context length is {self.context_tokens} tokens. However, "
            f"you requested {prompt + reply_room} tokens ({prompt} in the messages, "
            f"{reply_room} in the completion). Please reduce the length of the messages or "
            f"completion."))

    def messages(self, i: int) -> str:
        """All the text of request i's messages, joined."""
        body = self.requests[i]["body"]
        return "\n".join(m["content"] for m in body["messages"])

    def user_prompt(self, i: int) -> str:
        """Request i's last (user) message."""
        return self.requests[i]["body"]["messages"][-1]["content"]

    def start(self) -> LLMServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def is_plan_request(body) -> bool:
    """A request for a transform plan (its system prompt is plan_system.txt's)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    return bool(messages) and "numbered menu" in (messages[0].get("content") or "")


def is_probe(body) -> bool:
    from stochopt.llm.structured import PROBE_MESSAGES
    return isinstance(body, dict) and body.get("messages") == PROBE_MESSAGES


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # clients that time out and hang up are part of the tests


def _completion(server: LLMServer, step: dict) -> bytes:
    choices = [{"index": i, "finish_reason": "stop",
                "message": {"role": "assistant", "content": c}}
               for i, c in enumerate(step["contents"])]
    body = {"id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion",
            "created": int(time.time()), "model": server.model, "choices": choices}
    if step["usage"]:
        p, c = step["prompt_tokens"], step["completion_tokens"]
        body["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    return json.dumps(body).encode()


def _handler(server: LLMServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": [
                    {"id": server.model, "object": "model", "owned_by": "test",
                     **server.listing}]}).encode())
            else:
                self._send(404, b'{"error": {"message": "not found"}}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(length)
            try:
                body = json.loads(data)
            except json.JSONDecodeError:
                body = data.decode(errors="replace")
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, b'{"error": {"message": "not found"}}')
                return
            step = server.next_step(body)
            if "gate" in step:
                step["gate"].wait(30)
            if step.get("delay"):
                time.sleep(step["delay"])
            if step["kind"] == "reply":
                self._send(200, _completion(server, step))
            else:
                self._send(step["status"], step["body"], step.get("headers"))

        def _send(self, status: int, payload: bytes, headers: dict | None = None) -> None:
            try:
                self.send_response(status)
                headers = {"Content-Type": "application/json", **(headers or {})}
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                for i in range(0, len(payload), 1 << 16):
                    self.wfile.write(payload[i:i + (1 << 16)])
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test): nothing to do

    return Handler


# -- servers that constrain decoding (or refuse to) ------------------------------------------

def constraint_fields(body: dict) -> dict[str, object]:
    """The constraints a request carries, by dialect (stochopt/llm/structured.py): the
    schema or the grammar each names."""
    found: dict[str, object] = {}
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        if response_format.get("type") == "json_schema":
            found["json_schema"] = (response_format.get("json_schema") or {}).get("schema")
        elif response_format.get("type") == "json_object":
            found["json_object"] = response_format.get("schema")
    if "grammar" in body:
        found["grammar"] = body["grammar"]
    if "structured_outputs" in body:
        found["structured_outputs"] = (body["structured_outputs"] or {}).get("grammar")
    return found


class ConstrainingServer(LLMServer):
    """A server that decodes under the constraints it takes, as a real one would: a
    scripted reply that obeys them is sent as is, one that does not is replaced by a text
    that does (a schema's first valid instance, a sample of the grammar). Dialects in
    ``refuses`` get a 400 that names the field (OpenAI's answer to one it does not know);
    the rest are ignored. OpenAI's shape: takes json_schema, refuses the grammars; vLLM's:
    takes json_schema and structured_outputs, ignores grammar."""

    def __init__(self, *args, takes=(), refuses=(), seed: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.takes, self.refuses = set(takes), set(refuses)
        self.rng = random.Random(seed)
        self.constrained: list[dict] = []   # (dialect, constraint) of each request obeyed

    def next_step(self, body) -> dict:
        found = constraint_fields(body) if isinstance(body, dict) else {}
        refused = sorted(set(found) & self.refuses)
        if refused:
            with self.lock:
                (self.probes if is_probe(body) else self.requests).append({"body": body})
            field = "response_format" if refused[0].startswith("json") else refused[0]
            return error(400, message=f"Unrecognized request argument supplied: {field}")
        step = super().next_step(body)
        taken = {d: c for d, c in found.items() if d in self.takes}
        if not taken or step["kind"] != "reply":
            return step
        dialect, constraint = next(iter(taken.items()))
        with self.lock:
            self.constrained.append({"dialect": dialect, "constraint": constraint})
        return {**step, "contents": [self.obey(dialect, constraint, c)
                                     for c in step["contents"]]}

    def obey(self, dialect: str, constraint, content: str) -> str:
        from stochopt.llm import gbnf

        if dialect.startswith("json"):
            try:
                if schema_accepts(constraint, json.loads(content)):
                    return content
            except ValueError:
                pass
            return json.dumps(first_instance(constraint))
        grammar = gbnf.from_gbnf(constraint)
        if gbnf.accepts(grammar, content):
            return content
        return gbnf.sample(grammar, self.rng, depth=10)


def schema_accepts(schema: dict, value) -> bool:
    """The JSON schema keywords the plans and probes use: type, enum, properties,
    required, additionalProperties, items, minItems, maxItems."""
    if "enum" in schema and value not in schema["enum"]:
        return False
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict) or any(k not in value for k in schema.get("required", [])):
            return False
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is False and set(value) - set(properties):
            return False
        return all(schema_accepts(properties[k], v) for k, v in value.items() if k in properties)
    if kind == "array":
        return isinstance(value, list) and schema.get("minItems", 0) <= len(value) <= \
            schema.get("maxItems", len(value)) and all(schema_accepts(schema["items"], v)
                                                        for v in value)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    return True


def first_instance(schema: dict):
    """The simplest value a schema accepts (what a constrained model writes at worst)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {k: first_instance(schema["properties"][k]) for k in schema.get("required", [])}
    if kind == "array":
        return [first_instance(schema["items"])] * max(1, schema.get("minItems", 0))
    return {"integer": 0, "string": ""}.get(kind)
