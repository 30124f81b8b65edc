"""The OpenAI API of a simulated engine: completions and chat completions, streamed or whole, over a
:class:`~ascend_fleet_dev.fleet.serving.BatchingEngine`, with the error bodies vLLM and SGLang write."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ascend_fleet_dev.fleet.serving import (
    DEFAULT_MAX_TOKENS,
    WORDS,
    BatchingEngine,
    EngineRejected,
    EngineRequest,
    dialect_of,
)


def openai_app(engine: BatchingEngine, metrics: Any) -> web.Application:
    """The engine's HTTP API: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``, ``/health``, ``/metrics``.

    ``metrics`` is an async handler for ``/metrics`` (the engine's own families, as a real engine serves
    them on its API port).
    """
    api = _OpenAI(engine)
    app = web.Application()
    app.router.add_get("/health", api.health)
    app.router.add_get("/v1/models", api.models)
    app.router.add_post("/v1/completions", api.completions)
    app.router.add_post("/v1/chat/completions", api.chat)
    app.router.add_get("/metrics", metrics)
    return app


class _OpenAI:
    def __init__(self, engine: BatchingEngine) -> None:
        self.engine = engine
        self.owner = engine.config.engine

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(self, request: web.Request) -> web.Response:
        model = {"id": self.engine.config.model_name, "object": "model", "created": int(time.time()),
                 "owned_by": self.owner, "root": self.engine.config.model_name}  # fmt: skip
        return web.json_response({"object": "list", "data": [model]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
            prompt_tokens = _chat_tokens(body) if chat else _prompt_tokens(body)
            max_tokens = int(
                body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
            )
            priority = int(body.get("priority") or 0)
        except (ValueError, TypeError) as err:
            return _error(400, f"invalid request: {err}", self.owner)
        model = body.get("model")
        if model and model != self.engine.config.model_name:
            return _error(404, f"The model `{model}` does not exist.", self.owner)
        try:
            seq = self.engine.submit(prompt_tokens, max_tokens, priority)
        except EngineRejected as err:
            return _error(err.status, err.message, self.owner)
        reply = _Reply(chat, self.engine.config.model_name, seq)
        try:
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return await self._stream(request, seq, reply, include_usage)
            tokens = 0
            while not seq.done:
                tokens = await self.engine.wait(seq, tokens)
            return web.json_response(reply.whole())
        except EngineRejected as err:
            return _error(err.status, err.message, self.owner)
        finally:
            # Runs also when the client disconnects and aiohttp cancels the handler.
            self.engine.cancel(seq)

    async def _stream(
        self, request: web.Request, seq: EngineRequest, reply: _Reply, include_usage: bool
    ) -> web.StreamResponse:
        sent = 0
        try:
            sent = await self.engine.wait(seq, 0)
        except EngineRejected as err:
            return _error(err.status, err.message, self.owner)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        await response.write(_sse(reply.chunk(0, sent, first=True)))
        while sent < seq.max_tokens:
            try:
                tokens = await self.engine.wait(seq, sent)
            except EngineRejected:
                # The engine stopped under a started answer: its process is gone, so is the connection.
                if request.transport is not None:
                    request.transport.abort()
                return response
            await response.write(_sse(reply.chunk(sent, tokens)))
            sent = tokens
        if include_usage:
            await response.write(_sse(reply.usage_chunk()))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


@dataclass
class _Reply:
    chat: bool
    model: str
    seq: EngineRequest
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    created: int = field(default_factory=lambda: int(time.time()))

    def _text(self, start: int, end: int) -> str:
        return "".join(f" {WORDS[i % len(WORDS)]}" for i in range(start, end))

    def _usage(self) -> dict[str, int]:
        prompt, completion = self.seq.prompt_tokens, self.seq.max_tokens
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": f"{'chatcmpl' if self.chat else 'cmpl'}-{self.id}", "object": kind,
                "created": self.created, "model": self.model}  # fmt: skip

    def whole(self) -> dict[str, Any]:
        text = self._text(0, self.seq.max_tokens)
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            return {**self._head("chat.completion"), "choices": [choice], "usage": self._usage()}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        return {**self._head("text_completion"), "choices": [choice], "usage": self._usage()}

    def chunk(self, start: int, end: int, *, first: bool = False) -> dict[str, Any]:
        finish = "length" if end >= self.seq.max_tokens else None
        text = self._text(start, end)
        if self.chat:
            delta: dict[str, Any] = {"content": text}
            if first:
                delta = {"role": "assistant", **delta}
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {**self._head("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return {**self._head("text_completion"), "choices": [choice]}

    def usage_chunk(self) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._head(kind), "choices": [], "usage": self._usage()}


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def _error(status: int, message: str, engine: str) -> web.Response:
    """An error body as the engine writes it (vLLM nests it under ``error``; SGLang puts it at the top)."""
    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(status, "Error")
    if dialect_of(engine).error_at_top:
        body: dict[str, Any] = {
            "object": "error",
            "message": message,
            "type": kind,
            "param": None,
            "code": status,
        }
    else:
        body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    return web.json_response(body, status=status)


def _count(text: str) -> int:
    return len(text.split())


def _prompt_tokens(body: dict[str, Any]) -> int:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return _count(prompt)
    if isinstance(prompt, list) and all(isinstance(item, int) for item in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return _count(prompt[0])
    raise ValueError("prompt must be a string, a list of one string or a list of token ids")


def _chat_tokens(body: dict[str, Any]) -> int:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    total = 0
    for message in messages:
        content = (message or {}).get("content")
        if isinstance(content, str):
            total += _count(content)
        elif isinstance(content, list):
            total += sum(_count(part.get("text", "")) for part in content if isinstance(part, dict))
    return total
