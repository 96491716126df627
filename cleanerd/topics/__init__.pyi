"""The front door of ``cleanerd.topics``: what other packages may use (see __init__.py)."""

from ._catalog import (
    BROKER_TOPIC_DEFAULTS as BROKER_TOPIC_DEFAULTS,
)
from ._catalog import (
    KNOWN_SETTINGS as KNOWN_SETTINGS,
)
from ._catalog import (
    UNUSED_TOPIC_SETTINGS as UNUSED_TOPIC_SETTINGS,
)
from ._catalog import (
    InvalidTopicConfigError as InvalidTopicConfigError,
)
from ._catalog import (
    parse_cleanup_policy as parse_cleanup_policy,
)
from ._model import (
    LogConfig as LogConfig,
)
from ._model import (
    RetentionConfig as RetentionConfig,
)
from ._model import (
    Strategy as Strategy,
)
from ._model import (
    StrategyConfig as StrategyConfig,
)
from ._model import (
    TopicCleanerConfig as TopicCleanerConfig,
)
from ._model import (
    TopicSettings as TopicSettings,
)
