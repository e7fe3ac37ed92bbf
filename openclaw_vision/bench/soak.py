"""`soak` mode: the four nodes together for a long run under a CPU hog, and whether anything leaks or goes missing.

Issue 34, part 6. The other benches time one thing in a short window; a robot runs for hours, and what a short
run cannot show is slow: memory that grows a little per frame, a thread that died once an hour and was not
reported, a count that stops adding up after a publisher went away and came back. So, for `seconds` (600 by
default, 60 with --quick), as separate processes over loopback DDS:

    camera player ──/cam0/image_raw──► encoder ──/visual_features──► labels, memory (a store in the out
    (restarted: plays PLAY_S, ends,                                  folder), VLM; and this process's
     starts again)                                                   subscription, opened and closed in turn
    this process ──/vlm/prompt (a question every PROMPT_S)──► VLM

with one busy-looping process per core beside them (stop.HOG) from the first frame to the last stop. Every
RSS_S each node's resident memory is read from /proc; at the end each node gets SIGTERM (timed, signal to
exit, as the stop bench times it) and writes its --stats-json. Reported:

- RSS growth per node in MB/h: the least-squares slope over the samples after the first WARMUP_SHARE of the
  run (the model load, first allocations and DDS discovery are not growth);
- every frame accounted for: the players' sent frames against the encoder's received (the difference is lost
  in transport and reported, not hidden), and each node's own counts adding up (encoder: received = encoded +
  dropped + rejected + failed; labels: received = labelled + mismatched + rejected + failed; memory: received =
  written + skipped + dropped + rejected + refused + pending; VLM: prompts = answered + failed + rejected +
  unanswered), each downstream node receiving no more features than the encoder published;
- thread deaths that went unreported: a node's `thread_failures` against the supervisor's "thread NAME failed"
  lines in its log, and any traceback in the log that is not one of those lines (threads.Supervisor logs each
  failure once, with its traceback, and counts it: a death in only one of the two, or in neither but leaving
  a traceback, was not reported the way the node promises);
- the stop time and exit code of each node.

    openclaw-vision bench --mode soak [--quick] [--soak-seconds S] [--model M --model-path M.onnx]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core import children
from ..runtime import bags
from .goals import row
from .overload import memory_mb
from .stop import GOAL_P99_S, HOG, _stop_once

#: the model the soak runs without --model-path: the tiny one (the soak is about the nodes, not the model)
MODEL = "tiny"
#: seconds of the run (default, --quick)
SECONDS = {False: 600.0, True: 60.0}
NODES = ("encoder", "labels", "memory", "vlm")
CAMERA, FEATURES, PROMPT = "/cam0/image_raw", "/visual_features", "/vlm/prompt"
FPS = 10.0
#: one player's play time, the pause before the next one (its publisher gone from the graph), the bench
#: subscription's cycle (open half of it, closed the other half), the question period, the RSS period
PLAY_S, PLAYER_GAP_S, SUBSCRIBER_S, PROMPT_S, RSS_S = 45.0, 2.0, 20.0, 3.0, 10.0
#: the share of the run before RSS samples count for the growth slope
WARMUP_SHARE = 0.2
#: after the last player, before the stops: the last features, rows and answers on their way
DRAIN_S = 2.0
READY_TIMEOUT_S = 300.0
#: the supervisor's lines (threads.Supervisor._run): a loop that raised, or one that returned while the node ran
FAILED_LINE = re.compile(r"thread \S+ (failed \(restarting|ended by itself)")
TRACEBACK = "Traceback (most recent call last)"


@dataclass(frozen=True)
class Periods:
    """The run's periods, shortened for a short run so that even a 20 s test restarts the player, opens and
    closes the subscription and samples memory enough times to fit a slope."""

    play: float
    subscriber: float
    prompt: float
    rss: float

    @classmethod
    def for_run(cls, seconds: float) -> Periods:
        return cls(min(PLAY_S, seconds / 3), min(SUBSCRIBER_S, seconds / 4), min(PROMPT_S, seconds / 10),
                   min(RSS_S, seconds / 12))  # fmt: skip


@dataclass
class _Subscriber:
    """This process's features subscription that comes and goes: what each incarnation received."""

    transport: Any
    lock: threading.Lock = field(default_factory=threading.Lock)
    got: list[int] = field(default_factory=list)
    sub: Any = None

    def _on(self, _msg: Any, _dt: float) -> None:
        with self.lock:
            self.got[-1] += 1

    def toggle(self) -> None:
        from ..ros.types import DEFAULT, VISUAL_FEATURES

        if self.sub is None:
            with self.lock:
                self.got.append(0)
            self.sub = self.transport.subscribe(FEATURES, VISUAL_FEATURES, DEFAULT, self._on)
        else:
            self.close()

    def close(self) -> None:
        if self.sub is not None:
            self.sub.close()
            self.sub = None


