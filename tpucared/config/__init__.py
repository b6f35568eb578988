"""The TOML config file: load it, validate it, hand out frozen values.

The file is a contract with the user; README.md's "Configuration" section documents every
key. In the flow, the CLI finds and loads the file (`resolve_config_path`, `load_config`),
and the runtime and the demo only read the frozen `Config` it returns: its fleets are the
core's `FleetSpec`s and its planner tunables a core `Policy`. This package imports only
`tpucared.core` (and pydantic); nothing above it is visible from here.

Modules, in the order a file goes through them:
- `load.py`: finding and reading the file, the two validation passes, `ConfigError`;
- `schema.py`: pass one, the shape: one pydantic model per TOML table, with defaults;
- `syntax.py`: values with their own syntax (durations, names, zones, labels, ...);
- `node_options.py`: the `[fleet.node_options]` values and their rules across keys;
- `messages.py`: pydantic's problems as one-line `KEY: message`s;
- `problems.py`: `Problems`, the rules across keys' (KEY, message) pairs;
- `build.py`: pass two, rules across keys, turning the schema into the frozen values;
- `apis.py`: a fleet's cloud API ("tpu" or "compute") and the keys each one takes;
- `guard.py`: the `[guard]` budget the fleets must stay within;
- `values.py`: the frozen values handed out: `Config` and its parts.

Only the names below are the package's interface; import them from `tpucared.config`.
"""

from tpucared.config.load import (
    ENV_VAR,
    ConfigError,
    load_config,
    parse_config,
    resolve_config_path,
)
from tpucared.config.values import Config, DaemonConfig, GcpConfig, GuardConfig, SshConfig

__all__ = [
    "ENV_VAR",
    "Config",
    "ConfigError",
    "DaemonConfig",
    "GcpConfig",
    "GuardConfig",
    "SshConfig",
    "load_config",
    "parse_config",
    "resolve_config_path",
]
