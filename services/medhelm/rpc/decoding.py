"""A malformed request is the caller's fault: INVALID_ARGUMENT, never UNKNOWN or INTERNAL.

gRPC Python parses each request message with the method's deserializer before any interceptor or servicer
code sees it, and answers bytes that are not that protobuf with UNKNOWN (unary, quoting the parser's
exception) or INTERNAL (streams) - a server fault to any client and to the alerts. ``StrictDecoding`` gives
every ``/medhelm.v1.*`` handler the identity deserializer and parses inside the call instead: a message that
does not parse ends the call with INVALID_ARGUMENT "malformed <Type> message" (one line; no byte of the
message is echoed or logged). Well-formed messages reach the servicer exactly as before.

Failure semantics: only ``DecodeError`` from parsing is mapped; everything else propagates unchanged. For a
request stream the messages before the malformed one have already been handed to the servicer (as a stream
always does); the call then ends with INVALID_ARGUMENT."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

GUARDED_PREFIX = "/medhelm.v1."


def _identity(data: bytes) -> bytes:
    return data


class StrictDecoding(grpc.aio.ServerInterceptor):
    async def intercept_service(self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or not details.method.startswith(GUARDED_PREFIX) or handler.request_deserializer is None:
            return handler
        return _decoding(handler, details.method.rsplit("/", 1)[-1])


async def _parse(parse: Callable[[bytes], Any], data: bytes, context: Any, method: str) -> Any:
    try:
        return parse(data)
    except DecodeError:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed {method} request message")


def _decoding(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    parse = handler.request_deserializer
    make = {"unary_unary": grpc.unary_unary_rpc_method_handler, "unary_stream": grpc.unary_stream_rpc_method_handler,
            "stream_unary": grpc.stream_unary_rpc_method_handler,
            "stream_stream": grpc.stream_stream_rpc_method_handler}
    attr = next(a for a in make if getattr(handler, a) is not None)
    inner = getattr(handler, attr)

    async def requests(raw: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
        async for data in raw:
            yield await _parse(parse, data, context, method)

    if attr.startswith("unary"):
        async def first(request: bytes, context: Any) -> Any:
            return await _parse(parse, request, context, method)
    else:
        async def first(request: Any, context: Any) -> Any:  # type: ignore[misc]
            return requests(request, context)

    if attr.endswith("_stream"):
        async def behaviour(request: Any, context: Any) -> Any:
            result = inner(await first(request, context), context)
            if hasattr(result, "__aiter__"):
                async for item in result:
                    yield item
            else:  # a servicer method that returns an iterable of replies
                for item in await result if hasattr(result, "__await__") else result:
                    yield item
    else:
        async def behaviour(request: Any, context: Any) -> Any:  # type: ignore[misc]
            result = inner(await first(request, context), context)
            return await result if hasattr(result, "__await__") else result
    return make[attr](behaviour, request_deserializer=_identity, response_serializer=handler.response_serializer)