class _Diagnostics:
    """Each node's latest `thread_failures` on /diagnostics: the count for a node whose --stats-json lacks it
    (the labels node puts it in its diagnostics only), as a robot's monitor would read it."""

    def __init__(self, transport: Any) -> None:
        from ..ros import encoder_node, labels_node, memory_node, vlm_node
        from ..ros.types import DIAGNOSTIC_ARRAY, QoS

        mods = (encoder_node, labels_node, memory_node, vlm_node)
        self.status = {n: m.STATUS_NAME for m, n in zip(mods, NODES, strict=True)}
        self.thread_failures: dict[str, int] = {}
        self.sub = transport.subscribe("/diagnostics", DIAGNOSTIC_ARRAY, QoS("reliable", 10), self._on)

    def _on(self, msg: Any, _dt: float) -> None:
        from ..ros.diagnostics import status_values

        for node, status in self.status.items():
            values = status_values(msg, status)
            if values is not None and "thread_failures" in values:
                self.thread_failures[node] = int(values["thread_failures"])


def _nodes(model: str, fp32: Path, text: Path, work: Path) -> dict[str, Any]:
    """The four nodes, each with its --stats-json and log in `work`, on the bench's model."""
    from ..ros.process import NodeProcess

    common = ["--transport", "cyclonedds"]
    args = {
        "encoder": ["--model", model, "--model-path", str(fp32), "--backend", "onnxruntime", "--precision", "fp32",
                    "--threads", "1", "--image-topic", CAMERA, "--features-topic", FEATURES],
        "labels": ["--text-model-path", str(text), "--features-topic", FEATURES],
        "memory": ["--store", str(work / "store"), "--features-topic", FEATURES],
        "vlm": ["--llm", "tiny", "--model", model, "--backend", "numpy", "--features-topic", FEATURES,
                "--prompt-topic", PROMPT],
    }  # fmt: skip
    out = {}
    try:
        for name in NODES:
            out[name] = NodeProcess([*args[name], *common, "--stats-json", str(work / f"{name}.json")],
                                    log_path=work / f"{name}.log", node=name)  # fmt: skip
    except BaseException:
        for node in out.values():
            node.stop()
        raise
    return out


def _wait_ready(nodes: dict[str, Any]) -> None:
    for name, node in nodes.items():
        if not node.wait_for_line("INFO: ready: ", READY_TIMEOUT_S, anywhere=True):
            raise RuntimeError(f"soak: the {name} node never got ready ({node.how}): {node.log_text()[-1500:]}")


def growth_mb_per_h(samples: list[tuple[float, float]], warmup_s: float) -> float | None:
    """Least-squares slope of (seconds, MB) after `warmup_s`, in MB per hour; None with fewer than 2 samples.
    A slope, not last minus first: one sample taken while a batch was in flight moves it little."""
    after = [(t, mb) for t, mb in samples if t >= warmup_s]
    if len(after) < 2:
        return None
    t, mb = np.array(after).T
    return float(np.polyfit(t, mb, 1)[0] * 3600)


def thread_deaths(log_text: str, thread_failures: int | None) -> dict[str, Any]:
    """A node's thread failures as counted and as logged; `unreported`: deaths missing from either, plus
    tracebacks in the log that no supervisor line explains (a thread that died outside the supervisor)."""
    lines = len(FAILED_LINE.findall(log_text))
    with_traceback = log_text.count("failed (restarting")
    stray = max(0, log_text.count(TRACEBACK) - with_traceback)
    if thread_failures is None:  # not counted anywhere: every logged death is unreported in the counts
        return {"thread_failures": None, "log_lines": lines, "stray_tracebacks": stray, "unreported": lines + stray}
    return {"thread_failures": thread_failures, "log_lines": lines, "stray_tracebacks": stray,
            "unreported": abs(thread_failures - lines) + stray}  # fmt: skip


