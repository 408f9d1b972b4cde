"""The results site: ``alflow results serve ROOT`` browses a results root over HTTP, read-only.

- :mod:`alflow.site.pages`: typed page data (runs index, trends, reference tables) built from
  :class:`alflow.results.catalog.Catalog`; the HTML pages and the JSON API serialize the same objects.
- :mod:`alflow.site.charts`: the trend charts (inline SVG, no script).
- :mod:`alflow.site.guard`: what keeps it read-only and confined: methods, paths, the token, headers.
- :mod:`alflow.site.reference`: the reference page's data (tables in the root, M0 history per key).
- :mod:`alflow.site.app`: the aiohttp application (routes, handlers, background refresh).
- :mod:`alflow.site.server`: :func:`alflow.site.server.serve`: bind, serve until SIGINT/SIGTERM, stop cleanly.
"""
