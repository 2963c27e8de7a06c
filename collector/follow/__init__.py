"""Follow mode: pushes name the jobs that changed, and the collector refreshes
those at once (:mod:`.follower`), between its full cycles.

- :mod:`.pokes`: the site's poke stream, written by ``jobtap poke`` and read here;
- :mod:`.feed`: a backend's own event feed (Flux's journal) turned into pokes;
- :mod:`.reads`: how poked jobs are read, the way the backend gives
  (``PokedReads``), within :mod:`.budget`, the bound on what that costs;
- :mod:`.follower`: the serving loop, re-checks, and serving pokes beside a cycle.
"""
