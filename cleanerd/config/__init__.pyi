"""The front door of ``cleanerd.config``: what other packages may use (see __init__.py)."""

from ._settings import (
    FIELDS as FIELDS,
    LISTEN as LISTEN,
    MAX_CLEANER_THREADS as MAX_CLEANER_THREADS,
    MIB as MIB,
    RESTART_SETTINGS as RESTART_SETTINGS,
    SECRET as SECRET,
    TLS_CERT as TLS_CERT,
    TLS_KEY as TLS_KEY,
    CleanerdConfig as CleanerdConfig,
    ConfigError as ConfigError,
    ConfigProblem as ConfigProblem,
    LoadedConfig as LoadedConfig,
    changed_settings as changed_settings,
    load_config as load_config,
    restart_only as restart_only,
)
from ._sources import (
    join_listen as join_listen,
    parse_listen as parse_listen,
    topic_key as topic_key,
)
from ._tls import (
    TlsError as TlsError,
    client_context as client_context,
    load_chain as load_chain,
)
from ._warnings import (
    config_warnings as config_warnings,
    http_warnings as http_warnings,
    is_loopback_host as is_loopback_host,
)
