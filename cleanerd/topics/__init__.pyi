"""The front door of ``cleanerd.topics``: what other packages may use (see __init__.py)."""

from ._catalog import (
    BROKER_TOPIC_DEFAULTS as BROKER_TOPIC_DEFAULTS,
    KNOWN_SETTINGS as KNOWN_SETTINGS,
    UNUSED_TOPIC_SETTINGS as UNUSED_TOPIC_SETTINGS,
    InvalidTopicConfigError as InvalidTopicConfigError,
    parse_cleanup_policy as parse_cleanup_policy,
)
from ._model import (
    LogConfig as LogConfig,
    RetentionConfig as RetentionConfig,
    Strategy as Strategy,
    StrategyConfig as StrategyConfig,
    TopicCleanerConfig as TopicCleanerConfig,
    TopicSettings as TopicSettings,
)
