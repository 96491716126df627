"""The front door of ``cleanerd.config``: what other packages may use (see __init__.py)."""

from ._settings import (
    FIELDS as FIELDS,
)
from ._settings import (
    LISTEN as LISTEN,
)
from ._settings import (
    MAX_CLEANER_THREADS as MAX_CLEANER_THREADS,
)
from ._settings import (
    MIB as MIB,
)
from ._settings import (
    RESTART_SETTINGS as RESTART_SETTINGS,
)
from ._settings import (
    SECRET as SECRET,
)
from ._settings import (
    CleanerdConfig as CleanerdConfig,
)
from ._settings import (
    ConfigError as ConfigError,
)
from ._settings import (
    ConfigProblem as ConfigProblem,
)
from ._settings import (
    LoadedConfig as LoadedConfig,
)
from ._settings import (
    changed_settings as changed_settings,
)
from ._settings import (
    load_config as load_config,
)
from ._settings import (
    restart_only as restart_only,
)
from ._sources import join_listen as join_listen
from ._sources import parse_listen as parse_listen
from ._sources import topic_key as topic_key
from ._warnings import (
    config_warnings as config_warnings,
)
from ._warnings import (
    exposure_warning as exposure_warning,
)
from ._warnings import (
    is_loopback_host as is_loopback_host,
)