def _balance(counts: dict[str, Any], total: str, parts: tuple[str, ...]) -> dict[str, Any]:
    """The counts named, and whether `total` equals the sum of `parts`."""
    out = {k: counts.get(k, 0) for k in (total, *parts)}
    out["balanced"] = out[total] == sum(out[k] for k in parts)
    return out


def _loop(nodes: dict[str, Any], t: Any, bag: Path, work: Path, seconds: float, p: Periods) -> dict[str, Any]:
    """The soak itself: players one after another, the subscription in turn, questions, RSS samples; returns
    what this side counted. Node deaths are recorded, not raised: the rest of the run still says how it ends."""
    from ..ros.types import DEFAULT, STRING
    from .cameras import start_player

    prompts = t.publisher(PROMPT, STRING, DEFAULT)
    sub = _Subscriber(t)
    rss: dict[str, list[tuple[float, float]]] = {n: [] for n in NODES}
    played: list[dict] = []
    died: dict[str, float] = {}
    asked = 0
    start = time.monotonic()
    end = start + seconds
    player, player_out, next_player = None, None, start
    next_sub = next_prompt = next_rss = start
    try:
        while True:
            now = time.monotonic()
            if player is not None and player.wait(0) is not None:
                played.append(json.loads(player_out.read_text()) if player_out.exists() else {"sent": [0]})
                played[-1]["exit"] = player.how
                player.stop()
                player, next_player = None, time.monotonic() + PLAYER_GAP_S
            left = end - now
            if player is None and now >= next_player:
                if left < p.play / 2:  # too little for a player worth the name: the run ends here
                    break
                player_out = work / f"player-{len(played)}.json"
                player = start_player(bag, 1, FPS, min(p.play, left), False, player_out, "soak")
            if now >= next_sub:
                sub.toggle()
                next_sub += p.subscriber / 2
            if now >= next_prompt and prompts.matched():
                prompts.publish(t.msg(STRING)(data=f"what is in front of the robot? ({asked})"))
                asked += 1
                next_prompt += p.prompt
            if now >= next_rss:
                for name, node in nodes.items():
                    try:
                        rss[name].append((now - start, memory_mb(node.proc.pid)["VmRSS"]))
                        continue
                    except (OSError, KeyError):  # gone, or a zombie (no VmRSS): it ended
                        pass
                    if name not in died:
                        died[name] = round(now - start, 1)
                        print(f"soak: the {name} node ended at {died[name]} s ({node.how})", flush=True)
                next_rss += p.rss
            time.sleep(0.05)
    finally:
        if player is not None:
            player.stop()
        sub.close()
    time.sleep(DRAIN_S)
    return {"ran_s": round(time.monotonic() - start, 1), "played": played, "asked": asked, "rss": rss,
            "subscriptions": list(sub.got), "died": died}  # fmt: skip


