"""Redis key and channel names: :mod:`jobtap.contract.keys` under its public name."""

from .contract.keys import EVERY_KEY as EVERY_KEY
from .contract.keys import EVERY_STREAM as EVERY_STREAM
from .contract.keys import POKES_MAXLEN as POKES_MAXLEN
from .contract.keys import PREFIX as PREFIX
from .contract.keys import SITE_IN_PATTERN as SITE_IN_PATTERN
from .contract.keys import BadName as BadName
from .contract.keys import SiteKeys as SiteKeys
from .contract.keys import bell_key as bell_key
from .contract.keys import check_site as check_site
from .contract.keys import escape_user as escape_user
from .contract.keys import is_user_channel as is_user_channel
from .contract.keys import unescape_user as unescape_user

__all__ = [
    "EVERY_KEY",
    "EVERY_STREAM",
    "POKES_MAXLEN",
    "PREFIX",
    "SITE_IN_PATTERN",
    "BadName",
    "SiteKeys",
    "bell_key",
    "check_site",
    "escape_user",
    "is_user_channel",
    "unescape_user",
]
