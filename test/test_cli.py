"""`openclaw-vision`: one table of subcommands, each with its flags beside the code it drives.

What a user notices: every subcommand answers `--help` with its own usage, a flag left out gives the
library's own default (never a second copy that could drift), a node gets its command line as typed
(its `--ros-args` too), and a sample bag left half-written by an interrupted demo is rebuilt, saying why.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from openclaw_vision import cli
from openclaw_vision.core.commands import Command, field_flag, from_args


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_subcommand_answers_help_with_its_own_usage(name, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([*name.split(), "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: openclaw-vision {name} ") and "--help" in out


def test_the_top_level_help_lists_every_command_and_group(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert name.split()[0] in out
    assert "rosbag2 tools" in out and "CLIP's tokenizer files" in out


def test_quantize_flags_left_out_are_the_librarys_defaults():
    from openclaw_vision.core.gate import GateSpec
    from openclaw_vision.quant.pipeline import QuantOptions

    args = cli.build_parser().parse_args(["quantize", "--calib", "frames"])
    got = from_args(QuantOptions, args, fp32_model=Path("m.onnx"), out=Path("o.onnx"), gate=from_args(GateSpec, args))
    assert got == QuantOptions(Path("m.onnx"), Path("frames"), Path("o.onnx"))
    switched = cli.build_parser().parse_args(["quantize", "--calib", "f", "--no-memory", "--no-text", "--max-frames",
                                              "7", "--min-cosine", "0.5", "--max-float-layers", "3"])  # fmt: skip
    opts = from_args(QuantOptions, switched, fp32_model=Path("m"), out=Path("o"), gate=from_args(GateSpec, switched))
    assert (opts.measure_memory, opts.text, opts.max_frames, opts.max_float) == (False, False, 7, 3)
    assert from_args(GateSpec, switched) == GateSpec(min_cosine=0.5)


def test_a_node_gets_its_command_line_as_typed_ros_arguments_included():
    from openclaw_vision.ros import encoder_node

    argv = ["--model", "tiny", "--ros-args", "-p", "depth:=2", "--params-file", "f.yaml"]
    args = cli.build_parser().parse_args(["--log-level", "DEBUG", "encoder", *argv])
    assert args.command is encoder_node.main and args.argv == argv


def test_an_unknown_flag_of_a_tool_is_refused(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["bag", "sample", "out", "--no-such-flag"])
    assert done.value.code == 2 and "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_field_flags_take_the_fields_defaults_and_switch_booleans():
    from dataclasses import dataclass

    @dataclass
    class Options:
        rate: float = 1.5
        lockstep: bool = False
        restamp: bool = True
        name: str | None = None

    p = argparse.ArgumentParser()
    field_flag(p, "--rate", Options)
    field_flag(p, "--lockstep", Options)
    field_flag(p, "--keep-stamps", Options, "restamp")
    field_flag(p, "--name", Options)
    assert from_args(Options, p.parse_args([])) == Options()
    assert from_args(Options, p.parse_args(["--rate", "2", "--lockstep", "--keep-stamps", "--name", "x"])) == Options(
        2.0, True, False, "x"
    )
    assert "--keep-stamps" in p.format_help() and "RESTAMP" not in p.format_help()


def test_every_table_entry_is_a_command_or_a_node_main():
    import importlib

    for name, (target, _) in cli.COMMANDS.items():
        module, attr = target.split(":")
        obj = getattr(importlib.import_module(f"openclaw_vision.{module}"), attr)
        assert isinstance(obj, Command) or (callable(obj) and attr == "main"), name


def test_a_half_written_demo_bag_is_rebuilt_with_the_reason_and_a_bug_is_not_hidden(tmp_path, capsys, monkeypatch):
    from openclaw_vision.runtime import bags
    from openclaw_vision.tools import demo

    bag = tmp_path / "frames"
    bags.write_sample_bag(bag, frames=3, fps=10, width=64, height=48)
    mcap = next(bag.glob("*.mcap"))
    mcap.write_bytes(mcap.read_bytes()[:100])  # an interrupted run
    written = []
    monkeypatch.setattr(bags, "write_sample_bag", lambda path, frames, fps: written.append(path))
    demo._ensure_bag(bag, 3, 10)
    assert written == [bag] and "is not a complete bag (BagError" in capsys.readouterr().out

    def broken(*a, **k):
        raise TypeError("a bug in the reader")

    bag.mkdir()
    monkeypatch.setattr(bags, "read_messages", broken)
    with pytest.raises(TypeError, match="a bug in the reader"):
        demo._ensure_bag(bag, 3, 10)


@pytest.mark.parametrize("node", ["EncoderConfig", "VlmConfig", "LabelsConfig", "MemoryConfig"])
def test_a_nodes_flags_are_its_keys_typed_as_their_defaults_and_unset_when_left_out(node):
    """config.add_arguments makes a node's flags with field_flag (the one dataclass-to-flag generator): one flag
    per key, its value typed as the key's default (a list for a string array), None when left out so that the
    parameters file decides, and its help the key's Param with the default."""
    from openclaw_vision.runtime import config

    cls = getattr(config, node)
    p = argparse.ArgumentParser()
    config.add_arguments(p, cls)
    assert vars(p.parse_args([])) == dict.fromkeys(cls.params())
    argv, want = [], {}
    for name, default in cls().as_dict().items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, list):
            argv, want[name] = [*argv, flag, "/a", "/b"], ["/a", "/b"]
        else:
            value = "x" if isinstance(default, str) else "3"
            argv, want[name] = [*argv, flag, value], type(default)(value)
    got = vars(p.parse_args(argv))
    assert got == want and all(type(got[k]) is type(want[k]) for k in want)
    helps = {a.dest: a.help for a in p._actions if a.dest in want}
    for name, spec in cls.params().items():
        assert helps[name].startswith(spec.description.replace("%", "%%")), name
        assert spec.limits() in helps[name] and f"default: {getattr(cls(), name)!r})" in helps[name], name


def test_a_field_flag_may_leave_its_field_unset_typed_as_the_field():
    from dataclasses import dataclass

    @dataclass
    class Options:
        rate: float = 1.5

    p = argparse.ArgumentParser()
    field_flag(p, "--rate", Options, default=None)
    assert p.parse_args([]).rate is None and p.parse_args(["--rate", "2"]).rate == 2.0
