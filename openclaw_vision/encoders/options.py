"""`EncoderOptions`: everything a backend's `build` may need besides the model file, one object for all.

Its own module (standard library only) because both ends read it: every backend's build (encoders/)
and the node's configuration (runtime/config.py takes its defaults from here, so a default is written once).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.gate import check_policy

#: `gate: auto`: the INT8 gate policy follows the backend choice (`require` under `backend: auto`,
#: so auto moves on to a backend where the model passed; `warn` for a backend named explicitly)
GATE_AUTO = "auto"
PERFORMANCE_HINTS = ("latency", "throughput")  # OpenVINO: encoders/openvino.py says what each does and measured


@dataclass(frozen=True)
class EncoderOptions:
    """The node's keys of the same names (config.EncoderConfig) and the INT8 gate policy.

    `gate` is one of gate.POLICIES, or `auto` (resolved by `create_encoder`); an unknown value is a
    ValueError here, when the options are made, not at the first INT8 model."""

    threads: int = 0
    #: batches the caller encodes at once; a backend that answers concurrent calls in parallel (`lanes` on the
    #: encoder it builds: ONNX Runtime) gives each its share of `threads`, the others run one call at a time
    encode_lanes: int = 1
    performance_hint: str = "latency"
    gate: str = GATE_AUTO
    triton_url: str = "127.0.0.1:8001"
    triton_model: str = ""
    triton_model_version: str = ""
    triton_shared_memory: str = "auto"
    triton_timeout: float = 2.0

    def __post_init__(self) -> None:
        if self.gate != GATE_AUTO:
            check_policy(self.gate)
        if self.performance_hint not in PERFORMANCE_HINTS:
            raise ValueError(
                f"unknown performance_hint {self.performance_hint!r}; choose one of {', '.join(PERFORMANCE_HINTS)}"
            )
