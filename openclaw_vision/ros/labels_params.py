"""The labels node's run-time parameters: its configuration now and the label set made from it (each label
embedded once with the text tower), changed together, one change at a time.

Apart from the node because a change is a small transaction of its own: the new set is parsed and embedded
first, then swapped in whole, so frames keep scoring against the previous set until the new one is ready and
never wait for a change. A set that cannot be used (empty, duplicates, an unreadable file, a template without
its placeholder) is refused with the reason, counted in `label_sets_refused` and logged, and the previous set
and configuration stay."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from ..runtime import config as cfgmod
from ..runtime.stats import Counters

if TYPE_CHECKING:
    from ..text.zero_shot import LabelSet

log = logging.getLogger("labels_node")  # the node's logger: these lines are the node's

#: Parameters that change the label set while the node runs; every other key is read at start.
LIVE = ("labels", "labels_file", "template")


class LabelParams:
    """`cfg` and `current` (the label set of its LIVE keys, embedded by `text_encoder`), counted in the node's
    `counters`. Building the first set raises LabelError: a node without a usable set does not start."""

    def __init__(self, cfg: cfgmod.LabelsConfig, text_encoder, counters: Counters) -> None:
        self.cfg, self.text, self.counters = cfg, text_encoder, counters
        self._params = {key: getattr(cfg, key) for key in LIVE}
        self.current: LabelSet = self._label_set(self._params)
        self._change = threading.Lock()  # one label set change at a time; frames never wait for it

    def _label_set(self, params: dict[str, Any]) -> LabelSet:
        from ..text.zero_shot import LabelSet, parse_labels, read_labels_file

        file = str(params["labels_file"])
        labels = read_labels_file(file) if file else parse_labels(str(params["labels"]))
        return LabelSet.build(self.text, labels, str(params["template"]))

    def reconfigure(self, changes: dict[str, Any]) -> cfgmod.LabelsConfig:
        """Apply run-time parameter changes: a new label set, embedded now, used from the next frame;
        diagnostics_period from the next report.

        The runner's protocol (rclpy's on-set-parameters callback, `ros2 param set`): a
        ConfigError refuses the change with its reason and changes nothing. Which keys change at
        run time is the config's (`Param.runtime`, as the ROS descriptors say); a label set that
        cannot be used is counted as refused. Keys that are not this node's (use_sim_time) are
        ignored. Label values equal to the current ones embed nothing (so the same change seen
        twice is not embedded twice)."""
        from ..text.zero_shot import LabelError

        changes = {k: v for k, v in changes.items() if k in self.cfg.params()}
        self.cfg.check_runtime(changes)  # a read-only key: refused, nothing counted
        with self._change:
            live = {**self._params, **{k: v for k, v in changes.items() if k in LIVE}}
            try:
                cfg = self.cfg.updated(changes)
                new = self._label_set(live) if live != self._params else None
            except (cfgmod.ConfigError, LabelError, ValueError) as err:
                if not set(changes) & set(LIVE):
                    raise
                self.counters.inc("label_sets_refused")
                log.warning("label set refused, keeping %d labels: %s", len(self.current.labels), err)
                raise cfgmod.ConfigError(str(err)) from None
            self.cfg = cfg
            if new is None:
                return cfg
            self._params, self.current = live, new
        self.counters.inc("label_sets")
        log.info("label set: %s (template %r)", ", ".join(new.labels), new.template)
        return cfg
