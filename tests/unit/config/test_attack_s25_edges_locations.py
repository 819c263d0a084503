"""atk-s25-edges F1: a location (a conf's or the REST API's backup_uri, a CLI --target) with a
control character was taken: a NUL crashed the overlap check with ValueError (HTTP 500 from
POST /runs/snapshot_export, a traceback from the CLI), a newline or an escape named a new
directory and went to logs and terminals as it was. The config refused them already; every
door's location check (config._check_location) now does."""

import pytest

from seglake import contract
from seglake.config import Settings
from seglake.errors import ConfigError, ValidationError
from seglake.lifecycle.backup import bundle

BAD = ["/tmp/a\x00b", "/tmp/a\nb", "/tmp/a\x1b[31m", "/tmp/a\tb", "/tmp/a\x7fb", "s3://bucket/a\x00"]


@pytest.mark.parametrize("uri", BAD)
def test_a_conf_location_with_a_control_character_is_refused_naming_the_key(uri):
    key = contract.SPECS["snapshot_export"]["backup_uri"]
    with pytest.raises(ValidationError, match=r"conf key 'backup_uri' \(Backup target\): .* is not allowed; allowed: "
                                              r"an absolute local path"):
        key.check("backup_uri", uri)


@pytest.mark.parametrize("uri", BAD)
def test_the_cli_and_preflight_target_check_refuses_it_without_a_crash(uri, tmp_path):
    settings = Settings.load(env={}).replace(store_uri=str(tmp_path / "store"))
    with pytest.raises(ConfigError, match="control character"):
        bundle.target_uri(settings, uri)


def test_a_plain_location_still_passes(tmp_path):
    settings = Settings.load(env={}).replace(store_uri=str(tmp_path / "store"))
    assert bundle.target_uri(settings, str(tmp_path / "backup")) == str(tmp_path / "backup")
    assert contract.SPECS["snapshot_export"]["backup_uri"].check("backup_uri", "/tmp/a b") == "/tmp/a b"


# -- F7: the one CLI number that was not a Limit ---------------------------------------------------
@pytest.mark.parametrize("text", ["\u0663", " 3", "+3", "0_3", "03", "5", "0"])
def test_cluster_workers_is_a_plain_decimal_in_range(text, capsys):
    """`cluster --workers` was `type=int`: int() takes Arabic-Indic digits, a sign, spaces
    and '_' ('\u0663' started 3 workers), unlike every other number flag (limits.Limit.parse)."""
    from seglake.cli.parser import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["cluster", "status", "--workers", text])
    assert e.value.code == 2
    assert "--workers" in capsys.readouterr().err


def test_cluster_workers_in_range_still_parses():
    from seglake.cli.parser import build_parser

    assert build_parser().parse_args(["cluster", "status", "--workers", "4"]).workers == 4
