"""One typed configuration for a training run (``stellaris train``).

Sources, lowest to highest precedence: defaults < a preset (``--preset paper``) < TOML file
(``--config run.toml``) < environment variables (``STELLARIS_<FIELD>``, e.g.
``STELLARIS_ACTORS=4``; ``STELLARIS_AGGREGATION__V0=2`` in a section) < command-line flags.
The resolved config is saved as ``config.json`` in the run folder (secrets redacted); every
field is listed in docs/configuration.md (``python -m orchestrator.config.doc``).
"""

from orchestrator.config.load import (
    MOVED,
    PRESET_NOTES,
    PRESETS,
    RENAMED,
    ConfigError,
    load_config,
    move_old_keys,
)
from orchestrator.config.sections import AggregationConfig, ExperimentalConfig
from orchestrator.config.train import TrainConfig

__all__ = ["MOVED", "PRESETS", "PRESET_NOTES", "RENAMED", "AggregationConfig", "ConfigError",
           "ExperimentalConfig", "TrainConfig", "load_config", "move_old_keys"]
