from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenthost.testing.openai_stub import OpenAIStub


@pytest.fixture(scope="session")
def otel() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """One in-memory tracer provider for the exporters under test (each test clears it first)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@pytest.fixture
def exporter(otel: tuple[TracerProvider, InMemorySpanExporter]) -> InMemorySpanExporter:
    otel[1].clear()
    return otel[1]


@pytest.fixture(scope="session")
def model_server() -> Iterator[OpenAIStub]:
    # Frameworks write `content: null` beside tool calls, as OpenAI allows: the lenient stub, as in tests/runtimes.
    with OpenAIStub(strict_content=False) as stub:
        yield stub
