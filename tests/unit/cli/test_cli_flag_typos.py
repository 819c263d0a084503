"""A misspelt flag is named with the closest valid one, also when the flag misspelt is a
required one: argparse then stops at "required: --as-of" before it looks at unknown
flags, which left the newcomer's typo (--as-off) unsaid. Exit 2, one error line."""

import pytest

from seglake.cli import main


@pytest.mark.parametrize("argv, said", [
    (["restore", "demo", "t", "--as-off", "2026-11-27T12:00:00Z"],
     "the following arguments are required: --as-of; --as-off: did you mean --as-of?"),
    (["snapshots", "pin", "demo", "s", "--tll-hours", "2"],
     "required: --ttl-hours; --tll-hours: did you mean --ttl-hours?"),
    (["gc", "schedule", "set", "--dryrun"],
     "one of the arguments --dry-run --execute is required; --dryrun: did you mean --dry-run?"),
    (["snapshots", "create", "demo", "s", "--tll-hours", "2"],
     "unrecognized arguments: --tll-hours 2; --tll-hours: did you mean --ttl-hours?"),
    # an abbreviation is a typo too (argparse took --min-segment-row as --min-segment-rows)
    (["compaction", "policy", "set", "demo", "--min-segment-row", "5"],
     "unrecognized arguments: --min-segment-row 5; --min-segment-row: did you mean --min-segment-rows?"),
    (["snapshots", "pin", "demo", "s", "--ttl", "2"],
     "required: --ttl-hours; --ttl: did you mean --ttl-hours?"),
])
def test_misspelt_flag_named_with_the_closest(argv, said, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert said in err, err
    assert len([line for line in err.splitlines() if ": error: " in line]) == 1


def test_required_missing_without_typo_says_only_that(capsys):
    with pytest.raises(SystemExit):
        main(["restore", "demo", "t"])
    err = capsys.readouterr().err
    assert "required: --as-of" in err and "did you mean" not in err
