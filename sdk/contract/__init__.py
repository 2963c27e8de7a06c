"""What crosses a boundary between jobtap's stages, each defined once here and
imported by the stage that writes it and the one that reads it.

- :mod:`jobtap.contract.keys`: every Redis key and channel name of a site
  (:class:`~jobtap.contract.keys.SiteKeys`; ``jobtap.keys`` is the same module
  under its public name);
- :mod:`jobtap.contract.meta`: the field names of a site's ``meta`` hash, each with
  who writes it and who reads it (a new field goes there, and only there);
- :mod:`jobtap.contract.chunk`: what the collector ships to the workers;
- :mod:`jobtap.contract.epoch` (with ``epoch.lua``): the site epoch, checked by the
  collector before each cycle and by the workers in every write;
- :mod:`jobtap.contract.lease`: the collector's lease, its generation, and the fence
  the workers' write runs against it.

The event and the normalised record, which readers see too, are ``jobtap.events``
and ``jobtap.schema``.  ``tests/test_contract.py`` fails on a ``meta`` field name or a
key name spelled as a string literal anywhere else.

This package imports nothing by itself: ``import jobtap.keys`` loads no redis-py.
"""
