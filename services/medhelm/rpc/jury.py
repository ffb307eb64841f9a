"""JuryService: the jury metric (``scoring/jury``) behind a stream of (instance, response) pairs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from medhelm.rpc.scoring import MetricHost
from medhelm.rpc.telemetry import Telemetry, rpc_method
from medhelm.v1 import common_pb2, jury_pb2_grpc


class JuryServicer(jury_pb2_grpc.JuryServiceServicer):
    def __init__(self, telemetry: Telemetry, host: MetricHost) -> None:
        self.telemetry, self._host = telemetry, host

    @rpc_method
    async def JudgeOne(self, request: common_pb2.ScoreRequest,
                       context: grpc.aio.ServicerContext) -> common_pb2.MetricResult:
        return await self._host.score_request(request, lambda r: self.telemetry.on_scored("JudgeOne", r))

    @rpc_method
    async def Judge(self, request_iterator: AsyncIterator[common_pb2.ScoreStreamRequest],
                    context: grpc.aio.ServicerContext) -> AsyncIterator[common_pb2.MetricResult]:
        async for msg in self._host.score_stream(request_iterator, lambda r: self.telemetry.on_scored("Judge", r)):
            yield msg
