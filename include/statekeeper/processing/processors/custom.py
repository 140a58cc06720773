"""Custom processors (``KStream.process``): the user's Processor factory as an op."""

from __future__ import annotations

from statekeeper.processing.errors import TopologyError
from statekeeper.processing.nodes import Op
from statekeeper.processing.processor import Processor, ProcessorSupplier


class CustomOp(Op):
    """Runs ``factory()`` — a Processor subclass or any zero-argument callable returning one."""

    kind = "KSTREAM-PROCESSOR"
    uses_stream_time = True  # it may read stream time or schedule punctuations

    def __init__(self, factory: ProcessorSupplier) -> None:
        if not callable(factory):
            raise TopologyError(f"process() needs a Processor factory, got {factory!r}")
        self.factory = factory

    def create(self) -> Processor:
        processor = self.factory()
        if not all(callable(getattr(processor, m, None)) for m in ("init", "process")):
            raise TopologyError(
                f"processor factory {self.factory!r} returned {type(processor).__name__}, "
                "which has no init()/process(); subclass statekeeper.processing.processor.Processor"
            )
        return processor