def _stop_all(nodes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """SIGTERM each node in turn, timed from the signal to its exit (stop._stop_once); a node already gone
    has no stop time, only its exit code."""
    out = {}
    for name, node in nodes.items():
        if node.alive():
            took, code = _stop_once(node)
            out[name] = {"seconds": round(took, 3), "exit_code": code}
        else:
            out[name] = {"seconds": None, "exit_code": node.proc.returncode}
    return out


def _read_stats(work: Path) -> dict[str, dict[str, Any]]:
    stats = {}
    for name in NODES:
        path = work / f"{name}.json"
        stats[name] = json.loads(path.read_text()) if path.exists() else {}
    return stats


def figures(loop: dict[str, Any], stats: dict[str, dict], logs: dict[str, str], stops: dict[str, dict],
            seconds: float, diag_failures: dict[str, int]) -> dict[str, Any]:  # fmt: skip
    """Everything measured, JSON-ready, with the goals judged. A node's thread failures come from its
    --stats-json, else from its last /diagnostics (`diag_failures`), else are missing (None: unreported)."""
    enc, lab, mem, vlm = (stats[n] for n in NODES)
    sent = sum(sum(p.get("sent", [0])) for p in loop["played"])
    frames = {"sent": sent, **_balance(enc, "received", ("encoded", "dropped", "rejected", "failed"))}
    frames["lost"] = sent - frames["received"]
    published = frames["encoded"]
    features = {"published": published, "labels_received": lab.get("received", 0),
                "memory_received": mem.get("received", 0), "vlm_received": vlm.get("features", 0),
                "bench_subscriptions": len(loop["subscriptions"]), "bench_received": loop["subscriptions"]}  # fmt: skip
    labels = _balance(lab, "received", ("labelled", "mismatched", "rejected", "failed"))
    memory = _balance(mem, "received", ("written", "skipped", "dropped", "rejected", "refused", "pending"))
    memory["rows"] = mem.get("rows", 0)
    prompts = {"sent": loop["asked"], **_balance(vlm, "prompts", ("answered", "failed", "rejected", "unanswered"))}
    downstream_ok = all(features[k] <= published for k in ("labels_received", "memory_received", "vlm_received"))
    accounted = (all(s for s in stats.values()) and frames["lost"] >= 0 and downstream_ok
                 and all(b["balanced"] for b in (frames, labels, memory, prompts))
                 and prompts["prompts"] <= prompts["sent"])  # fmt: skip
    warmup = WARMUP_SHARE * seconds
    rss = {}
    for name, samples in loop["rss"].items():
        g = growth_mb_per_h(samples, warmup)
        rss[name] = {"samples": len(samples), "first_mb": round(samples[0][1], 1) if samples else None,
                     "last_mb": round(samples[-1][1], 1) if samples else None,
                     "growth_mb_per_h": round(g, 1) if g is not None else None}  # fmt: skip
    deaths = {}
    for n in NODES:
        counted, source = stats[n].get("thread_failures"), "stats-json"
        if counted is None:
            counted, source = diag_failures.get(n), "diagnostics"
        deaths[n] = {**thread_deaths(logs[n], counted), "counted_in": source if counted is not None else "nowhere"}
    unreported = sum(d["unreported"] for d in deaths.values()) + len(loop["died"])
    stop_ok = all(s["seconds"] is not None and s["seconds"] <= GOAL_P99_S and s["exit_code"] == 0
                  for s in stops.values())  # fmt: skip
    goals = [
        row("soak: every frame accounted for (sent = received + lost; each node's counts add up)",
            f"sent {sent}, received {frames['received']}, lost {frames['lost']}; encoder "
            f"{'balanced' if frames['balanced'] else 'UNBALANCED'}, labels "
            f"{'balanced' if labels['balanced'] else 'UNBALANCED'}, memory "
            f"{'balanced' if memory['balanced'] else 'UNBALANCED'}, VLM "
            f"{'balanced' if prompts['balanced'] else 'UNBALANCED'}",
            accounted),
        row("soak: unreported thread deaths = 0", f"{unreported} (thread failures "
            + ", ".join(f"{n} {d['thread_failures']}" for n, d in deaths.items()) + ")", unreported == 0),
        row(f"soak: every node stops on SIGTERM within {GOAL_P99_S:g} s, exit 0",
            ", ".join(f"{n} {s['seconds']} s (exit {s['exit_code']})" for n, s in stops.items()), stop_ok),
    ]  # fmt: skip
    return {"seconds": seconds, "ran_s": loop["ran_s"], "fps": FPS, "players": len(loop["played"]),
            "player_exits": [p["exit"] for p in loop["played"]], "frames": frames, "features": features,
            "labels": labels, "memory": memory, "prompts": prompts, "rss": rss, "warmup_s": round(warmup, 1),
            "threads": deaths, "nodes_died": loop["died"], "stop": stops, "goals": goals}  # fmt: skip


def lines(res: dict[str, Any]) -> list[str]:
    """One line per figure (printed at the end of the run, and kept for the report)."""
    f, ft, lab, mem, pr = res["frames"], res["features"], res["labels"], res["memory"], res["prompts"]
    out = [
        f"soak: {res['ran_s']} s beside {res['hogs']} CPU hogs, {res['players']} player runs at {res['fps']:g} fps "
        f"(exits: {', '.join(sorted(set(res['player_exits'])))})",
        f"soak frames: players sent {f['sent']}, encoder received {f['received']} (lost in transport "
        f"{f['lost']}) = encoded {f['encoded']} + dropped {f['dropped']} + rejected {f['rejected']} + failed "
        f"{f['failed']}: {'adds up' if f['balanced'] else 'DOES NOT ADD UP'}",
        f"soak features: published {ft['published']}; labels received {ft['labels_received']}, memory "
        f"{ft['memory_received']}, VLM {ft['vlm_received']}; the bench's subscription, {ft['bench_subscriptions']} "
        f"times: {ft['bench_received']}",
        f"soak labels: received {lab['received']} = labelled {lab['labelled']} + mismatched {lab['mismatched']} + "
        f"rejected {lab['rejected']} + failed {lab['failed']}: {'adds up' if lab['balanced'] else 'DOES NOT ADD UP'}",
        f"soak memory: received {mem['received']} = written {mem['written']} + skipped {mem['skipped']} + dropped "
        f"{mem['dropped']} + rejected {mem['rejected']} + refused {mem['refused']} + pending {mem['pending']}: "
        f"{'adds up' if mem['balanced'] else 'DOES NOT ADD UP'}; {mem['rows']} rows in the store",
        f"soak VLM: questions sent {pr['sent']}, received {pr['prompts']} = answered {pr['answered']} + failed "
        f"{pr['failed']} + rejected {pr['rejected']} + unanswered {pr['unanswered']}: "
        f"{'adds up' if pr['balanced'] else 'DOES NOT ADD UP'}",
    ]
    for name, r in res["rss"].items():
        out.append(f"soak RSS {name}: {r['first_mb']} -> {r['last_mb']} MB over {r['samples']} samples; growth "
                   f"{r['growth_mb_per_h']} MB/h (slope after the first {res['warmup_s']} s)")  # fmt: skip
    for name, d in res["threads"].items():
        out.append(f"soak threads {name}: thread_failures {d['thread_failures']} (from its {d['counted_in']}), "
                   f"'thread ... failed' log "
                   f"lines {d['log_lines']}, other tracebacks {d['stray_tracebacks']}: unreported "
                   f"{d['unreported']}")  # fmt: skip
    for name, s in res["stop"].items():
        out.append(f"soak stop {name}: {s['seconds']} s from SIGTERM to exit, exit code {s['exit_code']}")
    out += [f"goal {g['goal']}: {g['measured']} ({'met' if g['met'] else 'MISSED'})" for g in res["goals"]]
    return out


def run_soak(model: str, fp32: Path, text: Path, quick: bool, out: Path, seconds: float | None = None) -> dict:
    """The whole soak (module docstring); prints its lines and returns the figures, JSON-ready."""
    from ..ros.cyclone import CycloneTransport

    seconds = seconds or SECONDS[quick]
    work = out / "soak"
    shutil.rmtree(work / "store", ignore_errors=True)  # a fresh store: its rows are this run's
    work.mkdir(parents=True, exist_ok=True)
    bag = work / "frames"
    if not bag.exists():
        bags.write_sample_bag(bag, frames=30, fps=FPS, width=320, height=240, topic=CAMERA)
    nodes = _nodes(model, fp32, text, work)
    hogs: list[children.Child] = []
    t = CycloneTransport("soak_bench")
    try:
        diag = _Diagnostics(t)
        _wait_ready(nodes)
        hogs = [children.Child(children.python("-c", HOG), log_path=work / f"hog-{i}.log")
                for i in range(os.cpu_count() or 1)]  # fmt: skip
        loop = _loop(nodes, t, bag, work, seconds, Periods.for_run(seconds))
        stops = _stop_all(nodes)
    finally:
        t.close()
        for node in nodes.values():
            node.stop()
        for hog in hogs:
            hog.stop()
    logs = {n: nodes[n].log_text() for n in NODES}
    res = {
        "model": model,
        "hogs": len(hogs),
        **figures(loop, _read_stats(work), logs, stops, seconds, dict(diag.thread_failures)),
    }
    for line in lines(res):
        print(line, flush=True)
    return res
