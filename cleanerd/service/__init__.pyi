"""The front door of ``cleanerd.service``: what other packages may use (see __init__.py)."""

from ._daemon import Daemon as Daemon, StartupError as StartupError
from ._kernels import KernelLoad as KernelLoad, load_kernels as load_kernels
from ._logging import configure_logging as configure_logging
from ._runner import run_async as run_async
from ._snapshot_fetch import FetchError as FetchError, fetch_snapshot as fetch_snapshot
from ._status import DaemonStatus as DaemonStatus
