"""`seglake ... --help` describes every subcommand, flag and positional: a newcomer reads
what each one means without the README (a flag shown bare, e.g. `--keep-daily KEEP_DAILY`,
said nothing), and the top-level description is about seglake, not the parser module."""

import argparse

from seglake.cli.parser import build_parser


def _undescribed(parser: argparse.ArgumentParser, path: str) -> list[str]:
    missing = []
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: c.help for c in a._choices_actions}
            for name, child in a.choices.items():
                if not helps.get(name):
                    missing.append(f"{path} {name} (subcommand)")
                missing += _undescribed(child, f"{path} {name}")
        elif not a.help:
            missing.append(f"{path} {'/'.join(a.option_strings) or a.dest}")
    return missing


def test_every_subcommand_flag_and_positional_has_help():
    assert _undescribed(build_parser(), "seglake") == []


def test_top_level_help_describes_seglake(capsys):
    p = build_parser()
    text = p.format_help()
    assert "argparse" not in text and "one place" not in text
    assert "seglake COMMAND --help" in text
