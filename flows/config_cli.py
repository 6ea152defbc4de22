"""`flywheel config show|diff`: the resolved run config, and what differs between two.

    flywheel config show [RUN_ID | --config F] [--set KEY=VALUE ...] [--format toml|json]
    flywheel config diff A B          A, B: a TOML file, a preset name (tiny-cpu, r-zero, ...)
                                      or a run id (its recorded config)

`show` prints every key with its value, defaults included, as TOML that loads back to the same
config (configs/dump.py); with a run id, the config the run was last started with. A name that
is no file but a shipped preset is that preset, as `run --config` reads it, unless a run of that
id is recorded (the user's own run comes first). `diff` prints one line per dotted key whose
value differs (`train.warmup.max_steps: 600 -> 60`) and exits 0 either way. `--set KEY=VALUE`
(repeatable) is the override of `run` and `resume`: the value is read as TOML (`4`, `0.1`,
`true`, `"text"`, `[1, 2]`), else as a plain string (`--set model.path=/models/qwen`). Light: no
torch, no Prefect.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer

config_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Show a run config with every default, or compare two.")

SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", metavar="KEY=VALUE",
    help="override a config key (repeatable; dotted keys, e.g. train.warmup.max_steps=60)")]
DataRootOpt = Annotated[Path, typer.Option("--data-root", envvar="FLYWHEEL_DATA_ROOT",
                                           help="where the catalog and datasets live")]


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def parse_sets(values: list[str] | None) -> dict[str, Any]:
    """`--set` values -> {dotted key: value}; a value that is not TOML stays a string.

    Raises
    ------
    ValueError
        A value without `=` or with an empty key (the message names it and the form).
    """
    overrides: dict[str, Any] = {}
    for item in values or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            msg = f"--set {item!r}: use KEY=VALUE with a dotted key, e.g. --set rounds=2"
            raise ValueError(msg)
        try:
            overrides[key] = tomllib.loads(f"value = {text.strip()}")["value"]
        except tomllib.TOMLDecodeError:
            overrides[key] = text.strip()
    return overrides


def _is_file(name: str) -> bool:
    try:
        return Path(name).is_file()
    except OSError:  # a name too long for a path: not a file (and no run id either)
        return False


def recorded_config(data_root: Path, run_id: str) -> dict[str, Any] | None:
    """The config a run was last started with, as nested dicts: its catalog row, else the
    record written before the row existed (storage/run_record.py); None when neither exists.

    Raises
    ------
    ConfigError
        The record is not UTF-8 text, not JSON or not a JSON object (damaged or edited by
        hand): one line naming the file or catalog and the fix, so `resume` and `config show
        RUN` refuse it before anything is written (validating its keys is the caller's).
    """
    from configs import ConfigError
    from storage.catalog import Catalog
    from storage.run_record import read_run_config, run_config_path

    catalog = Catalog(data_root)
    recorded = catalog.run_config_json(run_id) if catalog.path.exists() else None
    source = f"run {run_id}'s row in {catalog.path}"
    fix = f"give the config again: `flywheel resume {run_id} --config FILE`"
    if not recorded:
        source = str(run_config_path(data_root, run_id))
        fix = f"restore that file, or {fix}"
        try:
            recorded = read_run_config(data_root, run_id)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config error in {source}: the recorded config cannot be read "
                              f"({exc}); {fix}") from None
        if recorded is None:
            return None
    try:
        data = json.loads(recorded)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError names its line and column
        raise ConfigError(f"config error in {source}: the recorded config is not JSON ({exc}); "
                          f"{fix}") from None
    if not isinstance(data, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(data), "a number")
        raise ConfigError(f"config error in {source}: the recorded config is {kind}, not a JSON "
                          f"object; {fix}")
    return data


def _names_preset(name: str, data_root: Path) -> bool:
    """Whether `name` is a shipped preset (configs/presets.py) and no run of that id is recorded
    (a damaged record counts as recorded: reading it then says what is wrong)."""
    from configs import ConfigError
    from configs.presets import presets

    if name not in presets():
        return False
    try:
        return recorded_config(data_root, name) is None
    except ConfigError:
        return False


def resolve(source: str | None, config: Path | None, sets: list[str] | None,
            data_root: Path) -> Any:
    """The RunConfig named by a run id (`source`) or a TOML file (`config`, or a `source` that
    is a file), with `--set` overrides; the defaults when neither is given. User errors exit 2."""
    from configs import ConfigError, apply_overrides, load_config, validate_config
    from configs.presets import config_file

    try:
        overrides = parse_sets(sets)
    except ValueError as exc:
        _fail(str(exc))
    if source is not None and config is not None:
        _fail("give a run id or --config FILE, not both")
    if source is not None and (source.endswith(".toml") or _is_file(source)
                               or _names_preset(source, data_root)):
        source, config = None, Path(source)  # config_file below finds a preset by its name
    try:
        if source is None:
            return load_config(config_file(config), overrides)
        from storage.paths import InvalidRunId, check_run_id

        try:  # neither a file nor a run id: the rule of storage/paths.py
            check_run_id(source)
        except InvalidRunId as exc:
            _fail(f"{exc} (nor a config file)")
        recorded = recorded_config(data_root, source)
        if recorded is None:
            _fail(f"unknown run id {source!r} in {data_root} (`flywheel runs` lists them; a "
                  "config file needs --config or a .toml name)")
        label = f"run {source}"
        return validate_config(apply_overrides(recorded, overrides, label), label)
    except ConfigError as exc:
        _fail(str(exc))


@config_app.command()
def show(
    run_id: Annotated[str | None, typer.Argument(
        help="a run id (its recorded config) or a TOML file; default: the built-in defaults")
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="a run config TOML")] = None,
    sets: SetOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="toml | json")] = "toml",
    data_root: DataRootOpt = Path("flywheel-data"),
) -> None:
    """Print the resolved config: every key, defaults included."""
    from configs.dump import to_toml

    if fmt not in ("toml", "json"):
        _fail(f"--format {fmt!r}: use toml or json")
    data = resolve(run_id, config, sets, data_root).model_dump(mode="json")
    typer.echo(json.dumps(data, indent=2) if fmt == "json" else to_toml(data), nl=fmt == "json")


@config_app.command()
def diff(
    first: Annotated[str, typer.Argument(help="a TOML file, a preset name or a run id")],
    second: Annotated[str, typer.Argument(help="a TOML file, a preset name or a run id")],
    data_root: DataRootOpt = Path("flywheel-data"),
) -> None:
    """Print each key whose value differs between two configs (files, presets or runs'
    recorded ones)."""
    from configs.dump import flatten, toml_value

    a = flatten(resolve(first, None, None, data_root).model_dump(mode="json"))
    b = flatten(resolve(second, None, None, data_root).model_dump(mode="json"))

    def shown(value: Any) -> str:
        return "(unset)" if value is None else toml_value(value)

    changed = [key for key in sorted(a.keys() | b.keys()) if a.get(key) != b.get(key)]
    for key in changed:
        typer.echo(f"{key}: {shown(a.get(key))} -> {shown(b.get(key))}")
    if not changed:
        typer.echo("no differences")
